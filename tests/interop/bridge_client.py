"""A client on the official Python MCP SDK that reaches the mcphost daemon
through `mcphost bridge` (stdio), for tests/it/daemon.rs.

    python bridge_client.py MCPHOST SOCKET TOOL ARGS_JSON

Prints one JSON object: the negotiated handshake, every tool name (all
pages) and the result of calling TOOL with ARGS_JSON.
"""

import json
import sys

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    mcphost, socket, tool, args = sys.argv[1:5]
    params = StdioServerParameters(command=mcphost, args=["--socket", socket, "bridge"])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            names = []
            cursor = None
            while True:
                page = await session.list_tools(
                    params=None if cursor is None else types.PaginatedRequestParams(cursor=cursor)
                )
                names.extend(t.name for t in page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            result = await session.call_tool(tool, json.loads(args))
            texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
            print(
                json.dumps(
                    {
                        "protocolVersion": init.protocol_version,
                        "serverName": init.server_info.name,
                        "tools": names,
                        "isError": bool(result.is_error),
                        "text": texts,
                    }
                )
            )


anyio.run(main)
