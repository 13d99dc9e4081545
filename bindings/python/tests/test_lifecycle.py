"""Opening and closing: errors on open, and nothing left behind at close."""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
import time
import weakref
from typing import Any, Callable

import pytest

import mcphost
from conftest import Daemon, run, wait_gone, text_of


def test_connect_to_a_missing_socket_raises_not_running() -> None:
    d = tempfile.mkdtemp(prefix="mcph-")
    path = os.path.join(d, "none.sock")
    try:
        _missing_socket(path)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _missing_socket(path: str) -> None:
    with pytest.raises(mcphost.NotRunningError) as e:
        mcphost.connect(path)
    assert e.value.status == 6 and e.value.status_name == "MCPHOST_ERR_NOT_RUNNING"
    assert path in str(e.value) and "mcphost daemon" in str(e.value)
    assert isinstance(e.value, ConnectionError)

    async def body() -> None:
        with pytest.raises(mcphost.NotRunningError):
            await mcphost.connect_async(path)

    run(body())


def test_bad_config_raises_config_error_naming_the_field(binaries: dict[str, str]) -> None:
    bad = {"servers": {"broken": {"command": 42}}}
    with pytest.raises(mcphost.ConfigError) as e:
        mcphost.open_embedded(bad)
    assert e.value.status == 5
    assert "servers.broken.command" in str(e.value), str(e.value)
    # JSONC text: comments are fine, a wrong type is not.
    with pytest.raises(mcphost.ConfigError) as e:
        mcphost.open_embedded('{\n  // a comment\n  "servers": {"x": {"command": "ok", "args": "no"}}\n}')
    assert "servers.x.args" in str(e.value), str(e.value)
    with pytest.raises(mcphost.ConfigError):
        mcphost.open_embedded("{not json")
    with pytest.raises(TypeError):
        mcphost.open_embedded(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        mcphost.open_embedded({"servers": {}}, elicitation=lambda r: {}, elicitation_modes=("fax",))


def test_jsonc_config_text_opens(binaries: dict[str, str]) -> None:
    text = (
        "{\n  // the test server\n"
        f'  "servers": {{"ts": {{"command": "{binaries["testserver"]}"}},}},\n'
        "}\n"
    )
    with mcphost.open_embedded(text, wait_ready=30) as c:
        assert text_of(c.call_tool("ts__echo", {"text": "jsonc"})) == "jsonc"


def _server_pids(c: mcphost.Client) -> list[int]:
    pids = [s["pid"] for s in c.servers()]
    assert len(pids) == 2 and all(isinstance(p, int) for p in pids)
    return pids


def test_close_embedded_leaves_no_process_and_releases_callbacks(config: dict[str, Any]) -> None:
    before = mcphost._core.registered_count()

    def elicit(req: dict[str, Any]) -> dict[str, Any]:
        return {"action": "decline"}

    ref = weakref.ref(elicit)
    c = mcphost.open_embedded(config, wait_ready=60, elicitation=elicit, sampling=elicit, roots=elicit)
    del elicit
    assert mcphost._core.registered_count() == before + 3
    pids = _server_pids(c)
    assert all(p != os.getpid() for p in pids)
    c.close()
    # mcphost_free returns only when no server process is left.
    assert wait_gone(pids, timeout=0) == []
    assert mcphost._core.registered_count() == before
    gc.collect()
    assert ref() is None, "the callback outlived the client"


def test_close_async_embedded_leaves_no_process(config: dict[str, Any]) -> None:
    async def body() -> list[int]:
        async with await mcphost.open_embedded_async(config, wait_ready=60) as c:
            pids = [s["pid"] for s in await c.servers()]
            assert len(pids) == 2
        return pids

    pids = run(body())
    assert wait_gone(pids, timeout=0) == []


def test_close_connected_leaves_the_daemon_and_then_its_servers_go(
    config: dict[str, Any], daemon_factory: Callable[[dict[str, Any]], Daemon]
) -> None:
    d = daemon_factory(config)
    before = mcphost._core.registered_count()
    c = mcphost.connect(d.socket, client_name="py-close", roots=lambda r: {"roots": []})
    pids = _server_pids(c)
    with mcphost.connect(d.socket) as watcher:
        assert watcher.status()["clients"] == 2
        c.close()
        deadline = time.monotonic() + 10
        while watcher.status()["clients"] != 1:
            assert time.monotonic() < deadline, "the daemon still counts the closed client"
            time.sleep(0.05)
    assert mcphost._core.registered_count() == before
    # The daemon's servers are the daemon's: they stop with it.
    assert wait_gone(pids, timeout=0) == pids
    assert d.stop() == 0, d.log()
    assert wait_gone(pids, timeout=10) == []


def test_unclosed_client_is_closed_with_a_resource_warning(config: dict[str, Any]) -> None:
    c = mcphost.open_embedded(config, wait_ready=60)
    pids = _server_pids(c)
    with pytest.warns(ResourceWarning):
        del c
        gc.collect()
    assert wait_gone(pids, timeout=0) == []


def test_request_timeout_option_applies_to_every_request(opener: Any) -> None:
    c = opener.sync(client_name="py-timeout", request_timeout=1.5)
    t0 = time.monotonic()
    with pytest.raises(mcphost.TimeoutError) as e:
        c.call_tool("ts__slow", {"ms": 20000})
    assert 1.0 < time.monotonic() - t0 < 10
    assert "ts__slow" in str(e.value) or "tools/call" in str(e.value)
    assert text_of(c.call_tool("ts__echo", {"text": "ok"})) == "ok"


def test_a_connected_client_outlives_its_daemon(
    config: dict[str, Any], daemon_factory: Callable[[dict[str, Any]], Daemon]
) -> None:
    d = daemon_factory({"servers": {"ts": config["servers"]["ts"]}})
    c = mcphost.connect(d.socket, client_name="py-kept")
    try:
        assert text_of(c.call_tool("ts__echo", {"text": "before"})) == "before"
        d.crash_and_start_again()
        # No reopening: the next call goes to the new daemon.
        assert text_of(c.call_tool("ts__echo", {"text": "after"})) == "after"
        seen = []
        deadline = time.monotonic() + 10
        while "notifications/tools/list_changed" not in seen:
            assert time.monotonic() < deadline, f"events after the restart: {seen}"
            ev = c.next_event(timeout=0.5)
            if ev is not None:
                seen.append(ev.get("method"))
        assert mcphost.methods.EVENT_RECONNECTED in seen, seen
    finally:
        c.close()
