/// A JSON value, `Sendable` so it can cross tasks and threads.
///
/// Numbers keep their text (`12345678901234567890123` and `1e400` stay as
/// written; `intValue` / `doubleValue` read them). Objects are
/// dictionaries, so key order is not kept: where bytes matter (relaying a
/// result unchanged), use the `json:` string forms of `MCPHost.request`.
public enum JSON: Sendable, Hashable {
    case null
    case bool(Bool)
    /// A number as its JSON text.
    case number(String)
    case string(String)
    case array([JSON])
    case object([String: JSON])
}

extension JSON {
    /// Parses JSON text; throws `MCPHostError.invalidJSON`.
    public init(parsing text: String) throws {
        var p = Parser(Array(text.utf8))
        p.skipSpace()
        let v = try p.value(depth: 0)
        p.skipSpace()
        guard p.i == p.b.count else { throw p.fail("text after the value") }
        self = v
    }

    /// The value as compact JSON text (object keys sorted); throws
    /// `MCPHostError.invalidJSON` for a number that is not JSON (NaN).
    public func text() throws -> String {
        var out = ""
        try write(into: &out)
        return out
    }

    private func write(into out: inout String) throws {
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .number(let n):
            guard Parser.isNumber(Array(n.utf8)) else {
                throw MCPHostError.invalidJSON("\(n) is not a JSON number")
            }
            out += n
        case .string(let s): JSON.quote(s, into: &out)
        case .array(let a):
            out += "["
            for (i, v) in a.enumerated() {
                if i > 0 { out += "," }
                try v.write(into: &out)
            }
            out += "]"
        case .object(let o):
            out += "{"
            for (i, k) in o.keys.sorted().enumerated() {
                if i > 0 { out += "," }
                JSON.quote(k, into: &out)
                out += ":"
                try o[k]!.write(into: &out)
            }
            out += "}"
        }
    }

    private static func quote(_ s: String, into out: inout String) {
        out += "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where u.value < 0x20:
                let h = String(u.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - h.count) + h
            default: out.unicodeScalars.append(u)
            }
        }
        out += "\""
    }

    public subscript(key: String) -> JSON? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    public subscript(index: Int) -> JSON? {
        if case .array(let a) = self, a.indices.contains(index) { return a[index] }
        return nil
    }

    public var stringValue: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    public var boolValue: Bool? {
        if case .bool(let b) = self { return b }
        return nil
    }

    /// The number as an Int64 when it is one exactly (`3`, `3.0`, `3e0`).
    public var intValue: Int64? {
        guard case .number(let n) = self else { return nil }
        if let i = Int64(n) { return i }
        return Double(n).flatMap { Int64(exactly: $0) }
    }

    /// The number as the nearest Double (`1e400` gives infinity).
    public var doubleValue: Double? {
        guard case .number(let n) = self else { return nil }
        return Double(n)
    }

    public var arrayValue: [JSON]? {
        if case .array(let a) = self { return a }
        return nil
    }

    public var objectValue: [String: JSON]? {
        if case .object(let o) = self { return o }
        return nil
    }
}

extension JSON: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral, ExpressibleByStringLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral
{
    public init(nilLiteral: ()) { self = .null }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(integerLiteral value: Int64) { self = .number(String(value)) }
    public init(floatLiteral value: Double) { self = .number(String(value)) }
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSON...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSON)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

/// RFC 8259 over UTF-8 bytes; nesting deeper than 512 is refused.
private struct Parser {
    let b: [UInt8]
    var i = 0

    init(_ b: [UInt8]) { self.b = b }

    func fail(_ what: String) -> MCPHostError {
        .invalidJSON("not JSON: \(what) at byte \(i)")
    }

    mutating func skipSpace() {
        while i < b.count, b[i] == 0x20 || b[i] == 0x0A || b[i] == 0x0D || b[i] == 0x09 { i += 1 }
    }

    mutating func literal(_ word: String, _ v: JSON) throws -> JSON {
        let w = Array(word.utf8)
        guard b.count - i >= w.count, Array(b[i..<i + w.count]) == w else {
            throw fail("unknown word")
        }
        i += w.count
        return v
    }

