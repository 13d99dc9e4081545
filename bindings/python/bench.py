#!/usr/bin/env python3
"""Round-trip cost of a `tools/call` (the test server's `echo`) through the
Python binding: an embedded engine, and a daemon over its socket, measured
in one run. Prints the median (and p90) in microseconds.

    MCPHOST_LIBRARY=target/release/libmcphost.so python3 bindings/python/bench.py
    python3 bindings/python/bench.py -n 2000 --bin-dir target/release --json

Besides `Client.request` (what users call: mcphost_request_async and a wait),
it times the blocking mcphost_request called straight through ctypes, which
is the binding's floor; the difference is the binding's own cost.

Output, one line per path as tests/c/bench_roundtrip.c prints (read by
scripts/bench-ffi.sh): `LABEL P50_US P90_US CALLS`, labels
python-embedded, python-connected, python-ctypes-embedded,
python-ctypes-connected; lines starting with # are comments.
Environment (as scripts/bench-ffi.sh sets it): MCPHOST_BENCH_CALLS (-n),
MCPHOST_TEST_CONFIG (a config file with the `ts` server: used instead of
our own) and MCPHOST_TEST_SOCKET (a running daemon over that config: used
instead of starting one).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if "mcphost" not in sys.modules:
    try:
        import mcphost  # noqa: F401 (installed)
    except ImportError:
        sys.path.insert(0, str(HERE))
import mcphost  # noqa: E402
from mcphost import _core  # noqa: E402


def default_bin_dir() -> Path:
    env = os.environ.get("MCPHOST_BIN_DIR")
    if env:
        return Path(env)
    release = ROOT / "target" / "release"
    if (release / "mcphost").exists() and (release / "mcphost-testserver").exists():
        return release
    return ROOT / "target" / "debug"


def measure(call, n: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        call()
    out = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        call()
        out.append((clock() - t0) / 1000.0)
    return out


def summary(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "median_us": statistics.median(s),
        "p90_us": s[int(len(s) * 0.9) - 1],
        "min_us": s[0],
    }


def raw_blocking(client: mcphost.Client):
    """mcphost_request straight through ctypes (GIL released while it waits)."""
    lib = mcphost._lib.lib()
    ptr = ctypes.c_void_p(client._h.enter())
    client._h.leave()  # the bench never closes while it runs
    body = _core.dumps({"method": "tools/call", "params": {"name": "ts__echo", "arguments": {"text": "hi"}}})

    def call() -> None:
        resp = ctypes.c_void_p()
        err = ctypes.c_void_p()
        status = lib.mcphost_request(ptr, body, ctypes.byref(resp), ctypes.byref(err))
        text = _core.take_string(resp)
        _core.take_string(err)
        if status != 0 or text is None:
            raise SystemExit(f"mcphost_request failed with status {status}")
        json.loads(text)

    return call


def wait_listed(c: mcphost.Client, deadline: float) -> None:
    while True:
        servers = c.servers()
        if servers and all(s["state"] == "ready" and s.get("tools", 0) > 0 for s in servers):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"servers not ready: {servers}")
        time.sleep(0.05)


def run_mode(name: str, client: mcphost.Client, n: int, warmup: int, rounds: int = 10) -> list[dict]:
    args = {"text": "hi"}
    assert client.call_tool("ts__echo", args)["content"][0]["text"] == "hi"
    paths = (
        ("Client.request", lambda: client.call_tool("ts__echo", args)),
        ("ctypes mcphost_request", raw_blocking(client)),
    )
    for _, call in paths:
        measure(call, 0, warmup)
    # Interleaved rounds: a shared, busy machine slows both paths alike.
    samples: dict[str, list[float]] = {what: [] for what, _ in paths}
    per_round = max(1, n // rounds)
    for _ in range(rounds):
        for what, call in paths:
            samples[what] += measure(call, per_round, 0)
    return [
        {"mode": name, "path": what, "n": len(samples[what]), **summary(samples[what])}
        for what, _ in paths
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=int(os.environ.get("MCPHOST_BENCH_CALLS", "2000")),
                    help="timed calls per path (default 2000, or $MCPHOST_BENCH_CALLS)")
    ap.add_argument("--warmup", type=int, default=200, help="untimed calls first (default 200)")
    ap.add_argument("--bin-dir", type=Path, default=None, help="where mcphost and mcphost-testserver are")
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    a = ap.parse_args()
    bins = a.bin_dir or default_bin_dir()
    daemon_bin, ts = bins / "mcphost", bins / "mcphost-testserver"
    given_config = os.environ.get("MCPHOST_TEST_CONFIG")
    given_socket = os.environ.get("MCPHOST_TEST_SOCKET")
    for b in ([] if given_config else [ts]) + ([] if given_socket else [daemon_bin]):
        if not b.exists():
            raise SystemExit(f"missing {b}: cargo build --bin mcphost --bin mcphost-testserver (or --bin-dir)")
    if given_config:
        config_text = Path(given_config).read_text()
    else:
        config_text = json.dumps({"servers": {"ts": {"command": str(ts)}}})
    tmp = Path(tempfile.mkdtemp(prefix="mcph-bench-"))
    os.environ.setdefault("MCPHOST_STATE_DIR", str(tmp / "state"))
    rows: list[dict] = []
    daemon = None
    try:
        with mcphost.open_embedded(config_text, wait_ready=30) as c:
            wait_listed(c, time.monotonic() + 30)
            rows += run_mode("embedded", c, a.n, a.warmup)
        if given_socket:
            sock = given_socket
        else:
            (tmp / "config.json").write_text(config_text)
            sock = str(tmp / "d.sock")
            daemon = subprocess.Popen(
                [str(daemon_bin), "daemon", "--config", str(tmp / "config.json"), "--socket", sock],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=open(tmp / "daemon.log", "wb"),
            )
        deadline = time.monotonic() + 30
        while True:
            try:
                c = mcphost.connect(sock)
                break
            except mcphost.NotRunningError as e:
                if (daemon is not None and daemon.poll() is not None) or time.monotonic() > deadline:
                    log = (tmp / "daemon.log").read_text() if daemon is not None else ""
                    raise SystemExit(f"no daemon at {sock}: {e} {log}") from e
                time.sleep(0.05)
        with c:
            wait_listed(c, deadline)
            rows += run_mode("connected", c, a.n, a.warmup)
    finally:
        if daemon is not None and daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(20)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"# python binding, library {mcphost.library_path()} ({mcphost.library_version()});"
          " Client.request = python-*, bare mcphost_request via ctypes = python-ctypes-*")
    for r in rows:
        if a.json:
            print(json.dumps(r))
        else:
            prefix = "python" if r["path"] == "Client.request" else "python-ctypes"
            print(f"{prefix}-{r['mode']} {r['median_us']:.1f} {r['p90_us']:.1f} {r['n']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
