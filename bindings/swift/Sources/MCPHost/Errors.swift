import CMCPHost

/// A JSON-RPC error a request was answered with (`MCPHOST_ERR_RPC`).
public struct RPCError: Sendable, Hashable {
    public let code: Int64
    public let message: String
    public let data: JSON?
    /// The whole JSON-RPC response, as the library returned it.
    public let response: String
}

/// What a call failed with: one case per `mcphost_status` of
/// include/mcphost.h (same order), each with the library's message.
public enum MCPHostError: Error, Sendable, Hashable {
    /// MCPHOST_ERR_NULL_ARGUMENT (1)
    case nullArgument(String)
    /// MCPHOST_ERR_INVALID_UTF8 (2)
    case invalidUTF8(String)
    /// MCPHOST_ERR_INVALID_JSON (3)
    case invalidJSON(String)
    /// MCPHOST_ERR_INVALID_REQUEST (4)
    case invalidRequest(String)
    /// MCPHOST_ERR_CONFIG (5)
    case config(String)
    /// MCPHOST_ERR_NOT_RUNNING (6)
    case notRunning(String)
    /// MCPHOST_ERR_CONNECT (7)
    case connect(String)
    /// MCPHOST_ERR_VERSION_MISMATCH (8)
    case versionMismatch(String)
    /// MCPHOST_ERR_RPC (9)
    case rpc(RPCError)
    /// MCPHOST_ERR_TIMEOUT (10)
    case timeout(String)
    /// MCPHOST_ERR_CANCELLED (11): also what a cancelled Task's request throws.
    case cancelled(String)
    /// MCPHOST_ERR_CLOSED (12)
    case closed(String)
    /// MCPHOST_ERR_ON_CALLBACK_THREAD (13)
    case onCallbackThread(String)
    /// MCPHOST_ERR_ALREADY_ANSWERED (14)
    case alreadyAnswered(String)
    /// MCPHOST_ERR_NOT_WAITING (15)
    case notWaiting(String)
    /// MCPHOST_ERR_INVALID_HANDLE (16)
    case invalidHandle(String)
    /// MCPHOST_ERR_RUNTIME (17)
    case runtime(String)
    /// MCPHOST_ERR_PANIC (18)
    case panic(String)
    /// MCPHOST_ERR_UNSUPPORTED (19)
    case unsupported(String)
    /// A status this binding does not know (a newer library).
    case unknown(status: UInt32, message: String)
    /// The library's ABI is not the one of the header this was built with.
    case abiMismatch(library: UInt32, header: UInt32)

    /// Maps a status (not MCPHOST_OK) and its message. For MCPHOST_ERR_RPC
    /// `response` is the response holding the `error` object.
    init(status: UInt32, message: String?, response: String? = nil) {
        let m = message ?? MCPHostError.name(status)
        switch status {
        case MCPHOST_ERR_NULL_ARGUMENT.rawValue: self = .nullArgument(m)
        case MCPHOST_ERR_INVALID_UTF8.rawValue: self = .invalidUTF8(m)
        case MCPHOST_ERR_INVALID_JSON.rawValue: self = .invalidJSON(m)
        case MCPHOST_ERR_INVALID_REQUEST.rawValue: self = .invalidRequest(m)
        case MCPHOST_ERR_CONFIG.rawValue: self = .config(m)
        case MCPHOST_ERR_NOT_RUNNING.rawValue: self = .notRunning(m)
        case MCPHOST_ERR_CONNECT.rawValue: self = .connect(m)
        case MCPHOST_ERR_VERSION_MISMATCH.rawValue: self = .versionMismatch(m)
        case MCPHOST_ERR_RPC.rawValue: self = .rpc(RPCError(response: response, message: m))
        case MCPHOST_ERR_TIMEOUT.rawValue: self = .timeout(m)
        case MCPHOST_ERR_CANCELLED.rawValue: self = .cancelled(m)
        case MCPHOST_ERR_CLOSED.rawValue: self = .closed(m)
        case MCPHOST_ERR_ON_CALLBACK_THREAD.rawValue: self = .onCallbackThread(m)
        case MCPHOST_ERR_ALREADY_ANSWERED.rawValue: self = .alreadyAnswered(m)
        case MCPHOST_ERR_NOT_WAITING.rawValue: self = .notWaiting(m)
        case MCPHOST_ERR_INVALID_HANDLE.rawValue: self = .invalidHandle(m)
        case MCPHOST_ERR_RUNTIME.rawValue: self = .runtime(m)
        case MCPHOST_ERR_PANIC.rawValue: self = .panic(m)
        case MCPHOST_ERR_UNSUPPORTED.rawValue: self = .unsupported(m)
        default: self = .unknown(status: status, message: m)
        }
    }

