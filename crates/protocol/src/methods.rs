//! MCP method names, in one place so a typo is a compile error.

pub const INITIALIZE: &str = "initialize";
pub const PING: &str = "ping";
pub const SERVER_DISCOVER: &str = "server/discover";

pub const TOOLS_LIST: &str = "tools/list";
pub const TOOLS_CALL: &str = "tools/call";
pub const RESOURCES_LIST: &str = "resources/list";
pub const RESOURCES_TEMPLATES_LIST: &str = "resources/templates/list";
pub const RESOURCES_READ: &str = "resources/read";
pub const RESOURCES_SUBSCRIBE: &str = "resources/subscribe";
pub const RESOURCES_UNSUBSCRIBE: &str = "resources/unsubscribe";
pub const PROMPTS_LIST: &str = "prompts/list";
pub const PROMPTS_GET: &str = "prompts/get";
pub const COMPLETION_COMPLETE: &str = "completion/complete";
pub const LOGGING_SET_LEVEL: &str = "logging/setLevel";
pub const SUBSCRIPTIONS_LISTEN: &str = "subscriptions/listen";

pub const SAMPLING_CREATE_MESSAGE: &str = "sampling/createMessage";
pub const ELICITATION_CREATE: &str = "elicitation/create";
pub const ROOTS_LIST: &str = "roots/list";

/// mcphost's own requests (docs/ipc.md), answered by every door.
pub const MCPHOST_STATUS: &str = "mcphost/status";
pub const MCPHOST_TOOLS_LIST: &str = "mcphost/tools/list";
pub const MCPHOST_RESOURCES_LIST: &str = "mcphost/resources/list";
pub const MCPHOST_PROMPTS_LIST: &str = "mcphost/prompts/list";
pub const MCPHOST_SERVERS_LIST: &str = "mcphost/servers/list";
pub const MCPHOST_SERVERS_LOGS: &str = "mcphost/servers/logs";
pub const MCPHOST_SERVERS_RESTART: &str = "mcphost/servers/restart";
pub const MCPHOST_SERVERS_ADD: &str = "mcphost/servers/add";
pub const MCPHOST_SERVERS_REMOVE: &str = "mcphost/servers/remove";
pub const MCPHOST_SERVERS_ENABLE: &str = "mcphost/servers/enable";
pub const MCPHOST_SERVERS_DISABLE: &str = "mcphost/servers/disable";
pub const MCPHOST_HOST_REGISTER: &str = "mcphost/host/register";
pub const MCPHOST_HOST_UNREGISTER: &str = "mcphost/host/unregister";
pub const MCPHOST_LOGS_FOLLOW: &str = "mcphost/logs/follow";
pub const MCPHOST_SESSION_CONFIGURE: &str = "mcphost/session/configure";
pub const MCPHOST_DAEMON_SHUTDOWN: &str = "mcphost/daemon/shutdown";
pub const MCPHOST_PINS_LIST: &str = "mcphost/pins/list";
pub const MCPHOST_PINS_DIFF: &str = "mcphost/pins/diff";
pub const MCPHOST_PINS_APPROVE: &str = "mcphost/pins/approve";
pub const MCPHOST_PINS_RESET: &str = "mcphost/pins/reset";
pub const MCPHOST_AUDIT_QUERY: &str = "mcphost/audit/query";

/// Every `mcphost/*` request the engine answers: the C header's method
/// table and the bindings are checked against it, and the engine's tests
/// check that each one is answered.
pub const MCPHOST_REQUESTS: &[&str] = &[
    MCPHOST_STATUS,
    MCPHOST_TOOLS_LIST,
    MCPHOST_RESOURCES_LIST,
    MCPHOST_PROMPTS_LIST,
    MCPHOST_SERVERS_LIST,
    MCPHOST_SERVERS_LOGS,
    MCPHOST_SERVERS_RESTART,
    MCPHOST_SERVERS_ADD,
    MCPHOST_SERVERS_REMOVE,
    MCPHOST_SERVERS_ENABLE,
    MCPHOST_SERVERS_DISABLE,
    MCPHOST_HOST_REGISTER,
    MCPHOST_HOST_UNREGISTER,
    MCPHOST_LOGS_FOLLOW,
    MCPHOST_SESSION_CONFIGURE,
    MCPHOST_DAEMON_SHUTDOWN,
    MCPHOST_PINS_LIST,
    MCPHOST_PINS_DIFF,
    MCPHOST_PINS_APPROVE,
    MCPHOST_PINS_RESET,
    MCPHOST_AUDIT_QUERY,
];

pub const NOTIFICATION_INITIALIZED: &str = "notifications/initialized";
pub const NOTIFICATION_CANCELLED: &str = "notifications/cancelled";
pub const NOTIFICATION_PROGRESS: &str = "notifications/progress";
pub const NOTIFICATION_MESSAGE: &str = "notifications/message";
pub const NOTIFICATION_TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
pub const NOTIFICATION_RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";
pub const NOTIFICATION_RESOURCES_UPDATED: &str = "notifications/resources/updated";
pub const NOTIFICATION_PROMPTS_LIST_CHANGED: &str = "notifications/prompts/list_changed";
pub const NOTIFICATION_ROOTS_LIST_CHANGED: &str = "notifications/roots/list_changed";
pub const NOTIFICATION_SUBSCRIPTIONS_ACKNOWLEDGED: &str =
    "notifications/subscriptions/acknowledged";
pub const NOTIFICATION_ELICITATION_COMPLETE: &str = "notifications/elicitation/complete";

/// `_meta` members of the stateless revision (2026-07-28).
pub mod meta {
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
    pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
    pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
}
