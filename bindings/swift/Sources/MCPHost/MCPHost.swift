import CMCPHost
import Foundation

/// Which elicitation modes the host's handler takes
/// (MCPHOST_ELICITATION_FORM / MCPHOST_ELICITATION_URL).
public struct ElicitationModes: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let form = ElicitationModes(rawValue: UInt32(MCPHOST_ELICITATION_FORM))
    public static let url = ElicitationModes(rawValue: UInt32(MCPHOST_ELICITATION_URL))
}

/// A handle on mcphost: an engine in this process (`openEmbedded`) or a
/// connection to the daemon (`connect`). Every method may be called from
/// any thread or task at once. `close()` (or dropping the last reference)
/// stops it: requests still running then throw `MCPHostError.closed`.
/// A host handler that captures the handle keeps it alive: call `close()`.
public final class MCPHost: @unchecked Sendable {
    /// The library's ABI (`mcphost_abi_version`).
    public static var abiVersion: UInt32 { mcphost_abi_version() }
    /// The library's release, e.g. `"0.1.0"` (`mcphost_version`).
    public static var version: String {
        mcphost_version().map { String(cString: $0) } ?? "unknown"
    }

    /// Events (JSON-RPC notifications) in order, from the moment the handle
    /// opened; ends when it is closed. One reader (AsyncStream's rule: two
    /// tasks awaiting it at once is a crash), and leaving a `for await`
    /// loop over it ends it for good: keep one long-lived loop.
    public let events: AsyncStream<MCPHost.Event>

    // Read-locked around every C call on the handle, write-locked only to
    // take it for mcphost_free: no call can use a freed handle. C calls on
    // it never block (blocking requests are async ones waited for).
    private let lock = RWLock()
    private var handle: OpaquePointer?

    private init(handle: OpaquePointer, events: AsyncStream<MCPHost.Event>) {
        self.handle = handle
        self.events = events
    }

    deinit { close() }

    /// Opens an engine in this process with a config in the format of
    /// mcphost's config file (JSONC, `{"mcpServers": {…}}`). Blocks while
    /// the engine starts (and for `options.waitReady`).
    public static func openEmbedded(config: String, options: Options = Options()) throws -> MCPHost {
        try open(options) { o, out, err in
            config.withCString { mcphost_open_embedded($0, o, out, err) }
        }
    }

    /// Connects to a running daemon (nil: `$MCPHOST_SOCKET`, else the
    /// default path). Throws `.notRunning` when none listens and
    /// `.versionMismatch` for another release.
    public static func connect(socketPath: String? = nil, options: Options = Options()) throws -> MCPHost {
        try open(options) { o, out, err in
            if let socketPath {
                return socketPath.withCString { mcphost_connect($0, o, out, err) }
            }
            return mcphost_connect(nil, o, out, err)
        }
    }