    /// The `mcphost_status` number of this error (0 for `abiMismatch`,
    /// which the library never returns).
    public var status: UInt32 {
        switch self {
        case .nullArgument: return MCPHOST_ERR_NULL_ARGUMENT.rawValue
        case .invalidUTF8: return MCPHOST_ERR_INVALID_UTF8.rawValue
        case .invalidJSON: return MCPHOST_ERR_INVALID_JSON.rawValue
        case .invalidRequest: return MCPHOST_ERR_INVALID_REQUEST.rawValue
        case .config: return MCPHOST_ERR_CONFIG.rawValue
        case .notRunning: return MCPHOST_ERR_NOT_RUNNING.rawValue
        case .connect: return MCPHOST_ERR_CONNECT.rawValue
        case .versionMismatch: return MCPHOST_ERR_VERSION_MISMATCH.rawValue
        case .rpc: return MCPHOST_ERR_RPC.rawValue
        case .timeout: return MCPHOST_ERR_TIMEOUT.rawValue
        case .cancelled: return MCPHOST_ERR_CANCELLED.rawValue
        case .closed: return MCPHOST_ERR_CLOSED.rawValue
        case .onCallbackThread: return MCPHOST_ERR_ON_CALLBACK_THREAD.rawValue
        case .alreadyAnswered: return MCPHOST_ERR_ALREADY_ANSWERED.rawValue
        case .notWaiting: return MCPHOST_ERR_NOT_WAITING.rawValue
        case .invalidHandle: return MCPHOST_ERR_INVALID_HANDLE.rawValue
        case .runtime: return MCPHOST_ERR_RUNTIME.rawValue
        case .panic: return MCPHOST_ERR_PANIC.rawValue
        case .unsupported: return MCPHOST_ERR_UNSUPPORTED.rawValue
        case .unknown(let status, _): return status
        case .abiMismatch: return 0
        }
    }

    /// The library's message.
    public var message: String {
        switch self {
        case .nullArgument(let m), .invalidUTF8(let m), .invalidJSON(let m),
            .invalidRequest(let m), .config(let m), .notRunning(let m), .connect(let m),
            .versionMismatch(let m), .timeout(let m), .cancelled(let m), .closed(let m),
            .onCallbackThread(let m), .alreadyAnswered(let m), .notWaiting(let m),
            .invalidHandle(let m), .runtime(let m), .panic(let m), .unsupported(let m):
            return m
        case .rpc(let e): return e.message
        case .unknown(_, let m): return m
        case .abiMismatch(let library, let header):
            return "libmcphost has ABI \(library), this binding was built for ABI \(header): "
                + "rebuild the library and the binding from one checkout"
        }
    }

    /// The status's name, e.g. `"MCPHOST_ERR_TIMEOUT"` (mcphost_status_name).
    public static func name(_ status: UInt32) -> String {
        // A static string: never freed.
        guard let p = mcphost_status_name(status) else { return "MCPHOST_ERR_UNKNOWN" }
        return String(cString: p)
    }
}

extension MCPHostError: CustomStringConvertible {
    public var description: String {
        switch self {
        case .rpc(let e): return "MCPHOST_ERR_RPC: \(e.code) \(e.message)"
        case .abiMismatch: return message
        default: return "\(MCPHostError.name(status)): \(message)"
        }
    }
}

extension RPCError {
    /// From the response holding the `error` object; falls back to the
    /// library's message when the response is missing or odd.
    init(response: String?, message: String) {
        let parsed = response.flatMap { try? JSON(parsing: $0) }
        let error = parsed?["error"]
        self.init(
            code: error?["code"]?.intValue ?? -32603,
            message: error?["message"]?.stringValue ?? message,
            data: error?["data"],
            response: response ?? "")
    }
}

/// Takes a string the library returned and frees it (mcphost_string_free).
func takeString(_ p: UnsafeMutablePointer<CChar>?) -> String? {
    guard let p else { return nil }
    defer { mcphost_string_free(p) }
    return String(cString: p)
}

/// Throws the error for `status` unless it is MCPHOST_OK; frees `error`.
func check(_ status: UInt32, _ error: UnsafeMutablePointer<CChar>?) throws {
    let message = takeString(error)
    if status != MCPHOST_OK.rawValue {
        throw MCPHostError(status: status, message: message)
    }
}
