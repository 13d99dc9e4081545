import Foundation
import XCTest

@testable import MCPHost

/// Paths of this checkout's binaries: `MCPHOST_TESTSERVER` and
/// `MCPHOST_BIN` (default: target/debug/ of the repository).
enum Bins {
    static let root = URL(fileURLWithPath: #filePath)  // Tests/MCPHostTests/Support.swift
        .deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func path(_ env: String, _ name: String) throws -> String {
        let p = ProcessInfo.processInfo.environment[env]
            ?? root.appendingPathComponent("target/debug/\(name)").path
        guard FileManager.default.isExecutableFile(atPath: p) else {
            throw TestFailure("no \(name) at \(p): run `cargo build --bin \(name)` or set \(env)")
        }
        return p
    }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// A config with the test server as `ts`.
func testConfig() throws -> String {
    let ts = try Bins.path("MCPHOST_TESTSERVER", "mcphost-testserver")
    return try JSON.object([
        "loginShellPath": false,
        "mcpServers": ["ts": ["command": .string(ts), "args": []]],
    ]).text()
}

/// The two ways to open a handle; every shared test runs in both.
enum Mode: String, CaseIterable {
    case embedded, connected
}

/// `mcphost daemon` in a temporary HOME with its own socket and config.
final class Daemon {
    let dir: URL
    let socket: String
    let process = Process()
    let log: URL

    init(config: String) throws {
        dir = FileManager.default.temporaryDirectory
            .appendingPathComponent("mcphost-swift-\(UUID().uuidString.prefix(8))")
        let home = dir.appendingPathComponent("home")
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        let configFile = dir.appendingPathComponent("config.json")
        try config.write(to: configFile, atomically: true, encoding: .utf8)
        socket = dir.appendingPathComponent("mcphost.sock").path
        log = dir.appendingPathComponent("daemon.log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        process.executableURL = URL(fileURLWithPath: try Bins.path("MCPHOST_BIN", "mcphost"))
        process.arguments = ["daemon", "--config", configFile.path]
        var env = ProcessInfo.processInfo.environment
        env["HOME"] = home.path
        env["MCPHOST_SOCKET"] = socket
        env["MCPHOST_CONFIG"] = configFile.path
        for k in ["XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "MCPHOST_STATE_DIR"] {
            env[k] = nil
        }
        process.environment = env
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: log)
        try Spawn(process).run()
    }

    var logText: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }

    /// Connects once the daemon listens (at most 20 s).
    func connect(_ options: MCPHost.Options) throws -> MCPHost {
        let deadline = Date().addingTimeInterval(20)
        while true {
            do {
                return try MCPHost.connect(socketPath: socket, options: options)
            } catch MCPHostError.notRunning where Date() < deadline && process.isRunning {
                Thread.sleep(forTimeInterval: 0.05)
            } catch {
                throw TestFailure("connect: \(error)\ndaemon log:\n\(logText)")
            }
        }
    }

    /// SIGTERM, then (after 10 s) SIGKILL; throws if SIGTERM was not enough.
    func stop() throws {
        defer { try? FileManager.default.removeItem(at: dir) }
        guard process.isRunning else { return }
        process.terminate()
        let deadline = Date().addingTimeInterval(10)
        while process.isRunning, Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw TestFailure("the daemon ignored SIGTERM for 10 s\ndaemon log:\n\(logText)")
        }
    }
}

/// Starts a process from a thread with no signal blocked. Dispatch's
/// threads (where async tests run) block nearly every signal, and a child
/// inherits the mask: the daemon would never see SIGTERM.
final class Spawn: @unchecked Sendable {
    private let process: Process
    private var error: Error?
    private let done = DispatchSemaphore(value: 0)

    init(_ process: Process) { self.process = process }

    func run() throws {
        let t = Thread { [self] in
            var none = sigset_t()
            sigemptyset(&none)
            pthread_sigmask(SIG_SETMASK, &none, nil)
            do { try process.run() } catch { self.error = error }
            done.signal()
        }
        t.start()
        done.wait()
        if let error { throw error }
    }
}

extension XCTestCase {
    /// Opens a handle in `mode` on the test server (ready, tools listed),
    /// runs `body`, closes it (and stops the daemon).
    func withHost(
        _ mode: Mode, _ options: MCPHost.Options = MCPHost.Options(),
        _ body: (MCPHost) async throws -> Void
    ) async throws {
        let host: MCPHost
        var daemon: Daemon?
        switch mode {
        case .embedded:
            var o = options
            if o.waitReady == nil { o.waitReady = .seconds(20) }
            host = try MCPHost.openEmbedded(config: try testConfig(), options: o)
        case .connected:
            let d = try Daemon(config: try testConfig())
            daemon = d
            do {
                host = try d.connect(options)
            } catch {
                try? d.stop()
                throw error
            }
        }
        do {
            try await listedAndRun(mode, host, body)
        } catch {
            host.close()
            try? daemon?.stop()
            throw error
        }
        host.close()
        try daemon?.stop()
    }

    private func listedAndRun(
        _ mode: Mode, _ host: MCPHost, _ body: (MCPHost) async throws -> Void
    ) async throws {
        // The daemon starts its servers on its own: wait for the catalog.
        let deadline = Date().addingTimeInterval(20)
        while try await !host.listTools().contains(where: { $0["name"] == "ts__echo" }) {
            guard Date() < deadline else { throw TestFailure("\(mode): ts__echo never listed") }
            try await Task.sleep(for: .milliseconds(50))
        }
        try await body(host)
    }
}

/// How many calls of the test server's `tool` have started at it:
/// mcphost-testserver logs "in flight: tools/call TOOL" as a blocking call
/// starts.
func inFlightCount(_ host: MCPHost, _ tool: String) async throws -> Int {
    let needle = "in flight: tools/call \(tool)"
    let logs = try await host.request("mcphost/servers/logs", params: ["name": "ts"])
    return (logs["lines"]?.arrayValue ?? []).filter { $0.stringValue?.contains(needle) ?? false }.count
}

/// Waits until the `count`th call of `tool` is pending at the test server:
/// a wait on that event, not on time.
func waitInFlight(_ host: MCPHost, _ tool: String, count: Int) async throws {
    let deadline = Date().addingTimeInterval(20)
    while true {
        let n = try await inFlightCount(host, tool)
        if n >= count { return }
        guard Date() < deadline else {
            throw TestFailure("\(n) of \(count) calls of \(tool) pending at the server")
        }
        try await Task.sleep(for: .milliseconds(50))
    }
}

/// The text of a tool result's first content block.
func text(_ result: JSON) -> String {
    result["content"]?[0]?["text"]?.stringValue ?? "<no text in \(result)>"
}

final class Recorder: @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String] = []
    func add(_ s: String) {
        lock.lock()
        items.append(s)
        lock.unlock()
    }
    var all: [String] {
        lock.lock()
        defer { lock.unlock() }
        return items
    }
}
