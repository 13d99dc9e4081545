"""A client on the official Python MCP SDK (mcp 2.x) that calls one tool over
HTTP, for tests/it/http_interop.rs and benches/http.rs.

    python http_client.py URL [--sse] [--tool echo] [--args JSON] [--calls N] [--serve]

Connects to URL with the SDK's Streamable HTTP client (or its legacy HTTP+SSE
client with --sse), initializes, then:

- default: makes N calls (default 1) of TOOL with ARGS and prints one JSON
  line: {"protocolVersion", "serverName", "tools": [names, every page],
  "samplesUs": [per-call latency in microseconds], "text": [last result's
  text blocks], "isError"};
- --serve (for the benchmark): prints {"ready": true, ...} once connected,
  then reads one integer N per line from stdin, makes N calls, and prints
  {"samplesUs": [...], "wallUs": W} per line, until stdin closes.

Every call sends its own text when TOOL is `echo` and ARGS is not given
({"message": "p<N>"}), and its result must echo exactly that text, so every
timed call reached the server. Latency is time.perf_counter_ns() around
`session.call_tool`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client


def _texts(result: types.CallToolResult) -> list[str]:
    return [c.text for c in result.content if getattr(c, "type", None) == "text"]


class Caller:
    def __init__(self, session: ClientSession, tool: str, args: str | None) -> None:
        self.session = session
        self.tool = tool
        self.args = json.loads(args) if args is not None else None
        self.n = 0
        self.last: types.CallToolResult | None = None

    async def call(self) -> int:
        """One timed call; its latency in nanoseconds."""
        if self.args is None:
            self.n += 1
            expected: str | None = f"p{self.n}"
            args: dict[str, Any] = {"message": expected}
        else:
            expected, args = None, self.args
        t = time.perf_counter_ns()
        result = await self.session.call_tool(self.tool, args)
        dt = time.perf_counter_ns() - t
        if expected is not None and (result.is_error or _texts(result) != [f"Echo: {expected}"]):
            raise RuntimeError(f"echo of {expected!r} came back as {result!r}")
        self.last = result
        return dt

    async def calls(self, n: int) -> dict[str, Any]:
        wall = time.perf_counter_ns()
        samples = [await self.call() for _ in range(n)]
        wall = time.perf_counter_ns() - wall
        return {"samplesUs": [s / 1000 for s in samples], "wallUs": wall / 1000}


async def list_all_tools(session: ClientSession) -> list[str]:
    names: list[str] = []
    cursor = None
    while True:
        page = await session.list_tools(params=None if cursor is None else types.PaginatedRequestParams(cursor=cursor))
        names.extend(t.name for t in page.tools)
        cursor = page.next_cursor
        if not cursor:
            return names


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def run(session: ClientSession, opts: argparse.Namespace) -> None:
    init = await session.initialize()
    tools = await list_all_tools(session)
    caller = Caller(session, opts.tool, opts.args)
    head = {
        "protocolVersion": init.protocol_version,
        "serverName": init.server_info.name,
        "tools": tools,
    }
    if not opts.serve:
        out = await caller.calls(opts.calls)
        last = caller.last
        emit(
            head
            | out
            | {
                "text": _texts(last) if last else [],
                "isError": bool(last.is_error) if last else False,
            }
        )
        return
    emit(head | {"ready": True})
    while True:
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        if not line:
            return
        line = line.strip()
        if line:
            emit(await caller.calls(int(line)))


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--sse", action="store_true", help="legacy HTTP+SSE instead of Streamable HTTP")
    p.add_argument("--tool", default="echo")
    p.add_argument("--args", default=None, help="tool arguments as JSON (default: a per-call echo message)")
    p.add_argument("--calls", type=int, default=1)
    p.add_argument("--serve", action="store_true", help="read call counts from stdin (benchmark mode)")
    opts = p.parse_args()
    if opts.sse:
        async with sse_client(opts.url) as (read, write), ClientSession(read, write) as session:
            await run(session, opts)
    else:
        async with streamable_http_client(opts.url) as (read, write), ClientSession(read, write) as session:
            await run(session, opts)


if __name__ == "__main__":
    anyio.run(main)