    private static func open(
        _ options: Options,
        _ opener: (OpaquePointer, UnsafeMutablePointer<OpaquePointer?>, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> UInt32
    ) throws -> MCPHost {
        let abi = mcphost_abi_version()
        guard abi == UInt32(MCPHOST_ABI_VERSION) else {
            throw MCPHostError.abiMismatch(library: abi, header: UInt32(MCPHOST_ABI_VERSION))
        }
        let policy: AsyncStream<MCPHost.Event>.Continuation.BufferingPolicy =
            options.eventBufferLimit.map { .bufferingNewest(max($0, 1)) } ?? .unbounded
        let (stream, continuation) = AsyncStream<MCPHost.Event>.makeStream(bufferingPolicy: policy)
        // The library frees the callbacks' user_data once these options
        // and the handle are both freed (or right away if opening fails).
        let o = try COptions(options, events: continuation)
        defer { o.free() }
        var out: OpaquePointer?
        var err: UnsafeMutablePointer<CChar>?
        let status = opener(o.ptr, &out, &err)
        try check(status, err)
        guard let out else {
            throw MCPHostError.unknown(status: status, message: "libmcphost returned no handle")
        }
        return MCPHost(handle: out, events: stream)
    }

    /// Closes the handle (mcphost_free): running requests throw
    /// `.closed`, every server is stopped and, embedded, this returns once
    /// none of their processes is left. Later calls throw `.closed`.
    public func close() {
        let h: OpaquePointer? = lock.write {
            let h = handle
            handle = nil
            return h
        }
        if let h { mcphost_free(h) }
    }

    private func withHandle<T>(_ f: (OpaquePointer) throws -> T) throws -> T {
        try lock.read {
            guard let h = handle else { throw MCPHostError.closed("the handle was closed") }
            return try f(h)
        }
    }

    // ---- requests -------------------------------------------------------

    /// Sends a JSON-RPC request (`{"method": …, "params": …}`) and returns
    /// the JSON-RPC response text unchanged. Cancelling the Task cancels
    /// the request (mcphost_cancel) and throws `.cancelled`.
    public func request(json: String) async throws -> String {
        let box = RequestBoxRef()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<String, Error>) in
                let b = RequestBox { c.resume(with: $0.mapError { $0 as Error }) }
                box.set(b)
                do {
                    try start(json, b)
                } catch {
                    c.resume(throwing: error)
                }
            }
        } onCancel: {
            box.cancel()
        }
    }

    /// Sends `method` with `params` and returns the response's `result`;
    /// a JSON-RPC error throws `.rpc`.
    public func request(_ method: String, params: JSON? = nil) async throws -> JSON {
        try Self.result(of: try await request(json: try Self.requestText(method, params)))
    }

    /// As `request(json:)`, blocking the calling thread; not for async code.
    @available(*, noasync, message: "use request(json:) in async code")
    public func requestSync(json: String) throws -> String {
        let done = DispatchSemaphore(value: 0)
        let outcome = Outcome()
        try start(json, RequestBox { outcome.set($0); done.signal() })
        done.wait()
        return try outcome.get()
    }

    /// As `request(_:params:)`, blocking the calling thread.
    @available(*, noasync, message: "use request(_:params:) in async code")
    public func requestSync(_ method: String, params: JSON? = nil) throws -> JSON {
        try Self.result(of: try requestSync(json: try Self.requestText(method, params)))
    }

    /// Sends a notification from the host: `notifications/roots/list_changed`
    /// is the one mcphost takes (mcphost_notify).
    public func notify(_ method: String, params: JSON? = nil) throws {
        let text = try Self.requestText(method, params)
        try withHandle { h in
            var err: UnsafeMutablePointer<CChar>?
            let status = text.withCString { mcphost_notify(h, $0, &err) }
            try check(status, err)
        }
    }

    /// Tells servers the roots changed (they ask the roots handler again).
    public func rootsListChanged() throws {
        try notify(MCPHOST_EVENT_ROOTS_LIST_CHANGED)
    }

    /// `tools/call` with `name` (a catalog name, `server__tool`).
    public func callTool(_ name: String, arguments: JSON? = nil) async throws -> JSON {
        var params: [String: JSON] = ["name": .string(name)]
        if let arguments { params["arguments"] = arguments }
        return try await request(MCPHOST_METHOD_TOOLS_CALL, params: .object(params))
    }

    /// Every tool of the catalog (`tools/list`, all pages).
    public func listTools() async throws -> [JSON] {
        var tools: [JSON] = []
        var cursor: String?
        repeat {
            let params: JSON? = cursor.map { ["cursor": .string($0)] }
            let page = try await request(MCPHOST_METHOD_TOOLS_LIST, params: params)
            tools += page["tools"]?.arrayValue ?? []
            cursor = page["nextCursor"]?.stringValue
        } while cursor != nil
        return tools
    }

    /// Starts one async request; `box` completes exactly once unless this
    /// throws (then the library never calls back).
    private func start(_ json: String, _ box: RequestBox) throws {
        try withHandle { h in
            let userData = Unmanaged.passRetained(box).toOpaque()
            var call: OpaquePointer?
            var err: UnsafeMutablePointer<CChar>?
            let status = json.withCString {
                mcphost_request_async(h, $0, responseCallback, userData, &call, &err)
            }
            if status != MCPHOST_OK.rawValue {
                Unmanaged<RequestBox>.fromOpaque(userData).release()
            }
            try check(status, err)
            box.started(call)
        }
    }

    static func requestText(_ method: String, _ params: JSON?) throws -> String {
        var r: [String: JSON] = ["method": .string(method)]
        if let params { r["params"] = params }
        return try JSON.object(r).text()
    }

    static func result(of response: String) throws -> JSON {
        let v = try JSON(parsing: response)
        if let result = v["result"] { return result }
        throw MCPHostError.rpc(RPCError(response: response, message: "no result in the response"))
    }
}

extension MCPHost {
    /// How a handle is opened. Setting a handler declares that capability
    /// (sampling, elicitation, roots) for the handle's session.
    public struct Options: Sendable {
        /// The session's name in `mcphost/status` and server logs (library
        /// default: `"libmcphost"`).
        public var clientName: String?
        /// How long a request waits for its answer (nil or zero: the
        /// library's default, 600 s).
        public var requestTimeout: Duration?
        /// Embedded: how long opening waits for the servers to be ready or
        /// failed (default: not at all; list_changed events announce them).
        public var waitReady: Duration?
        public var sampling: HostHandler?
        public var elicitation: HostHandler?
        public var elicitationModes: ElicitationModes
        public var roots: HostHandler?
        /// At most this many events wait in `events` for a reader; the oldest
        /// are dropped past it. nil: no limit.
        public var eventBufferLimit: Int?

        public init(
            clientName: String? = nil,
            requestTimeout: Duration? = nil,
            waitReady: Duration? = nil,
            sampling: HostHandler? = nil,
            elicitation: HostHandler? = nil,
            elicitationModes: ElicitationModes = .form,
            roots: HostHandler? = nil,
            eventBufferLimit: Int? = 10_000
        ) {
            self.clientName = clientName
            self.requestTimeout = requestTimeout
            self.waitReady = waitReady
            self.sampling = sampling
            self.elicitation = elicitation
            self.elicitationModes = elicitationModes
            self.roots = roots
            self.eventBufferLimit = eventBufferLimit
        }
    }
}

