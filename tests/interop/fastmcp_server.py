"""mcphost interop server built with the standalone `fastmcp` framework.

Run it with the interop venv:  .venv/bin/python tests/interop/fastmcp_server.py
Over Streamable HTTP instead of stdio (sessions; endpoint http://127.0.0.1:PORT/mcp):
                               .venv/bin/python tests/interop/fastmcp_server.py --http PORT

A second, independently implemented Python server (FastMCP's own request
handling and schema generation on top of the `mcp` SDK's transport), kept
small and deterministic. Lists are paginated with a page size of 2
(FastMCP's `list_page_size`).

Inventory
  tools      echo(text), add(a, b) -> {sum} (structuredContent),
             fail(message) (isError), slow(ms, steps) (progress)
  resources  fastmcp://static/{one,two,three}
  templates  fastmcp://item/{item_id}
  prompts    greet(name, style="casual"), review(code, language)
"""

from __future__ import annotations

import asyncio
import json

from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from pydantic import BaseModel

mcp = FastMCP(
    "mcphost-interop-fastmcp",
    instructions="FastMCP interop test server for mcphost.",
    version="1.0.0",
    list_page_size=2,
)


class Sum(BaseModel):
    sum: float


@mcp.tool
def echo(text: str) -> str:
    """Returns `text` unchanged."""
    return text


@mcp.tool
def add(a: float, b: float) -> Sum:
    """Adds two numbers; the result is structured content {sum}."""
    return Sum(sum=a + b)


@mcp.tool
def fail(message: str = "no message") -> str:
    """Always fails with a tool-level error (isError: true)."""
    raise ToolError(f"intentional failure: {message}")


@mcp.tool
async def slow(ctx: Context, ms: int = 500, steps: int = 5) -> str:
    """Sleeps `ms` milliseconds in `steps` steps, reporting progress after each."""
    for i in range(1, steps + 1):
        await asyncio.sleep(ms / steps / 1000)
        await ctx.report_progress(i, steps, f"step {i}/{steps}")
    return f"slept {ms} ms in {steps} steps"


@mcp.resource("fastmcp://static/one", mime_type="text/plain")
def static_one() -> str:
    """First static resource."""
    return "one"


@mcp.resource("fastmcp://static/two", mime_type="text/plain")
def static_two() -> str:
    """Second static resource."""
    return "two"


@mcp.resource("fastmcp://static/three", mime_type="application/json")
def static_three() -> str:
    """Third static resource (JSON)."""
    return json.dumps({"three": 3})


@mcp.resource("fastmcp://item/{item_id}", mime_type="application/json")
def item(item_id: int) -> str:
    """An item by numeric id."""
    return json.dumps({"id": item_id, "name": f"item-{item_id}"})


@mcp.prompt
def greet(name: str, style: str = "casual") -> str:
    """Greets someone."""
    greeting = {"formal": "Good day", "casual": "Hi", "pirate": "Ahoy"}.get(style, "Hi")
    return f"{greeting}, {name}!"


@mcp.prompt
def review(code: str, language: str) -> str:
    """Asks for a code review."""
    return f"Please review this {language} code:\n\n{code}"


if __name__ == "__main__":
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        mcp.run(transport="http", host="127.0.0.1", port=int(sys.argv[2]), show_banner=False, log_level="WARNING")
    elif len(sys.argv) == 1:
        mcp.run(transport="stdio", show_banner=False)
    else:
        sys.exit(f"usage: {sys.argv[0]} [--http PORT]")
