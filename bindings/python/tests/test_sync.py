"""The synchronous Client, in both modes, against real servers."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

import mcphost
from conftest import Opener, text_of, wait_in_flight

FORM = {
    "message": "Who are you?",
    "requestedSchema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    },
}


def test_list_tools_and_call_one_on_each_server(opener: Opener) -> None:
    c = opener.sync()
    names = {t["name"] for t in c.list_tools()}
    assert {"ts__echo", "ts__slow", "ts__elicit", "ev__echo", "ev__get-sum"} <= names
    assert text_of(c.call_tool("ts__echo", {"text": "héllo"})) == "héllo"
    r = c.call_tool("ev__echo", {"message": "from python"})
    assert "from python" in text_of(r)
    r = c.call_tool("ev__get-sum", {"a": 2, "b": 40})
    assert "42" in text_of(r)
    assert c.status()["servers"] == 2


def test_rpc_error_carries_code_message_and_response(opener: Opener) -> None:
    c = opener.sync()
    with pytest.raises(mcphost.RpcError) as e:
        c.call_tool("ts__no_such_tool", {})
    assert e.value.code == -32602
    assert "no_such_tool" in e.value.message
    assert e.value.status == 9 and e.value.status_name == "MCPHOST_ERR_RPC"
    assert e.value.response is not None and e.value.response["error"]["code"] == -32602
    with pytest.raises(mcphost.RpcError) as e:
        c.request("no/such/method")
    assert e.value.code == -32601
    # A tool error is a result, not an RpcError.
    assert c.call_tool("ts__fail", {"message": "boom"})["isError"] is True


def test_invalid_requests_and_notifications_raise_invalid_request(opener: Opener) -> None:
    c = opener.sync()
    with pytest.raises(mcphost.InvalidRequestError) as e:
        c.request("notifications/initialized")
    assert "mcphost_notify" in str(e.value)
    with pytest.raises(mcphost.InvalidRequestError):
        c.request("initialize", {})
    with pytest.raises(mcphost.InvalidRequestError):
        c.notify("notifications/cancelled", {"requestId": 1})
    with pytest.raises(mcphost.InvalidJsonError):
        c.request_raw("{not json")
    c.notify("notifications/roots/list_changed")


def test_request_raw_keeps_the_bytes(opener: Opener) -> None:
    c = opener.sync()
    raw = c.request_raw('{"id": 7, "method": "tools/call", "params": {"name": "ts__lossless"}}')
    assert raw.startswith('{"jsonrpc":"2.0","id":7,"result":')
    # Values a dict would mangle survive as text.
    assert "12345678901234567890123" in raw and "1.10" in raw and "1e400" in raw


def test_elicitation_sync_callback(opener: Opener) -> None:
    seen: list[dict[str, Any]] = []
    threads: list[str] = []
    holder: dict[str, mcphost.Client] = {}

    def elicit(req: dict[str, Any]) -> dict[str, Any]:
        seen.append(req)
        threads.append(threading.current_thread().name)
        # Not the library's callback thread: a blocking call works here.
        holder["c"].status()
        return {"action": "accept", "content": {"name": "Ada"}}

    c = opener.sync(elicitation=elicit)
    holder["c"] = c
    r = c.call_tool("ts__elicit", FORM)
    assert r.get("isError") is not True, r
    assert json.loads(text_of(r)) == {"action": "accept", "content": {"name": "Ada"}}
    assert len(seen) == 1
    assert seen[0]["server"] == "ts"
    assert seen[0]["method"] == "elicitation/create"
    assert seen[0]["params"]["message"] == "Who are you?"
    assert threads[0].startswith("mcphost-host"), threads


def test_elicitation_async_callback(opener: Opener) -> None:
    import asyncio

    threads: list[str] = []

    async def elicit(req: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        threads.append(threading.current_thread().name)
        return {"action": "accept", "content": {"name": req["params"]["message"][:3]}}

    c = opener.sync(elicitation=elicit)
    r = c.call_tool("ts__elicit", FORM)
    assert json.loads(text_of(r)) == {"action": "accept", "content": {"name": "Who"}}
    assert threads == ["mcphost-asyncio"]


def test_callback_exceptions_answer_the_server_with_an_error(opener: Opener) -> None:
    def elicit(req: dict[str, Any]) -> dict[str, Any]:
        raise mcphost.RpcError(-1, "the user said no", {"reason": "busy"})

    def sample(req: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("no model here")

    c = opener.sync(elicitation=elicit, sampling=sample)
    r = c.call_tool("ts__elicit", FORM)
    assert r["isError"] is True
    assert "the user said no" in text_of(r) and "-1" in text_of(r)
    assert '"reason":"busy"' in text_of(r).replace(" ", ""), text_of(r)  # data relayed
    r = c.call_tool("ts__sample", {"prompt": "hi"})
    assert r["isError"] is True
    assert "ValueError: no model here" in text_of(r) and "-32603" in text_of(r)


def test_sampling_callback(opener: Opener) -> None:
    asked: list[dict[str, Any]] = []

    def sample(req: dict[str, Any]) -> dict[str, Any]:
        asked.append(req)
        prompt = req["params"]["messages"][0]["content"]["text"]
        return {
            "role": "assistant",
            "content": {"type": "text", "text": f"echo: {prompt}"},
            "model": "python-test",
            "stopReason": "endTurn",
        }

    c = opener.sync(sampling=sample)
    r = c.call_tool("ts__sample", {"prompt": "Say hi", "maxTokens": 7})
    answer = json.loads(text_of(r))
    assert answer["content"]["text"] == "echo: Say hi"
    assert answer["model"] == "python-test"
    assert asked[0]["method"] == "sampling/createMessage"
    assert asked[0]["params"]["maxTokens"] == 7


def test_roots_callback(opener: Opener) -> None:
    def roots(req: dict[str, Any]) -> dict[str, Any]:
        return {"roots": [{"uri": "file:///tmp/project", "name": "project"}]}

    c = opener.sync(roots=roots)
    r = c.call_tool("ts__roots")
    assert json.loads(text_of(r))["roots"][0]["uri"] == "file:///tmp/project"


def test_without_a_callback_no_host_is_asked_and_the_fallback_declines(opener: Opener) -> None:
    # docs/ipc.md, "Hosts": with no host that declared elicitation, the
    # engine's fallback answers (decline) instead of asking this client.
    c = opener.sync()
    r = c.call_tool("ts__elicit", FORM)
    assert json.loads(text_of(r)) == {"action": "decline"}, r


def _restart_and_wait_ready(c: mcphost.Client, next_event: Any) -> list[dict[str, Any]]:
    old_pid = next(s["pid"] for s in c.servers() if s["name"] == "ts")
    c.request("mcphost/servers/restart", {"name": "ts"})
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ev = next_event(1.0)
        if ev is None:
            continue
        got.append(ev)
        p = ev.get("params") or {}
        if (
            ev["method"] == mcphost.methods.EVENT_SERVER_STATE
            and p.get("name") == "ts"
            and p.get("state") == "ready"
            and p.get("pid") not in (None, old_pid)
        ):
            return got
    raise AssertionError(f"no server_state ready for the restarted ts; got {got}")


def test_events_by_next_event(opener: Opener) -> None:
    c = opener.sync()
    while c.next_event(0) is not None:  # what came while opening
        pass
    assert c.next_event(0.05) is None
    got = _restart_and_wait_ready(c, c.next_event)
    states = [e["params"]["state"] for e in got if e["method"] == mcphost.methods.EVENT_SERVER_STATE]
    assert "ready" in states


def test_events_by_on_event_callback(opener: Opener) -> None:
    import queue

    q: "queue.Queue[dict[str, Any]]" = queue.Queue()
    threads: set[str] = set()

    def on_event(ev: dict[str, Any]) -> None:
        threads.add(threading.current_thread().name)
        q.put(ev)

    c = opener.sync(on_event=on_event)
    with pytest.raises(mcphost.UnsupportedError):
        c.next_event(0)

    def next_event(timeout: float) -> dict[str, Any] | None:
        try:
            return q.get(timeout=timeout)
        except queue.Empty:
            return None

    _restart_and_wait_ready(c, next_event)
    assert threads and all(t.startswith("mcphost-events") for t in threads), threads


@pytest.mark.parametrize("server", ["ts", "ev"])
def test_progress_events_carry_the_progress_token(opener: Opener, server: str) -> None:
    c = opener.sync()
    while c.next_event(0) is not None:
        pass
    token = f"py-{server}-1"
    if server == "ts":
        r = c.call_tool("ts__slow", {"ms": 450}, progress_token=token)
        assert text_of(r) == "slept 450 ms"
    else:
        r = c.call_tool(
            "ev__trigger-long-running-operation", {"duration": 1, "steps": 3}, progress_token=token
        )
        assert r.get("isError") is not True, r
    progress = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and len(progress) < 2:
        ev = c.next_event(0.2)
        if ev is not None and ev["method"] == mcphost.methods.EVENT_PROGRESS:
            progress.append(ev["params"])
    assert len(progress) >= 2, progress
    assert all(p["progressToken"] == token for p in progress)
    assert progress[0]["progress"] < progress[-1]["progress"]


def test_request_timeout_cancels_and_the_client_still_works(opener: Opener) -> None:
    c = opener.sync()
    t0 = time.monotonic()
    with pytest.raises(mcphost.TimeoutError) as e:
        c.call_tool("ts__slow", {"ms": 20000}, timeout=0.3)
    assert time.monotonic() - t0 < 3
    assert isinstance(e.value, TimeoutError)  # the builtin too
    assert e.value.status == 10
    assert text_of(c.call_tool("ts__echo", {"text": "still here"})) == "still here"


def test_requests_from_many_threads(opener: Opener) -> None:
    c = opener.sync()
    out: dict[int, str] = {}

    def work(i: int) -> None:
        out[i] = text_of(c.call_tool("ts__echo", {"text": f"t{i}"}))

    ts = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert out == {i: f"t{i}" for i in range(16)}


def test_closing_ends_waiting_requests_with_closed_error(opener: Opener) -> None:
    c = opener.sync()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            c.call_tool("ts__slow", {"ms": 30000})
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=wait)
    t.start()
    wait_in_flight(c, "slow")
    t0 = time.monotonic()
    c.close()
    t.join(10)
    assert time.monotonic() - t0 < 10
    assert len(errors) == 1 and isinstance(errors[0], mcphost.ClosedError), errors
    with pytest.raises(mcphost.ClosedError):
        c.status()
    c.close()  # idempotent


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_close_from_inside_a_host_callback(opener: Opener, kind: str) -> None:
    holder: dict[str, mcphost.Client] = {}

    def elicit_sync(req: dict[str, Any]) -> dict[str, Any]:
        holder["c"].close()
        return {"action": "decline"}

    async def elicit_async(req: dict[str, Any]) -> dict[str, Any]:
        holder["c"].close()
        return {"action": "decline"}

    c = opener.sync(elicitation=elicit_sync if kind == "sync" else elicit_async)
    holder["c"] = c
    t0 = time.monotonic()
    with pytest.raises(mcphost.ClosedError):
        c.call_tool("ts__elicit", FORM)
    assert time.monotonic() - t0 < 15
    assert c.closed
