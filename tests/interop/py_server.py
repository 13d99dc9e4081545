"""mcphost interop server: a small MCP stdio server built on the Python SDK's
low-level `Server` API (mcp 2.x).

Run it with the interop venv:  .venv/bin/python tests/interop/py_server.py
Over Streamable HTTP instead of stdio (sessions; endpoint http://127.0.0.1:PORT/mcp):
                               .venv/bin/python tests/interop/py_server.py --http PORT
  In HTTP mode, `POST /test/end-sessions` terminates every open session (the
  server then answers 404 to their ids, as when a session expires) and
  returns {"ended": N}.

It is deterministic (no clocks or randomness in any result) and, over
stdio, writes nothing but JSON-RPC to stdout. Every `*/list` method is
paginated with a page size of 2 (override with the env var
PY_SERVER_PAGE_SIZE); cursors are opaque strings (base64 of "offset:N"); an
unknown cursor is a -32602 error.

Inventory
  tools      echo, add (outputSchema + structuredContent), fail (isError),
             slow (progress notifications, honours cancellation),
             interview (elicitation + sampling: MRTR in 2026-07-28),
             notify (emits list_changed + a log message)         -> 3 pages
  resources  interop://static/{alpha,beta,gamma,delta,blob}      -> 3 pages
  templates  interop://item/{id}, interop://user/{name}/profile,
             interop://echo/{text}                               -> 2 pages
  prompts    greet(name*, style), summarize(text*, max_words), no_args
                                                                 -> 2 pages
  completion prompt greet/style, template interop://item/{id} id
  logging    logging/setLevel accepted (level stored, used by `notify`)

Errors
  unknown tool          -> JSON-RPC error -32602 "Unknown tool: <name>"
  unknown resource      -> JSON-RPC error -32002 "Resource not found", data {"uri"}
  unknown prompt        -> JSON-RPC error -32602 "Unknown prompt: <name>"
  missing prompt arg    -> JSON-RPC error -32602 "Missing required argument: <arg>"
  bad tool arguments    -> result with isError: true (tool-level error)
"""

from __future__ import annotations

import base64
import json
import os
import sys
import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ToolsListChanged,
)
from mcp.shared.exceptions import MCPError

# `on_set_logging_level` is deprecated for the 2026-07-28 era; we serve the
# handshake era, where it is still part of the protocol. Keep stderr quiet.
warnings.filterwarnings("ignore", message=".*deprecated as of 2026-07-28.*")

SERVER_NAME = "mcphost-interop-py"
SERVER_VERSION = "1.0.0"
PAGE_SIZE = int(os.environ.get("PY_SERVER_PAGE_SIZE", "2"))

RESOURCE_NOT_FOUND = -32002  # 2025-11-25 spec code for an unknown resource URI

# ---------------------------------------------------------------- pagination


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"offset:{offset}".encode()).decode()


def _decode_cursor(cursor: str | None) -> int:
    if cursor is None:
        return 0
    try:
        text = base64.urlsafe_b64decode(cursor.encode()).decode()
        prefix, _, num = text.partition(":")
        offset = int(num)
        if prefix != "offset" or offset < 0:
            raise ValueError(text)
        return offset
    except Exception:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Invalid cursor: {cursor!r}") from None


def _page(items: list[Any], params: types.PaginatedRequestParams | None) -> tuple[list[Any], str | None]:
    start = _decode_cursor(params.cursor if params else None)
    end = start + PAGE_SIZE
    return items[start:end], (_encode_cursor(end) if end < len(items) else None)


# ---------------------------------------------------------------- tools

TOOLS: list[types.Tool] = [
    types.Tool(
        name="echo",
        description="Returns its arguments, serialised as JSON (sorted keys), as one text block.",
        input_schema={"type": "object", "additionalProperties": True},
    ),
    types.Tool(
        name="add",
        description="Adds two numbers; the result is structured content {sum}.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
        output_schema={
            "type": "object",
            "properties": {"sum": {"type": "number"}},
            "required": ["sum"],
        },
    ),
    types.Tool(
        name="fail",
        description="Always fails with a tool-level error (isError: true).",
        input_schema={"type": "object", "properties": {"message": {"type": "string"}}},
    ),
    types.Tool(
        name="slow",
        description=(
            "Sleeps `ms` milliseconds in `steps` steps, sending a progress notification "
            "after each step when the request carries _meta.progressToken."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "ms": {"type": "integer", "minimum": 0, "default": 500},
                "steps": {"type": "integer", "minimum": 1, "default": 5},
            },
        },
    ),
    types.Tool(
        name="interview",
        description=(
            "Asks the user for a name (elicitation) and the model for a greeting (sampling), "
            "then returns both. 2026-07-28: one input_required round (MRTR); the handshake: "
            "elicitation/create and sampling/createMessage requests."
        ),
        input_schema={"type": "object", "properties": {"topic": {"type": "string"}}},
    ),
    types.Tool(
        name="notify",
        description=(
            "Sends notifications/tools/list_changed, notifications/resources/list_changed, "
            "notifications/prompts/list_changed and one notifications/message, then returns."
        ),
        input_schema={"type": "object", "properties": {}},
    ),
]
TOOL_NAMES = {t.name for t in TOOLS}


