"""Fixtures: the servers (mcphost-testserver and server-everything), a real
daemon for the connected mode, and clients opened in either mode.

Everything the suite needs must be there: a missing binary or server fails
the run with what to do, it never skips.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import mcphost

ROOT = Path(os.environ.get("MCPHOST_REPO") or Path(__file__).resolve().parents[3])
TARGET = Path(os.environ.get("MCPHOST_BIN_DIR") or ROOT / "target" / "debug")
INTEROP = Path(os.environ.get("MCPHOST_INTEROP_DIR") or ROOT / "tests" / "interop")
EVERYTHING = INTEROP / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"

READY_TIMEOUT = 60.0


def _need(path: Path, how: str) -> str:
    if not path.exists():
        pytest.fail(f"missing {path}: {how}", pytrace=False)
    return str(path)


@pytest.fixture(scope="session")
def binaries() -> dict[str, str]:
    build = "run `cargo build --bin mcphost --bin mcphost-testserver` (scripts/test-python.sh does)"
    node = os.environ.get("MCPHOST_NODE") or shutil.which("node")
    if not node:
        pytest.fail("node is not on PATH (server-everything needs Node >= 20)", pytrace=False)
    return {
        "mcphost": _need(TARGET / "mcphost", build),
        "testserver": _need(TARGET / "mcphost-testserver", build),
        "node": node,
        "everything": _need(EVERYTHING, "run scripts/setup-interop.sh"),
    }


@pytest.fixture(scope="session", autouse=True)
def state_dir() -> Iterator[Path]:
    # Embedded engines and daemons remember servers' eras here, not in ~.
    d = Path(tempfile.mkdtemp(prefix="mcphost-py-state-"))
    old = os.environ.get("MCPHOST_STATE_DIR")
    os.environ["MCPHOST_STATE_DIR"] = str(d)
    yield d
    if old is None:
        os.environ.pop("MCPHOST_STATE_DIR", None)
    else:
        os.environ["MCPHOST_STATE_DIR"] = old
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def config(binaries: dict[str, str]) -> dict[str, Any]:
    """The test server as `ts`, server-everything as `ev`."""
    return {
        "servers": {
            "ts": {"command": binaries["testserver"]},
            "ev": {"command": binaries["node"], "args": [binaries["everything"], "stdio"]},
        }
    }


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is not running.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if pid_alive(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


class Daemon:
    """A real `mcphost daemon` on a private socket, config and state dir."""

    def __init__(self, binaries: dict[str, str], config: dict[str, Any]) -> None:
        # Socket paths are limited to ~100 bytes: a short dir of our own.
        self.dir = Path(tempfile.mkdtemp(prefix="mcph-"))
        self.socket = str(self.dir / "d.sock")
        self.config_path = self.dir / "config.json"
        self.config_path.write_text(json.dumps(config))
        self.log_path = self.dir / "daemon.log"
        self._log = open(self.log_path, "wb")
        self._mcphost = binaries["mcphost"]
        self.server_pids: list[int] = []
        self._spawn()

    def _spawn(self) -> None:
        env = dict(os.environ)
        env["MCPHOST_STATE_DIR"] = str(self.dir / "state")
        env.pop("MCPHOST_SOCKET", None)
        self.proc = subprocess.Popen(
            [self._mcphost, "daemon", "--config", str(self.config_path), "--socket", self.socket],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self._wait_ready()

    def crash_and_start_again(self) -> None:
        """SIGKILL (no clean-up of its own), then a new daemon on the same socket."""
        self.proc.kill()
        self.proc.wait()
        self._spawn()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"the daemon exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with mcphost.connect(self.socket, client_name="pytest-wait") as c:
                    wait_servers_ready(c, deadline)
                    self.server_pids = [s["pid"] for s in c.servers() if "pid" in s]
                    return
            except mcphost.NotRunningError as e:
                if time.monotonic() > deadline:
                    raise AssertionError(f"the daemon did not listen in time:\n{self.log()}") from e
                time.sleep(0.05)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _all_listed(servers: list[dict[str, Any]]) -> bool:
    # A server shows `ready` just before its first listing lands in the
    # catalog (reported to the lead): wait for its tools too; every server
    # of these tests has some.
    return bool(servers) and all(s["state"] == "ready" and s.get("tools", 0) > 0 for s in servers)


def wait_servers_ready(client: mcphost.Client, deadline: float) -> None:
    while True:
        servers = client.servers()
        if _all_listed(servers):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"servers not ready in time: {servers}")
        time.sleep(0.05)


async def wait_servers_ready_async(client: mcphost.AsyncClient, deadline: float) -> None:
    while True:
        servers = await client.servers()
        if _all_listed(servers):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"servers not ready in time: {servers}")
        await asyncio.sleep(0.05)


@pytest.fixture
def daemon_factory(binaries: dict[str, str]) -> Iterator[Callable[[dict[str, Any]], Daemon]]:
    made: list[Daemon] = []

    def make(config: dict[str, Any]) -> Daemon:
        d = Daemon(binaries, config)
        made.append(d)
        return d

    yield make
    for d in made:
        d.cleanup()
    left = [p for d in made for p in wait_gone(d.server_pids)]
    assert not left, f"server processes outlived their daemon: {left}"


@pytest.fixture(params=["embedded", "connected"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


class Opener:
    """Opens clients in the test's mode over the same config; closes them at
    the end. Connected mode starts one daemon on first use."""

    def __init__(self, mode: str, config: dict[str, Any], daemon_factory: Callable[..., Daemon]) -> None:
        self.mode = mode
        self.config = config
        self._daemon_factory = daemon_factory
        self.daemon: Daemon | None = None
        self.clients: list[Any] = []

    def _daemon(self) -> Daemon:
        if self.daemon is None:
            self.daemon = self._daemon_factory(self.config)
        return self.daemon

    def sync(self, **kw: Any) -> mcphost.Client:
        deadline = time.monotonic() + READY_TIMEOUT
        if self.mode == "embedded":
            c = mcphost.open_embedded(self.config, wait_ready=READY_TIMEOUT, **kw)
        else:
            c = mcphost.connect(self._daemon().socket, **kw)
        self.clients.append(c)
        wait_servers_ready(c, deadline)
        return c

    async def aio(self, **kw: Any) -> mcphost.AsyncClient:
        deadline = time.monotonic() + READY_TIMEOUT
        if self.mode == "embedded":
            c = await mcphost.open_embedded_async(self.config, wait_ready=READY_TIMEOUT, **kw)
        else:
            socket = await asyncio.get_running_loop().run_in_executor(None, lambda: self._daemon().socket)
            c = await mcphost.connect_async(socket, **kw)
        self.clients.append(c)
        await wait_servers_ready_async(c, deadline)
        return c

    def close_all(self) -> None:
        for c in self.clients:
            if isinstance(c, mcphost.Client):
                c.close()
            elif not c.closed:
                # An AsyncClient whose loop is gone: close it directly.
                c._h.free()


@pytest.fixture
def opener(mode: str, config: dict[str, Any], daemon_factory: Callable[..., Daemon]) -> Iterator[Opener]:
    o = Opener(mode, config, daemon_factory)
    yield o
    o.close_all()


def _in_flight(logs: dict[str, Any], tool: str) -> int:
    # mcphost-testserver logs this line as a blocking call starts.
    return sum(f"in flight: tools/call {tool}" in line for line in logs["lines"])


def wait_in_flight(client: mcphost.Client, tool: str, count: int = 1, timeout: float = 20.0) -> None:
    """Until `count` calls of the test server's `tool` are pending at it."""
    deadline = time.monotonic() + timeout
    while (n := _in_flight(client.request("mcphost/servers/logs", {"name": "ts"}), tool)) < count:
        assert time.monotonic() < deadline, f"{n} of {count} calls of {tool} pending at the server"
        time.sleep(0.05)


async def wait_in_flight_async(
    client: mcphost.AsyncClient, tool: str, count: int = 1, timeout: float = 20.0
) -> None:
    deadline = time.monotonic() + timeout
    while (n := _in_flight(await client.request("mcphost/servers/logs", {"name": "ts"}), tool)) < count:
        assert time.monotonic() < deadline, f"{n} of {count} calls of {tool} pending at the server"
        await asyncio.sleep(0.05)


def run(coro: Any, timeout: float = 90.0) -> Any:
    """Run an async test body on a fresh loop, with a deadline."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def text_of(result: dict[str, Any]) -> str:
    return "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
