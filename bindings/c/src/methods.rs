//! The method names requests and events use. cbindgen cannot export string
//! constants, so tests/header.rs writes these as `#define`s into the header.

/// `(C name, value, group)`: every method name a host sends or receives.
/// cbindgen:ignore
pub const METHODS: &[(&str, &str, &str)] = &[
    (
        "MCPHOST_METHOD_PING",
        "ping",
        "MCP requests a host sends (`mcphost_request`).",
    ),
    (
        "MCPHOST_METHOD_TOOLS_LIST",
        "tools/list",
        "MCP requests a host sends (`mcphost_request`).",
    ),
    (
        "MCPHOST_METHOD_TOOLS_CALL",
        "tools/call",
        "MCP requests a host sends (`mcphost_request`).",
    ),
    (
        "MCPHOST_METHOD_RESOURCES_LIST",
        "resources/list",
        "MCP requests a host sends (`mcphost_request`).",
    ),
    (
        "MCPHOST_METHOD_RESOURCES_TEMPLATES_LIST",
        "resources/templates/list",
        "MCP requests a host sends (`mcphost_request`).",
    ),
    (
        "MCPHOST_METHOD_RESOURCES_READ",
        "resources/read",
        "MCP requests a host sends (`mcphost_request`).",
    ),
    (
        "MCPHOST_METHOD_RESOURCES_SUBSCRIBE",
        "resources/subscribe",
        "MCP requests a host sends (`mcphost_request`).",
    ),
    (
        "MCPHOST_METHOD_RESOURCES_UNSUBSCRIBE",
        "resources/unsubscribe",
        "MCP requests a host sends (`mcphost_request`).",
    ),
    (
        "MCPHOST_METHOD_PROMPTS_LIST",
        "prompts/list",
        "MCP requests a host sends (`mcphost_request`).",
    ),
    (
        "MCPHOST_METHOD_PROMPTS_GET",
        "prompts/get",
        "MCP requests a host sends (`mcphost_request`).",
    ),
    (
        "MCPHOST_METHOD_COMPLETION_COMPLETE",
        "completion/complete",
        "MCP requests a host sends (`mcphost_request`).",
    ),
    (
        "MCPHOST_METHOD_LOGGING_SET_LEVEL",
        "logging/setLevel",
        "MCP requests a host sends (`mcphost_request`).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_STATUS",
        "mcphost/status",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_TOOLS_LIST",
        "mcphost/tools/list",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_RESOURCES_LIST",
        "mcphost/resources/list",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_PROMPTS_LIST",
        "mcphost/prompts/list",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_SERVERS_LIST",
        "mcphost/servers/list",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_SERVERS_LOGS",
        "mcphost/servers/logs",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_SERVERS_RESTART",
        "mcphost/servers/restart",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_SERVERS_ADD",
        "mcphost/servers/add",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_SERVERS_REMOVE",
        "mcphost/servers/remove",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_SERVERS_ENABLE",
        "mcphost/servers/enable",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_SERVERS_DISABLE",
        "mcphost/servers/disable",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_HOST_REGISTER",
        "mcphost/host/register",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_HOST_UNREGISTER",
        "mcphost/host/unregister",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_LOGS_FOLLOW",
        "mcphost/logs/follow",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_SESSION_CONFIGURE",
        "mcphost/session/configure",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_DAEMON_SHUTDOWN",
        "mcphost/daemon/shutdown",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_PINS_LIST",
        "mcphost/pins/list",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_PINS_DIFF",
        "mcphost/pins/diff",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_PINS_APPROVE",
        "mcphost/pins/approve",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_PINS_RESET",
        "mcphost/pins/reset",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_MCPHOST_AUDIT_QUERY",
        "mcphost/audit/query",
        "mcphost's own requests (docs/ipc.md describes their params and results).",
    ),
    (
        "MCPHOST_METHOD_SAMPLING_CREATE_MESSAGE",
        "sampling/createMessage",
        "Server requests a host answers through its callbacks (the `method` of their request_json).",
    ),
    (
        "MCPHOST_METHOD_ELICITATION_CREATE",
        "elicitation/create",
        "Server requests a host answers through its callbacks (the `method` of their request_json).",
    ),
    (
        "MCPHOST_METHOD_ROOTS_LIST",
        "roots/list",
        "Server requests a host answers through its callbacks (the `method` of their request_json).",
    ),
    (
        "MCPHOST_EVENT_TOOLS_LIST_CHANGED",
        "notifications/tools/list_changed",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
    (
        "MCPHOST_EVENT_RESOURCES_LIST_CHANGED",
        "notifications/resources/list_changed",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
    (
        "MCPHOST_EVENT_PROMPTS_LIST_CHANGED",
        "notifications/prompts/list_changed",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
    (
        "MCPHOST_EVENT_RESOURCES_UPDATED",
        "notifications/resources/updated",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
    (
        "MCPHOST_EVENT_PROGRESS",
        "notifications/progress",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
    (
        "MCPHOST_EVENT_MESSAGE",
        "notifications/message",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
    (
        "MCPHOST_EVENT_ELICITATION_COMPLETE",
        "notifications/elicitation/complete",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
    (
        "MCPHOST_EVENT_SERVER_STATE",
        "notifications/mcphost/server_state",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
    (
        "MCPHOST_EVENT_SERVER_STDERR",
        "notifications/mcphost/stderr",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
    (
        "MCPHOST_EVENT_EVENTS_DROPPED",
        "notifications/mcphost/events_dropped",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
    (
        "MCPHOST_EVENT_HOST_REQUEST_ENDED",
        "notifications/mcphost/host_request_ended",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
    (
        "MCPHOST_EVENT_DISCONNECTED",
        "notifications/mcphost/disconnected",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
    (
        "MCPHOST_EVENT_RECONNECTED",
        "notifications/mcphost/reconnected",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
    (
        "MCPHOST_EVENT_ROOTS_LIST_CHANGED",
        "notifications/roots/list_changed",
        "Events (the `method` of an event's JSON), and the one notification a host sends.",
    ),
];