_NAME_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string", "description": "Your name"}},
    "required": ["name"],
}


def _greeting_request(topic: str) -> types.CreateMessageRequestParams:
    return types.CreateMessageRequestParams(
        messages=[types.SamplingMessage(role="user", content=_text(f"Write a greeting about {topic}"))],
        max_tokens=50,
    )


async def _interview(ctx: ServerRequestContext, params: types.CallToolRequestParams):
    topic = str((params.arguments or {}).get("topic", "mcp"))
    if ctx.protocol_version == "2026-07-28":
        answers = params.input_responses or {}
        if "name" not in answers or "greeting" not in answers:
            # One round: both questions at once; the state names the round.
            return types.InputRequiredResult(
                input_requests={
                    "name": types.ElicitRequest(
                        params=types.ElicitRequestFormParams(message="Who are you?", requested_schema=_NAME_FORM)
                    ),
                    "greeting": types.CreateMessageRequest(params=_greeting_request(topic)),
                },
                request_state="interview-round-1",
            )
        if params.request_state != "interview-round-1":
            raise MCPError(code=-32602, message=f"interview: unexpected requestState {params.request_state!r}")
        elicited = types.ElicitResult.model_validate(_dump(answers["name"]))
        sampled = types.CreateMessageResult.model_validate(_dump(answers["greeting"]))
    else:
        elicited = await ctx.session.elicit_form("Who are you?", _NAME_FORM, related_request_id=ctx.request_id)
        p = _greeting_request(topic)
        sampled = await ctx.session.create_message(p.messages, max_tokens=p.max_tokens, related_request_id=ctx.request_id)
    who = (elicited.content or {}).get("name") if elicited.action == "accept" else f"({elicited.action})"
    said = sampled.content.text if isinstance(sampled.content, types.TextContent) else str(sampled.content)
    return types.CallToolResult(content=[_text(f"name={who}; greeting={said}")])


def _dump(v: Any) -> Any:
    return v.model_dump(by_alias=True, exclude_none=True) if hasattr(v, "model_dump") else v


def _text(s: str) -> types.TextContent:
    return types.TextContent(type="text", text=s)


def _tool_error(msg: str) -> types.CallToolResult:
    return types.CallToolResult(content=[_text(msg)], is_error=True)


async def list_tools(ctx: ServerRequestContext, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    page, nxt = _page(TOOLS, params)
    return types.ListToolsResult(tools=page, next_cursor=nxt)


_log_level = "info"
_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]


