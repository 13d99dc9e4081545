import CMCPHost
import Foundation

// Every C callback lands on the library's callback thread and returns at
// once: host requests go to a Task, events into an AsyncStream, request
// outcomes to a continuation. No code of the host's runs on that thread.

/// A server's request to the host (sampling, elicitation or roots).
public struct HostRequest: Sendable {
    /// The server that asks.
    public let server: String
    /// `sampling/createMessage`, `elicitation/create` or `roots/list`.
    public let method: String
    public let params: JSON?
    /// The request as the library passed it.
    public let json: String

    /// For elicitation: `"form"` (the default) or `"url"`.
    public var mode: String { params?["mode"]?.stringValue ?? "form" }

    init(json: String) {
        let v = try? JSON(parsing: json)
        self.server = v?["server"]?.stringValue ?? ""
        self.method = v?["method"]?.stringValue ?? ""
        self.params = v?["params"]
        self.json = json
    }
}

/// Throw this from a host handler to answer with this JSON-RPC error.
/// Any other error answers -32603 with its description.
public struct HostError: Error, Sendable, Hashable {
    public let code: Int64
    public let message: String
    public init(code: Int64, message: String) {
        self.code = code
        self.message = message
    }
}

/// Answers a server's request: returns the JSON-RPC result object (for an
/// elicitation e.g. `["action": "accept", "content": [...]]`).
public typealias HostHandler = @Sendable (HostRequest) async throws -> JSON

extension MCPHost {
    /// An event: a JSON-RPC notification (method names: the `MCPHOST_EVENT_*` constants).
    public struct Event: Sendable {
        public let method: String
        public let params: JSON?
        /// The notification as the library passed it.
        public let json: String

        init(json: String) {
            let v = try? JSON(parsing: json)
            self.method = v?["method"]?.stringValue ?? ""
            self.params = v?["params"]
            self.json = json
        }
    }
}

// ---- host callbacks ---------------------------------------------------

/// A handler retained as a callback's user_data; released by free_user_data.
final class HandlerBox {
    let handler: HostHandler
    init(_ handler: @escaping HostHandler) { self.handler = handler }
}

let hostCallback: mcphost_host_callback = { userData, requestJson, responder in
    guard let responder else { return }
    let r = Responder(responder)
    guard let userData, let requestJson else {
        r.fail(code: -32603, message: "libmcphost passed no request")
        return
    }
    let handler = Unmanaged<HandlerBox>.fromOpaque(userData).takeUnretainedValue().handler
    let request = HostRequest(json: String(cString: requestJson))
    Task.detached { await r.run(handler, request) }
}

let freeHandlerBox: mcphost_free_fn = { userData in
    guard let userData else { return }
    Unmanaged<HandlerBox>.fromOpaque(userData).release()
}

/// Owns one `mcphost_responder`: answers it once, then frees it; one
/// dropped unanswered is freed too (the library then answers the server
/// with an error).
final class Responder: @unchecked Sendable {
    private let lock = NSLock()
    private var ptr: OpaquePointer?

    init(_ ptr: OpaquePointer) { self.ptr = ptr }

    deinit {
        if let ptr { mcphost_responder_free(ptr) }
    }

    func run(_ handler: HostHandler, _ request: HostRequest) async {
        do {
            let result = try await handler(request)
            answer(result)
        } catch let e as HostError {
            fail(code: e.code, message: e.message)
        } catch {
            fail(code: -32603, message: "the host's handler failed: \(error)")
        }
    }

    /// Answers with `result`; one that is no JSON object answers -32603.
    func answer(_ result: JSON) {
        let text: String
        do {
            text = try result.text()
        } catch {
            fail(code: -32603, message: "the host's answer is not JSON: \(error)")
            return
        }
        let answered: Bool = withPtr { p in
            var err: UnsafeMutablePointer<CChar>?
            let status = text.withCString { mcphost_responder_result(p, $0, &err) }
            _ = takeString(err)
            // Refused (not an object, bad JSON): nothing was sent.
            return status != MCPHOST_ERR_INVALID_JSON.rawValue
                && status != MCPHOST_ERR_INVALID_REQUEST.rawValue
        } ?? true
        if !answered {
            fail(code: -32603, message: "the host's answer is not a JSON object")
        } else {
            release()
        }
    }

