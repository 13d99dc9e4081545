"""The official Python SDK's high-level `mcp.Client` reaching the mcphost
daemon through `mcphost bridge` (stdio), for tests/it/socket_stateless.rs.

    python stateless_client.py MCPHOST SOCKET

`mode="auto"` (the default) probes `server/discover` and goes stateless
(2026-07-28) when the answer says so. Then: list every tool, call
`ev__echo`, call server-everything's elicitation and sampling tools (their
requests come back as `input_required` rounds, answered by the callbacks
below), and open a `subscriptions/listen` stream until the first tools
list change. Prints one JSON report.
"""

import json
import sys

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters

elicited = 0


async def on_elicit(_ctx, params):
    global elicited
    elicited += 1
    return types.ElicitResult(action="accept", content={"name": "Python Client", "check": True})


async def on_sample(_ctx, params):
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="sampled by python"),
        model="python-test",
        stop_reason="endTurn",
    )


def texts(result) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


async def main() -> None:
    mcphost, socket = sys.argv[1:3]
    server = StdioServerParameters(command=mcphost, args=["--socket", socket, "bridge"])
    async with Client(
        server,
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
        read_timeout_seconds=60,
    ) as client:
        names = []
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
            names.extend(t.name for t in page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        echo = await client.call_tool("ev__echo", {"message": "from python"})
        elicitation = await client.call_tool("ev__trigger-elicitation-request", {})
        sampling = await client.call_tool("ev__trigger-sampling-request", {"prompt": "hi", "maxTokens": 10})
        changed = False
        with anyio.fail_after(30):
            async with client.listen(tools_list_changed=True) as sub:
                async for _event in sub:
                    changed = True
                    break
        info = client.server_info
        print(
            json.dumps(
                {
                    "protocolVersion": client.protocol_version,
                    "serverName": info.name if info else None,
                    "tools": names,
                    "echo": texts(echo),
                    "elicited": elicited,
                    "elicitation": texts(elicitation),
                    "sampling": texts(sampling),
                    "listChanged": changed,
                }
            )
        )


anyio.run(main)