async def call_tool(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolResult:
    name = params.name
    args: dict[str, Any] = dict(params.arguments or {})
    if name not in TOOL_NAMES:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")

    if name == "echo":
        return types.CallToolResult(content=[_text(json.dumps(args, sort_keys=True))])

    if name == "add":
        a, b = args.get("a"), args.get("b")
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
            return _tool_error("add: arguments 'a' and 'b' must both be numbers")
        total = a + b  # type: ignore[operator]
        return types.CallToolResult(
            content=[_text(json.dumps({"sum": total}))],
            structured_content={"sum": total},
        )

    if name == "fail":
        return _tool_error(f"intentional failure: {args.get('message', 'no message')}")

    if name == "slow":
        ms, steps = args.get("ms", 500), args.get("steps", 5)
        if not isinstance(ms, int) or not isinstance(steps, int) or ms < 0 or steps < 1:
            return _tool_error("slow: 'ms' must be an integer >= 0 and 'steps' an integer >= 1")
        for i in range(1, steps + 1):
            await anyio.sleep(ms / steps / 1000)
            # No-op unless the request carried _meta.progressToken.
            await ctx.session.report_progress(i, steps, f"step {i}/{steps}")
        return types.CallToolResult(content=[_text(f"slept {ms} ms in {steps} steps")])

    if name == "interview":
        return await _interview(ctx, params)

    if name == "notify":
        # Handshake-era sessions get the notifications; 2026-07-28 clients
        # get them on their `subscriptions/listen` streams, through the bus.
        await ctx.session.send_tool_list_changed()
        await ctx.session.send_resource_list_changed()
        await ctx.session.send_prompt_list_changed()
        for event in (ToolsListChanged(), ResourcesListChanged(), PromptsListChanged()):
            await SUBSCRIPTIONS.publish(event)
        logged = _LEVELS.index("info") >= _LEVELS.index(_log_level)
        if logged:  # suppressed when logging/setLevel asked for something above "info"
            await ctx.session.send_log_message(level="info", data="notify tool was called", logger=SERVER_NAME)
        suffix = " and 1 log message" if logged else " (log message suppressed by logging level)"
        return types.CallToolResult(content=[_text("sent 3 list_changed notifications" + suffix)])

    raise AssertionError(name)  # pragma: no cover


async def set_logging_level(ctx: ServerRequestContext, params: types.SetLevelRequestParams) -> types.EmptyResult:
    global _log_level
    _log_level = params.level
    return types.EmptyResult()


# ---------------------------------------------------------------- resources

STATIC_RESOURCES: dict[str, tuple[types.Resource, str | bytes]] = {}


def _static(name: str, mime: str, body: str | bytes, description: str) -> None:
    uri = f"interop://static/{name}"
    size = len(body.encode() if isinstance(body, str) else body)
    STATIC_RESOURCES[uri] = (
        types.Resource(uri=uri, name=name, mime_type=mime, description=description, size=size),
        body,
    )


_static("alpha", "text/plain", "alpha resource\n", "Plain text.")
_static("beta", "text/markdown", "# Beta\n\nMarkdown resource.\n", "Markdown text.")
_static("gamma", "application/json", '{"gamma": [1, 2, 3]}', "JSON text.")
_static("delta", "text/plain", "delta \u00e9\u00e8 \u2713 unicode\n", "Non-ASCII text.")
_static("blob", "application/octet-stream", bytes(range(8)), "Binary (blob, base64 on the wire).")

TEMPLATES: list[types.ResourceTemplate] = [
    types.ResourceTemplate(
        uri_template="interop://item/{id}",
        name="item",
        description="An item by numeric id.",
        mime_type="application/json",
    ),
    types.ResourceTemplate(
        uri_template="interop://user/{name}/profile",
        name="user-profile",
        description="A user's profile.",
        mime_type="text/plain",
    ),
    types.ResourceTemplate(
        uri_template="interop://echo/{text}",
        name="echo",
        description="Echoes the {text} part of the URI.",
        mime_type="text/plain",
    ),
]


async def list_resources(
    ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    page, nxt = _page([r for r, _ in STATIC_RESOURCES.values()], params)
    return types.ListResourcesResult(resources=page, next_cursor=nxt)


async def list_templates(
    ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
) -> types.ListResourceTemplatesResult:
    page, nxt = _page(TEMPLATES, params)
    return types.ListResourceTemplatesResult(resource_templates=page, next_cursor=nxt)


def _not_found(uri: str) -> MCPError:
    return MCPError(code=RESOURCE_NOT_FOUND, message="Resource not found", data={"uri": uri})


async def read_resource(ctx: ServerRequestContext, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    uri = str(params.uri)
    contents: types.TextResourceContents | types.BlobResourceContents
    if uri in STATIC_RESOURCES:
        res, body = STATIC_RESOURCES[uri]
        if isinstance(body, bytes):
            contents = types.BlobResourceContents(
                uri=uri, mime_type=res.mime_type, blob=base64.b64encode(body).decode()
            )
        else:
            contents = types.TextResourceContents(uri=uri, mime_type=res.mime_type, text=body)
        return types.ReadResourceResult(contents=[contents])

    parts = uri.split("/")
    # interop://item/{id}  -> ["interop:", "", "item", id]
    if uri.startswith("interop://item/") and len(parts) == 4 and parts[3].isdigit():
        item_id = int(parts[3])
        text = json.dumps({"id": item_id, "name": f"item-{item_id}"})
        contents = types.TextResourceContents(uri=uri, mime_type="application/json", text=text)
        return types.ReadResourceResult(contents=[contents])
    if uri.startswith("interop://user/") and len(parts) == 5 and parts[4] == "profile" and parts[3]:
        contents = types.TextResourceContents(uri=uri, mime_type="text/plain", text=f"profile of {parts[3]}")
        return types.ReadResourceResult(contents=[contents])
    if uri.startswith("interop://echo/") and len(parts) == 4 and parts[3]:
        contents = types.TextResourceContents(uri=uri, mime_type="text/plain", text=parts[3])
        return types.ReadResourceResult(contents=[contents])
    raise _not_found(uri)


# ---------------------------------------------------------------- prompts

PROMPTS: list[types.Prompt] = [
    types.Prompt(
        name="greet",
        description="Greets someone.",
        arguments=[
            types.PromptArgument(name="name", description="Who to greet.", required=True),
            types.PromptArgument(name="style", description="formal | casual | pirate", required=False),
        ],
    ),
    types.Prompt(
        name="summarize",
        description="Asks for a summary of a text.",
        arguments=[
            types.PromptArgument(name="text", description="The text to summarize.", required=True),
            types.PromptArgument(name="max_words", description="Upper bound on words.", required=False),
        ],
    ),
    types.Prompt(name="no_args", description="A prompt without arguments."),
]
PROMPTS_BY_NAME = {p.name: p for p in PROMPTS}
STYLES = ["formal", "casual", "pirate"]
ITEM_IDS = ["1", "2", "3", "10", "11"]


async def list_prompts(ctx: ServerRequestContext, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
    page, nxt = _page(PROMPTS, params)
    return types.ListPromptsResult(prompts=page, next_cursor=nxt)


async def get_prompt(ctx: ServerRequestContext, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    prompt = PROMPTS_BY_NAME.get(params.name)
    if prompt is None:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")
    args = dict(params.arguments or {})
    for arg in prompt.arguments or []:
        if arg.required and not args.get(arg.name):
            raise MCPError(code=types.INVALID_PARAMS, message=f"Missing required argument: {arg.name}")

    def user(text: str) -> types.PromptMessage:
        return types.PromptMessage(role="user", content=_text(text))

    if prompt.name == "greet":
        style = args.get("style", "casual")
        if style not in STYLES:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Invalid style: {style}")
        greeting = {"formal": "Good day", "casual": "Hi", "pirate": "Ahoy"}[style]
        return types.GetPromptResult(description="A greeting", messages=[user(f"{greeting}, {args['name']}!")])
    if prompt.name == "summarize":
        limit = f" in at most {args['max_words']} words" if args.get("max_words") else ""
        return types.GetPromptResult(
            description="A summary request",
            messages=[
                user(f"Summarize the following text{limit}:\n\n{args['text']}"),
                types.PromptMessage(role="assistant", content=_text("Sure, here is the summary:")),
            ],
        )
    return types.GetPromptResult(messages=[user("A prompt without arguments.")])


async def complete(ctx: ServerRequestContext, params: types.CompleteRequestParams) -> types.CompleteResult:
    ref, arg = params.ref, params.argument
    values: list[str] = []
    if isinstance(ref, types.PromptReference):
        if ref.name not in PROMPTS_BY_NAME:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {ref.name}")
        if ref.name == "greet" and arg.name == "style":
            values = [s for s in STYLES if s.startswith(arg.value)]
    else:
        if ref.uri == "interop://item/{id}" and arg.name == "id":
            values = [i for i in ITEM_IDS if i.startswith(arg.value)]
    return types.CompleteResult(completion=types.Completion(values=values, total=len(values), has_more=False))


# ---------------------------------------------------------------- main


# Fan-out to `subscriptions/listen` streams (2026-07-28).
SUBSCRIPTIONS = InMemorySubscriptionBus()


def build_server() -> Server:
    return Server(
        SERVER_NAME,
        version=SERVER_VERSION,
        instructions="Interop test server for mcphost. Deterministic; see tests/interop/py_server.py.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_completion=complete,
        on_set_logging_level=set_logging_level,
        on_subscriptions_listen=ListenHandler(SUBSCRIPTIONS),
    )


NOTIFICATIONS = NotificationOptions(tools_changed=True, resources_changed=True, prompts_changed=True)


async def main() -> None:
    server = build_server()
    options = server.create_initialization_options(NOTIFICATIONS)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, options)


async def main_http(port: int) -> None:
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    server = build_server()
    # The HTTP session manager builds each session's initialize result with
    # create_initialization_options() and no arguments: make that advertise
    # list_changed too, as the stdio mode does.
    base = server.create_initialization_options

    def with_notifications(notification_options: NotificationOptions | None = None, *args: Any, **kwargs: Any):
        return base(notification_options or NOTIFICATIONS, *args, **kwargs)

    server.create_initialization_options = with_notifications  # type: ignore[method-assign]

    async def end_sessions(request: Request) -> JSONResponse:
        # The SDK has no public way to end a session from the server side;
        # its session manager keeps the transports in `_server_instances`
        # (mcp 2.3.0). terminate() makes later requests with the id get 404.
        transports = list(server.session_manager._server_instances.values())
        for transport in transports:
            await transport.terminate()
        return JSONResponse({"ended": len(transports)})

    app = server.streamable_http_app(
        host="127.0.0.1",
        custom_starlette_routes=[Route("/test/end-sessions", end_sessions, methods=["POST"])],
    )
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()


if __name__ == "__main__":
    try:
        if len(sys.argv) == 3 and sys.argv[1] == "--http":
            anyio.run(main_http, int(sys.argv[2]))
        elif len(sys.argv) == 1:
            anyio.run(main)
        else:
            sys.exit(f"usage: {sys.argv[0]} [--http PORT]")
    except KeyboardInterrupt:
        sys.exit(130)