    /// Answers with a JSON-RPC error.
    func fail(code: Int64, message: String) {
        _ = withPtr { p in
            var err: UnsafeMutablePointer<CChar>?
            // ALREADY_ANSWERED / NOT_WAITING: nothing more to do.
            _ = message.withCString { mcphost_responder_error(p, code, $0, nil, &err) }
            _ = takeString(err)
        }
        release()
    }

    private func withPtr<T>(_ f: (OpaquePointer) -> T) -> T? {
        lock.lock()
        defer { lock.unlock() }
        return ptr.map(f)
    }

    private func release() {
        lock.lock()
        let p = ptr
        ptr = nil
        lock.unlock()
        if let p { mcphost_responder_free(p) }
    }
}

// ---- events -----------------------------------------------------------

/// The event stream's continuation as the event callback's user_data; the
/// stream ends when the library frees it (the handle was freed).
final class EventBox {
    let continuation: AsyncStream<MCPHost.Event>.Continuation
    init(_ continuation: AsyncStream<MCPHost.Event>.Continuation) { self.continuation = continuation }
}

let eventCallback: mcphost_event_callback = { userData, eventJson in
    guard let userData, let eventJson else { return }
    let box = Unmanaged<EventBox>.fromOpaque(userData).takeUnretainedValue()
    box.continuation.yield(MCPHost.Event(json: String(cString: eventJson)))
}

let freeEventBox: mcphost_free_fn = { userData in
    guard let userData else { return }
    Unmanaged<EventBox>.fromOpaque(userData).takeRetainedValue().continuation.finish()
}

// ---- async requests ---------------------------------------------------

/// One `mcphost_request_async`: its completion, its call handle, and
/// whether it was cancelled. Retained as user_data until the response
/// callback (called exactly once) takes it back.
final class RequestBox: @unchecked Sendable {
    private let lock = NSLock()
    private var completion: (@Sendable (Result<String, MCPHostError>) -> Void)?
    private var call: OpaquePointer?
    private var cancelled = false
    private var done = false

    init(_ completion: @escaping @Sendable (Result<String, MCPHostError>) -> Void) {
        self.completion = completion
    }

    /// The request started: keep its call handle to cancel with, unless it
    /// already ended (then free it now).
    func started(_ c: OpaquePointer?) {
        guard let c else { return }
        lock.lock()
        if done {
            lock.unlock()
            mcphost_call_free(c)
            return
        }
        call = c
        if cancelled { _ = mcphost_cancel(c) }
        lock.unlock()
    }

    /// Task cancellation: cancels the request (now, or once it started).
    func cancel() {
        lock.lock()
        defer { lock.unlock() }
        cancelled = true
        // The call handle is freed only under this lock, after `done`.
        if let c = call, !done { _ = mcphost_cancel(c) }
    }

    func complete(_ r: Result<String, MCPHostError>) {
        lock.lock()
        if done {
            lock.unlock()
            return
        }
        done = true
        let c = call
        call = nil
        let f = completion
        completion = nil
        lock.unlock()
        if let c { mcphost_call_free(c) }
        f?(r)
    }
}

let responseCallback: mcphost_response_callback = { userData, status, responseJson, error in
    guard let userData else { return }
    let box = Unmanaged<RequestBox>.fromOpaque(userData).takeRetainedValue()
    let response = responseJson.map { String(cString: $0) }
    let message = error.map { String(cString: $0) }
    if status == MCPHOST_OK.rawValue, let response {
        box.complete(.success(response))
    } else if status == MCPHOST_OK.rawValue {
        box.complete(.failure(.unknown(status: status, message: "libmcphost returned no response")))
    } else {
        box.complete(.failure(MCPHostError(status: status, message: message, response: response)))
    }
}