    mutating func value(depth: Int) throws -> JSON {
        guard depth < 512 else { throw fail("nesting too deep") }
        guard i < b.count else { throw fail("end of text") }
        switch b[i] {
        case UInt8(ascii: "n"): return try literal("null", .null)
        case UInt8(ascii: "t"): return try literal("true", .bool(true))
        case UInt8(ascii: "f"): return try literal("false", .bool(false))
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "["):
            i += 1
            var a: [JSON] = []
            skipSpace()
            if i < b.count, b[i] == UInt8(ascii: "]") {
                i += 1
                return .array(a)
            }
            while true {
                skipSpace()
                a.append(try value(depth: depth + 1))
                skipSpace()
                guard i < b.count else { throw fail("unclosed array") }
                if b[i] == UInt8(ascii: "]") {
                    i += 1
                    return .array(a)
                }
                guard b[i] == UInt8(ascii: ",") else { throw fail("expected , or ]") }
                i += 1
            }
        case UInt8(ascii: "{"):
            i += 1
            var o: [String: JSON] = [:]
            skipSpace()
            if i < b.count, b[i] == UInt8(ascii: "}") {
                i += 1
                return .object(o)
            }
            while true {
                skipSpace()
                guard i < b.count, b[i] == UInt8(ascii: "\"") else { throw fail("expected a key") }
                let k = try string()
                skipSpace()
                guard i < b.count, b[i] == UInt8(ascii: ":") else { throw fail("expected :") }
                i += 1
                skipSpace()
                o[k] = try value(depth: depth + 1)
                skipSpace()
                guard i < b.count else { throw fail("unclosed object") }
                if b[i] == UInt8(ascii: "}") {
                    i += 1
                    return .object(o)
                }
                guard b[i] == UInt8(ascii: ",") else { throw fail("expected , or }") }
                i += 1
            }
        default:
            let start = i
            while i < b.count, Parser.numberByte(b[i]) { i += 1 }
            let n = Array(b[start..<i])
            guard Parser.isNumber(n) else {
                i = start
                throw fail("unexpected character")
            }
            return .number(String(decoding: n, as: UTF8.self))
        }
    }

    static func numberByte(_ c: UInt8) -> Bool {
        (c >= 0x30 && c <= 0x39) || c == UInt8(ascii: "-") || c == UInt8(ascii: "+")
            || c == UInt8(ascii: ".") || c == UInt8(ascii: "e") || c == UInt8(ascii: "E")
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    static func isNumber(_ n: [UInt8]) -> Bool {
        var j = 0
        func digits() -> Int {
            let s = j
            while j < n.count, n[j] >= 0x30, n[j] <= 0x39 { j += 1 }
            return j - s
        }
        if j < n.count, n[j] == UInt8(ascii: "-") { j += 1 }
        guard j < n.count else { return false }
        if n[j] == 0x30 {
            j += 1
        } else if digits() == 0 {
            return false
        }
        if j < n.count, n[j] == UInt8(ascii: ".") {
            j += 1
            if digits() == 0 { return false }
        }
        if j < n.count, n[j] == UInt8(ascii: "e") || n[j] == UInt8(ascii: "E") {
            j += 1
            if j < n.count, n[j] == UInt8(ascii: "+") || n[j] == UInt8(ascii: "-") { j += 1 }
            if digits() == 0 { return false }
        }
        return j == n.count
    }

    mutating func hex4() throws -> UInt32 {
        guard b.count - i >= 4 else { throw fail("short \\u escape") }
        var v: UInt32 = 0
        for _ in 0..<4 {
            let c = b[i]
            let d: UInt8
            switch c {
            case 0x30...0x39: d = c - 0x30
            case 0x41...0x46: d = c - 0x41 + 10
            case 0x61...0x66: d = c - 0x61 + 10
            default: throw fail("bad \\u escape")
            }
            v = v << 4 | UInt32(d)
            i += 1
        }
        return v
    }

    mutating func string() throws -> String {
        i += 1  // the opening quote
        var bytes: [UInt8] = []
        while true {
            guard i < b.count else { throw fail("unclosed string") }
            let c = b[i]
            i += 1
            switch c {
            case UInt8(ascii: "\""):
                return String(decoding: bytes, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard i < b.count else { throw fail("unclosed string") }
                let e = b[i]
                i += 1
                var scalar: UInt32
                switch e {
                case UInt8(ascii: "\""): scalar = 0x22
                case UInt8(ascii: "\\"): scalar = 0x5C
                case UInt8(ascii: "/"): scalar = 0x2F
                case UInt8(ascii: "b"): scalar = 0x08
                case UInt8(ascii: "f"): scalar = 0x0C
                case UInt8(ascii: "n"): scalar = 0x0A
                case UInt8(ascii: "r"): scalar = 0x0D
                case UInt8(ascii: "t"): scalar = 0x09
                case UInt8(ascii: "u"):
                    scalar = try hex4()
                    if scalar >= 0xD800, scalar < 0xDC00, b.count - i >= 6,
                        b[i] == UInt8(ascii: "\\"), b[i + 1] == UInt8(ascii: "u")
                    {
                        let save = i
                        i += 2
                        let low = try hex4()
                        if low >= 0xDC00, low < 0xE000 {
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else {
                            i = save
                        }
                    }
                default: throw fail("bad escape")
                }
                // A lone surrogate becomes U+FFFD, as String(decoding:) does.
                let u = Unicode.Scalar(scalar) ?? "\u{FFFD}"
                bytes.append(contentsOf: Array(String(u).utf8))
            default:
                guard c >= 0x20 else { throw fail("control character in a string") }
                bytes.append(c)
            }
        }
    }
}