/// The libmcphost options made from `Options`, freed after opening.
private struct COptions {
    let ptr: OpaquePointer

    init(_ options: MCPHost.Options, events: AsyncStream<MCPHost.Event>.Continuation) throws {
        guard let p = mcphost_options_new() else {
            throw MCPHostError.runtime("mcphost_options_new: out of memory")
        }
        ptr = p
        do {
            try set(options)
            let box = Unmanaged.passRetained(EventBox(events)).toOpaque()
            let s = mcphost_options_set_event_callback(p, eventCallback, box, freeEventBox)
            if s != MCPHOST_OK.rawValue { Unmanaged<EventBox>.fromOpaque(box).release() }
            try check(s, nil)
        } catch {
            mcphost_options_free(p)
            throw error
        }
    }

    private func set(_ o: MCPHost.Options) throws {
        if let name = o.clientName {
            try check(name.withCString { mcphost_options_set_client_name(ptr, $0) }, nil)
        }
        if let t = o.requestTimeout {
            try check(mcphost_options_set_request_timeout_ms(ptr, milliseconds(t)), nil)
        }
        if let t = o.waitReady {
            try check(mcphost_options_set_wait_ready_ms(ptr, milliseconds(t)), nil)
        }
        if let h = o.sampling {
            try register(h) { mcphost_options_set_sampling(ptr, hostCallback, $0, freeHandlerBox) }
        }
        if let h = o.elicitation {
            let modes = o.elicitationModes.rawValue
            try register(h) {
                mcphost_options_set_elicitation(ptr, modes, hostCallback, $0, freeHandlerBox)
            }
        }
        if let h = o.roots {
            try register(h) { mcphost_options_set_roots(ptr, hostCallback, $0, freeHandlerBox) }
        }
    }

    /// Passes a retained handler; the library releases it through
    /// free_user_data, except when the setter fails (then we do).
    private func register(_ h: @escaping HostHandler, _ setter: (UnsafeMutableRawPointer) -> UInt32) throws {
        let box = Unmanaged.passRetained(HandlerBox(h)).toOpaque()
        let s = setter(box)
        if s != MCPHOST_OK.rawValue { Unmanaged<HandlerBox>.fromOpaque(box).release() }
        try check(s, nil)
    }

    func free() { mcphost_options_free(ptr) }
}

/// Whole milliseconds, at least 1 for a positive duration (0 would mean
/// the library's default), saturating.
func milliseconds(_ d: Duration) -> UInt64 {
    let (s, atto) = d.components
    if s < 0 || (s == 0 && atto <= 0) { return 0 }
    let (ms, overflow) = UInt64(s).multipliedReportingOverflow(by: 1000)
    if overflow { return UInt64.max }
    let total = ms.addingReportingOverflow(UInt64(atto / 1_000_000_000_000_000))
    return total.overflow ? UInt64.max : max(total.partialValue, 1)
}

/// The box of a request as `onCancel` sees it (it may run before the box
/// exists, or at once if the task was already cancelled).
private final class RequestBoxRef: @unchecked Sendable {
    private let lock = NSLock()
    private var box: RequestBox?
    private var cancelled = false

    func set(_ b: RequestBox) {
        lock.lock()
        box = b
        let c = cancelled
        lock.unlock()
        if c { b.cancel() }
    }

    func cancel() {
        lock.lock()
        cancelled = true
        let b = box
        lock.unlock()
        b?.cancel()
    }
}

/// A sync request's outcome, handed from the callback thread.
private final class Outcome: @unchecked Sendable {
    private let lock = NSLock()
    private var r: Result<String, MCPHostError>?

    func set(_ r: Result<String, MCPHostError>) {
        lock.lock()
        self.r = r
        lock.unlock()
    }

    func get() throws -> String {
        lock.lock()
        defer { lock.unlock() }
        guard let r else { throw MCPHostError.closed("no answer") }
        return try r.get()
    }
}

/// A pthread read-write lock.
final class RWLock: @unchecked Sendable {
    private let p: UnsafeMutablePointer<pthread_rwlock_t>

    init() {
        p = .allocate(capacity: 1)
        p.initialize(to: pthread_rwlock_t())
        pthread_rwlock_init(p, nil)
    }

    deinit {
        pthread_rwlock_destroy(p)
        p.deinitialize(count: 1)
        p.deallocate()
    }

    func read<T>(_ f: () throws -> T) rethrows -> T {
        pthread_rwlock_rdlock(p)
        defer { pthread_rwlock_unlock(p) }
        return try f()
    }

    func write<T>(_ f: () throws -> T) rethrows -> T {
        pthread_rwlock_wrlock(p)
        defer { pthread_rwlock_unlock(p) }
        return try f()
    }
}
