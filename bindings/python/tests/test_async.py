"""The asyncio AsyncClient, in both modes, against real servers."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest

import mcphost
from conftest import Opener, run, text_of, wait_in_flight_async
from test_sync import FORM


def test_async_list_tools_and_call_one_on_each_server(opener: Opener) -> None:
    async def body() -> None:
        async with await opener.aio() as c:
            names = {t["name"] for t in await c.list_tools()}
            assert {"ts__echo", "ev__echo"} <= names
            r1, r2 = await asyncio.gather(
                c.call_tool("ts__echo", {"text": "a"}), c.call_tool("ev__echo", {"message": "b"})
            )
            assert text_of(r1) == "a" and "b" in text_of(r2)
            with pytest.raises(mcphost.RpcError) as e:
                await c.request("no/such/method")
            assert e.value.code == -32601
        assert c.closed

    run(body())


def test_async_elicitation_callback_runs_on_the_clients_loop(opener: Opener) -> None:
    async def body() -> None:
        loop = asyncio.get_running_loop()
        on_loop: list[bool] = []

        async def elicit(req: dict[str, Any]) -> dict[str, Any]:
            on_loop.append(asyncio.get_running_loop() is loop)
            # The client is usable from inside its own callback.
            await c.status()
            return {"action": "accept", "content": {"name": "Grace"}}

        c = await opener.aio(elicitation=elicit)
        r = await c.call_tool("ts__elicit", FORM)
        assert json.loads(text_of(r)) == {"action": "accept", "content": {"name": "Grace"}}
        assert on_loop == [True]
        await c.aclose()

    run(body())


def test_async_client_with_a_sync_callback_runs_it_off_the_loop(opener: Opener) -> None:
    async def body() -> None:
        loop_thread = threading.current_thread().name
        names: list[str] = []

        # The callback blocks until the loop has run a task after the
        # callback started: it can only if the callback is off the loop.
        started = threading.Event()
        loop_ran = threading.Event()

        def sample(req: dict[str, Any]) -> dict[str, Any]:
            names.append(threading.current_thread().name)
            started.set()
            if not loop_ran.wait(10):
                raise AssertionError("the loop was blocked while the callback ran")
            return {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}

        c = await opener.aio(sampling=sample)

        async def watcher() -> None:
            while not started.is_set():
                await asyncio.sleep(0.001)
            loop_ran.set()

        t = asyncio.create_task(watcher())
        r = await c.call_tool("ts__sample", {"prompt": "x"})
        t.cancel()
        assert json.loads(text_of(r))["content"]["text"] == "ok"
        assert names and names[0] != loop_thread and names[0].startswith("mcphost-host")
        assert loop_ran.is_set(), "the loop was blocked while the callback ran"
        await c.aclose()

    run(body())


def test_events_by_async_iterator(opener: Opener) -> None:
    async def body() -> None:
        c = await opener.aio()
        while await c.next_event(0) is not None:
            pass
        old_pid = next(s["pid"] for s in await c.servers() if s["name"] == "ts")
        await c.request("mcphost/servers/restart", {"name": "ts"})
        seen: list[dict[str, Any]] = []

        async def until_ready() -> None:
            async for ev in c.events():
                seen.append(ev)
                p = ev.get("params") or {}
                if (
                    ev["method"] == mcphost.methods.EVENT_SERVER_STATE
                    and p.get("name") == "ts"
                    and p.get("state") == "ready"
                    and p.get("pid") not in (None, old_pid)
                ):
                    return

        await asyncio.wait_for(until_ready(), 30)
        assert any(e["method"] == mcphost.methods.EVENT_SERVER_STATE for e in seen)

        # The iterator ends when the client closes.
        async def drain() -> int:
            n = 0
            async for _ in c.events():
                n += 1
            return n

        task = asyncio.create_task(drain())
        await asyncio.sleep(0.2)
        await c.aclose()
        await asyncio.wait_for(task, 10)

    run(body())


def test_async_on_event_runs_on_the_loop(opener: Opener) -> None:
    async def body() -> None:
        loop = asyncio.get_running_loop()
        got: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def on_event(ev: dict[str, Any]) -> None:
            assert asyncio.get_running_loop() is loop
            await got.put(ev)

        c = await opener.aio(on_event=on_event)
        with pytest.raises(mcphost.UnsupportedError):
            await c.next_event(0)
        await c.call_tool("ts__slow", {"ms": 350}, progress_token=99)
        deadline = time.monotonic() + 5
        progress = []
        while time.monotonic() < deadline and len(progress) < 2:
            try:
                ev = await asyncio.wait_for(got.get(), 0.5)
            except asyncio.TimeoutError:
                continue
            if ev["method"] == mcphost.methods.EVENT_PROGRESS:
                progress.append(ev)
        assert len(progress) >= 2 and all(p["params"]["progressToken"] == 99 for p in progress)
        await c.aclose()

    run(body())


def test_async_progress_events_by_iterator(opener: Opener) -> None:
    async def body() -> None:
        c = await opener.aio()
        while await c.next_event(0) is not None:
            pass
        call = asyncio.create_task(
            c.call_tool("ev__trigger-long-running-operation", {"duration": 1, "steps": 4}, progress_token="evp")
        )
        progress = []

        async def collect() -> None:
            async for ev in c.events():
                if ev["method"] == mcphost.methods.EVENT_PROGRESS:
                    progress.append(ev["params"])
                    if len(progress) == 4:
                        return

        await asyncio.wait_for(collect(), 15)
        r = await call
        assert "completed" in text_of(r)
        assert [p["progress"] for p in progress] == [1, 2, 3, 4]
        assert {p["progressToken"] for p in progress} == {"evp"}
        await c.aclose()

    run(body())


def _cancelled_in_server_log(lines: list[str]) -> bool:
    return any("cancelled by the client" in line for line in lines)


def test_cancelling_the_awaiting_task_cancels_the_request(opener: Opener) -> None:
    async def body() -> None:
        c = await opener.aio()
        task = asyncio.create_task(c.call_tool("ts__slow", {"ms": 30000}))
        await wait_in_flight_async(c, "slow")
        t0 = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # At once, not after the call's 30 s (a bound for a hang only: a
        # loaded machine must not fail it).
        assert time.monotonic() - t0 < 10
        # The server was told (notifications/cancelled), and the client works.
        deadline = time.monotonic() + 10
        while True:
            logs = await c.request("mcphost/servers/logs", {"name": "ts"})
            if _cancelled_in_server_log(logs["lines"]):
                break
            assert time.monotonic() < deadline, logs
            await asyncio.sleep(0.1)
        assert text_of(await c.call_tool("ts__echo", {"text": "alive"})) == "alive"
        await c.aclose()

    run(body())


def test_pending_request_cancel_raises_mcphost_cancelled_error(opener: Opener) -> None:
    async def body() -> None:
        c = await opener.aio()
        p = c.start_request("tools/call", {"name": "ts__slow", "arguments": {"ms": 30000}})
        await wait_in_flight_async(c, "slow")
        t0 = time.monotonic()
        p.cancel()
        with pytest.raises(mcphost.CancelledError) as e:
            await p
        # At once, not after the call's 30 s (a bound for a hang only: a
        # loaded machine must not fail it).
        assert time.monotonic() - t0 < 10
        assert e.value.status == 11
        p.cancel()  # after completion: a no-op
        # wait_for on request: mcphost's TimeoutError, and the request is cancelled.
        with pytest.raises(mcphost.TimeoutError):
            await c.request("tools/call", {"name": "ts__slow", "arguments": {"ms": 30000}}, timeout=0.2)
        assert text_of(await c.call_tool("ts__echo", {"text": "x"})) == "x"
        await c.aclose()

    run(body())


def test_aclose_ends_pending_requests_with_closed_error(opener: Opener) -> None:
    async def body() -> None:
        c = await opener.aio()
        task = asyncio.create_task(c.call_tool("ts__slow", {"ms": 30000}))
        await wait_in_flight_async(c, "slow")
        await c.aclose()
        with pytest.raises(mcphost.ClosedError):
            await asyncio.wait_for(task, 10)
        with pytest.raises(mcphost.ClosedError):
            await c.status()

    run(body())
