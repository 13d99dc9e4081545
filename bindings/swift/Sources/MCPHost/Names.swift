import CMCPHost

// The header's method and event names (MCPHOST_METHOD_*, MCPHOST_EVENT_*),
// for code that imports MCPHost only.
extension MCPHost {
    /// Request methods: MCP, `mcphost/*`, and the server requests host
    /// handlers receive (`HostRequest.method`).
    public enum Method {
        /// `ping`
        public static let ping = MCPHOST_METHOD_PING
        /// `tools/list`
        public static let toolsList = MCPHOST_METHOD_TOOLS_LIST
        /// `tools/call`
        public static let toolsCall = MCPHOST_METHOD_TOOLS_CALL
        /// `resources/list`
        public static let resourcesList = MCPHOST_METHOD_RESOURCES_LIST
        /// `resources/templates/list`
        public static let resourcesTemplatesList = MCPHOST_METHOD_RESOURCES_TEMPLATES_LIST
        /// `resources/read`
        public static let resourcesRead = MCPHOST_METHOD_RESOURCES_READ
        /// `resources/subscribe`
        public static let resourcesSubscribe = MCPHOST_METHOD_RESOURCES_SUBSCRIBE
        /// `resources/unsubscribe`
        public static let resourcesUnsubscribe = MCPHOST_METHOD_RESOURCES_UNSUBSCRIBE
        /// `prompts/list`
        public static let promptsList = MCPHOST_METHOD_PROMPTS_LIST
        /// `prompts/get`
        public static let promptsGet = MCPHOST_METHOD_PROMPTS_GET
        /// `completion/complete`
        public static let completionComplete = MCPHOST_METHOD_COMPLETION_COMPLETE
        /// `logging/setLevel`
        public static let loggingSetLevel = MCPHOST_METHOD_LOGGING_SET_LEVEL
        /// `mcphost/status`
        public static let mcphostStatus = MCPHOST_METHOD_MCPHOST_STATUS
        /// `mcphost/tools/list`
        public static let mcphostToolsList = MCPHOST_METHOD_MCPHOST_TOOLS_LIST
        /// `mcphost/resources/list`
        public static let mcphostResourcesList = MCPHOST_METHOD_MCPHOST_RESOURCES_LIST
        /// `mcphost/prompts/list`
        public static let mcphostPromptsList = MCPHOST_METHOD_MCPHOST_PROMPTS_LIST
        /// `mcphost/servers/list`
        public static let mcphostServersList = MCPHOST_METHOD_MCPHOST_SERVERS_LIST
        /// `mcphost/servers/logs`
        public static let mcphostServersLogs = MCPHOST_METHOD_MCPHOST_SERVERS_LOGS
        /// `mcphost/servers/restart`
        public static let mcphostServersRestart = MCPHOST_METHOD_MCPHOST_SERVERS_RESTART
        /// `mcphost/servers/add`
        public static let mcphostServersAdd = MCPHOST_METHOD_MCPHOST_SERVERS_ADD
        /// `mcphost/servers/remove`
        public static let mcphostServersRemove = MCPHOST_METHOD_MCPHOST_SERVERS_REMOVE
        /// `mcphost/servers/enable`
        public static let mcphostServersEnable = MCPHOST_METHOD_MCPHOST_SERVERS_ENABLE
        /// `mcphost/servers/disable`
        public static let mcphostServersDisable = MCPHOST_METHOD_MCPHOST_SERVERS_DISABLE
        /// `mcphost/host/register`
        public static let mcphostHostRegister = MCPHOST_METHOD_MCPHOST_HOST_REGISTER
        /// `mcphost/host/unregister`
        public static let mcphostHostUnregister = MCPHOST_METHOD_MCPHOST_HOST_UNREGISTER
        /// `mcphost/logs/follow`
        public static let mcphostLogsFollow = MCPHOST_METHOD_MCPHOST_LOGS_FOLLOW
        /// `mcphost/session/configure`: this session's tool budget, search mode or schema profile
        public static let mcphostSessionConfigure = MCPHOST_METHOD_MCPHOST_SESSION_CONFIGURE
        /// `mcphost/daemon/shutdown`: stop the daemon (refused when embedded)
        public static let mcphostDaemonShutdown = MCPHOST_METHOD_MCPHOST_DAEMON_SHUTDOWN
        /// `mcphost/pins/list`
        public static let mcphostPinsList = MCPHOST_METHOD_MCPHOST_PINS_LIST
        /// `mcphost/pins/diff`
        public static let mcphostPinsDiff = MCPHOST_METHOD_MCPHOST_PINS_DIFF
        /// `mcphost/pins/approve`
        public static let mcphostPinsApprove = MCPHOST_METHOD_MCPHOST_PINS_APPROVE
        /// `mcphost/pins/reset`
        public static let mcphostPinsReset = MCPHOST_METHOD_MCPHOST_PINS_RESET
        /// `mcphost/audit/query`
        public static let mcphostAuditQuery = MCPHOST_METHOD_MCPHOST_AUDIT_QUERY
        /// `sampling/createMessage`
        public static let samplingCreateMessage = MCPHOST_METHOD_SAMPLING_CREATE_MESSAGE
        /// `elicitation/create`
        public static let elicitationCreate = MCPHOST_METHOD_ELICITATION_CREATE
        /// `roots/list`
        public static let rootsList = MCPHOST_METHOD_ROOTS_LIST
    }

    /// Event methods (`Event.method`), and the one notification a host sends.
    public enum EventName {
        /// `notifications/tools/list_changed`
        public static let toolsListChanged = MCPHOST_EVENT_TOOLS_LIST_CHANGED
        /// `notifications/resources/list_changed`
        public static let resourcesListChanged = MCPHOST_EVENT_RESOURCES_LIST_CHANGED
        /// `notifications/prompts/list_changed`
        public static let promptsListChanged = MCPHOST_EVENT_PROMPTS_LIST_CHANGED
        /// `notifications/resources/updated`
        public static let resourcesUpdated = MCPHOST_EVENT_RESOURCES_UPDATED
        /// `notifications/progress`
        public static let progress = MCPHOST_EVENT_PROGRESS
        /// `notifications/message`
        public static let message = MCPHOST_EVENT_MESSAGE
        /// `notifications/elicitation/complete`
        public static let elicitationComplete = MCPHOST_EVENT_ELICITATION_COMPLETE
        /// `notifications/mcphost/server_state`
        public static let serverState = MCPHOST_EVENT_SERVER_STATE
        /// `notifications/mcphost/stderr`
        public static let serverStderr = MCPHOST_EVENT_SERVER_STDERR
        /// `notifications/mcphost/events_dropped`
        public static let eventsDropped = MCPHOST_EVENT_EVENTS_DROPPED
        /// `notifications/mcphost/disconnected`
        public static let disconnected = MCPHOST_EVENT_DISCONNECTED
        /// `notifications/mcphost/reconnected`
        public static let reconnected = MCPHOST_EVENT_RECONNECTED
        /// `notifications/roots/list_changed`
        public static let rootsListChanged = MCPHOST_EVENT_ROOTS_LIST_CHANGED
        /// `notifications/mcphost/host_request_ended`: the server stopped waiting for a host request
        public static let hostRequestEnded = MCPHOST_EVENT_HOST_REQUEST_ENDED
    }
}
