import CMCPHost
import Foundation
import XCTest

@testable import MCPHost

/// Against mcphost-testserver, embedded and through `mcphost daemon`
/// (Support.swift finds the binaries).
final class MCPHostTests: XCTestCase {
    func testVersionAndABI() {
        XCTAssertEqual(MCPHost.abiVersion, UInt32(MCPHOST_ABI_VERSION))
        XCTAssertFalse(MCPHost.version.isEmpty)
        XCTAssertEqual(MCPHostError.name(MCPHOST_ERR_TIMEOUT.rawValue), "MCPHOST_ERR_TIMEOUT")
        XCTAssertEqual(MCPHostError.name(9999), "MCPHOST_ERR_UNKNOWN")
        XCTAssertEqual(MCPHost.Method.toolsCall, "tools/call")
        XCTAssertEqual(MCPHost.Method.mcphostServersAdd, "mcphost/servers/add")
        XCTAssertEqual(MCPHost.Method.elicitationCreate, "elicitation/create")
        XCTAssertEqual(MCPHost.EventName.serverState, "notifications/mcphost/server_state")
        XCTAssertEqual(MCPHost.EventName.rootsListChanged, "notifications/roots/list_changed")
    }

    func testToolCallAsyncAndSync() async throws {
        for mode in Mode.allCases {
            try await withHost(mode) { host in
                let r = try await host.callTool("ts__echo", arguments: ["text": "hello from swift"])
                XCTAssertEqual(text(r), "hello from swift", "\(mode)")
                // The blocking form, from a thread that is not a task.
                let sync: String = try await withCheckedThrowingContinuation { c in
                    Thread.detachNewThread {
                        c.resume(with: Result {
                            text(try host.requestSync(
                                MCPHOST_METHOD_TOOLS_CALL,
                                params: ["name": "ts__echo", "arguments": ["text": "sync"]]))
                        })
                    }
                }
                XCTAssertEqual(sync, "sync", "\(mode)")
                // The raw form returns the response text with the id echoed.
                let raw = try await host.request(json: #"{"id": 7, "method": "ping"}"#)
                XCTAssertEqual(try JSON(parsing: raw)["id"], 7, "\(mode)")
            }
        }
    }

    func testErrorsMapStatuses() async throws {
        for mode in Mode.allCases {
            var closedHost: MCPHost?
            try await withHost(mode) { host in
                do {
                    _ = try await host.callTool("ts__no_such_tool")
                    XCTFail("\(mode): an unknown tool must fail")
                } catch MCPHostError.rpc(let e) {
                    XCTAssertEqual(e.code, -32602, "\(mode)")
                    XCTAssertTrue(e.response.contains("\"error\""), e.response)
                }
                do {
                    _ = try await host.request(json: "{not json")
                    XCTFail("\(mode): bad JSON must fail")
                } catch let e as MCPHostError {
                    XCTAssertEqual(e.status, MCPHOST_ERR_INVALID_JSON.rawValue, "\(mode): \(e)")
                }
                closedHost = host
            }
            // withHost closed it.
            do {
                _ = try await closedHost?.request("ping")
                XCTFail("\(mode): a closed handle must fail")
            } catch MCPHostError.closed {}
        }
        XCTAssertThrowsError(try MCPHost.openEmbedded(config: #"{"mcpServers": 5}"#)) { e in
            guard case MCPHostError.config(let m) = e else { return XCTFail("\(e)") }
            XCTAssertFalse(m.isEmpty)
        }
        XCTAssertThrowsError(try MCPHost.connect(socketPath: "/nonexistent/mcphost-swift.sock")) { e in
            guard case MCPHostError.notRunning = e else { return XCTFail("\(e)") }
        }
    }

    func testTaskCancellationCancelsTheRequest() async throws {
        for mode in Mode.allCases {
            try await withHost(mode) { host in
                let before = try await inFlightCount(host, "slow")
                let started = Date()
                let task = Task { try await host.callTool("ts__slow", arguments: ["ms": 20_000]) }
                try await waitInFlight(host, "slow", count: before + 1)
                task.cancel()
                do {
                    _ = try await task.value
                    XCTFail("\(mode): a cancelled request must not succeed")
                } catch MCPHostError.cancelled {}
                XCTAssertLessThan(Date().timeIntervalSince(started), 10, "\(mode)")
                // The handle still works.
                _ = try await host.request("ping")
            }
        }
    }

    func testHostCallbacks() async throws {
        for mode in Mode.allCases {
            let seen = Recorder()
            var o = MCPHost.Options(requestTimeout: .seconds(20))
            o.sampling = { req in
                seen.add(req.method + " " + req.server)
                return ["role": "assistant", "model": "swift-test",
                        "content": ["type": "text", "text": "sampled"]]
            }
            o.elicitation = { req in
                seen.add(req.method + " " + req.mode)
                return ["action": "accept", "content": ["name": "Swift"]]
            }
            o.roots = { _ in
                throw HostError(code: -32001, message: "no roots for you")
            }
            try await withHost(mode, o) { host in
                let e = try await host.callTool("ts__elicit")
                XCTAssertTrue(text(e).contains(#""name":"Swift""#), "\(mode): \(text(e))")
                let s = try await host.callTool("ts__sample", arguments: ["prompt": "hi"])
                XCTAssertTrue(text(s).contains("sampled"), "\(mode): \(text(s))")
                let r = try await host.callTool("ts__roots")
                XCTAssertEqual(r["isError"], true, "\(mode)")
                XCTAssertTrue(text(r).contains("no roots for you"), "\(mode): \(text(r))")
                // mcphost_notify: the one notification a host sends, and one it may not.
                try host.rootsListChanged()
                XCTAssertThrowsError(try host.notify("notifications/nonsense")) { e in
                    XCTAssertEqual((e as? MCPHostError)?.status, MCPHOST_ERR_INVALID_REQUEST.rawValue, "\(mode): \(e)")
                }
            }
            XCTAssertEqual(seen.all, ["elicitation/create form", "sampling/createMessage ts"], "\(mode)")
        }
    }

    /// Embedded only: the states a server goes through as it starts.
    func testEventsStream() async throws {
        let host = try MCPHost.openEmbedded(config: try testConfig(), options: .init(waitReady: .zero))
        let watchdog = Task {
            try await Task.sleep(for: .seconds(20))
            host.close()
        }
        defer { watchdog.cancel() }
        // One iterator throughout: ending a `for await` ends an AsyncStream.
        var it = host.events.makeAsyncIterator()
        var states: [String] = []
        while let e = await it.next() {
            if e.method == MCPHOST_EVENT_SERVER_STATE, let s = e.params?["state"]?.stringValue {
                states.append(s)
                if s == "ready" { break }
            }
        }
        XCTAssertEqual(states.first, "starting", "\(states)")
        XCTAssertEqual(states.last, "ready", "\(states)")
        // Closing ends the stream: the rest drains and next() gives nil
        // (if it did not, this would hang; scripts/test-swift.sh has a limit).
        host.close()
        let closed = Date()
        while await it.next() != nil {}
        XCTAssertLessThan(Date().timeIntervalSince(closed), 5)
    }

    func testMilliseconds() {
        XCTAssertEqual(milliseconds(.zero), 0)
        XCTAssertEqual(milliseconds(.nanoseconds(1)), 1)
        XCTAssertEqual(milliseconds(.milliseconds(1500)), 1500)
        XCTAssertEqual(milliseconds(.seconds(Int64.max)), UInt64.max)
        XCTAssertEqual(milliseconds(.seconds(-1)), 0)
    }
}

final class JSONTests: XCTestCase {
    func testNumbersKeepTheirText() throws {
        let v = try JSON(parsing: #"{"zeta": 12345678901234567890123, "alpha": 1e400, "m": 0.10, "i": -7}"#)
        XCTAssertEqual(v["zeta"], .number("12345678901234567890123"))
        XCTAssertEqual(v["alpha"]?.doubleValue, .infinity)
        XCTAssertEqual(v["m"], .number("0.10"))
        XCTAssertEqual(v["i"]?.intValue, -7)
        XCTAssertNil(v["zeta"]?.intValue)
        XCTAssertEqual(try v.text(), #"{"alpha":1e400,"i":-7,"m":0.10,"zeta":12345678901234567890123}"#)
    }

    func testStringsAndEscapes() throws {
        let v = try JSON(parsing: #" ["a\"b\\c\n", "\u00e9\ud83d\ude00", "\ud800", "/\/"] "#)
        XCTAssertEqual(v, ["a\"b\\c\n", "\u{e9}\u{1F600}", "\u{FFFD}", "//"])
        XCTAssertEqual(try JSON.string("\u{1}\t\"").text(), #""\u0001\t\"""#)
        XCTAssertEqual(try JSON(parsing: try v.text()), v)
    }

    func testLiteralsAndAccessors() throws {
        let v: JSON = ["a": [1, 2.5, true, nil, "x"]]
        XCTAssertEqual(try v.text(), #"{"a":[1,2.5,true,null,"x"]}"#)
        XCTAssertEqual(v["a"]?[1]?.doubleValue, 2.5)
        XCTAssertEqual(v["a"]?[2]?.boolValue, true)
        XCTAssertNil(v["a"]?[9])
        XCTAssertNil(v["b"])
    }

    func testRefusesWhatIsNotJSON() {
        for bad in ["", "{", "[1,]", "01", "1.", "-", "tru", #"{"a" 1}"#, #""\u12""#, "1 2",
                    "\"\u{1}\"", String(repeating: "[", count: 600) + String(repeating: "]", count: 600)] {
            XCTAssertThrowsError(try JSON(parsing: bad), bad) { e in
                guard case MCPHostError.invalidJSON = e else { return XCTFail("\(bad): \(e)") }
            }
        }
        XCTAssertThrowsError(try JSON.number("nan").text())
        XCTAssertThrowsError(try JSON(floatLiteral: .infinity).text())
    }
}
