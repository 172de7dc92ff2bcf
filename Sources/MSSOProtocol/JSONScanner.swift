/// The byte scanner both quick readers stand on: ``QuickCall`` (the daemon's, for the hot calls)
/// and ``JSONValue/parse(_:)`` (the commands', for replies). Each keeps only what its messages
/// need (which keys, in which shapes); the bytes are read here, once, to one rule.
///
/// It reads a strict subset of JSON: strings of printable ASCII with the short escapes (`\"`, `\\`,
/// `\/`, `\b`, `\f`, `\n`, `\r`, `\t`); numbers as RFC 8259 writes them; `true`, `false`, `null`.
/// Anything else (a `\u` escape, a byte that is not printable ASCII inside a string, a number
/// JSON does not allow) makes a method return nil or false, and the reader gives the frame to
/// `JSONDecoder`: what a frame means never depends on which reader read it (tests check the two
/// agree on mutated frames).
struct JSONScanner {
    let bytes: UnsafeRawBufferPointer
    /// The next byte to read.
    var at = 0

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    /// The next byte, not taken (nil at the end).
    var next: UInt8? { at < bytes.count ? bytes[at] : nil }

    mutating func space() {
        while at < bytes.count, bytes[at] == 0x20 || bytes[at] == 0x0A || bytes[at] == 0x0D || bytes[at] == 0x09 { at += 1 }
    }

    /// Takes `byte` after white space, or takes nothing but the space.
    mutating func take(_ byte: UInt8) -> Bool {
        space()
        guard at < bytes.count, bytes[at] == byte else { return false }
        at += 1
        return true
    }

    /// Whether nothing but white space is left.
    mutating func atEnd() -> Bool {
        space()
        return at == bytes.count
    }

    /// `text` (`true`, `false`, `null`) spelled out here.
    mutating func word(_ text: StaticString) -> Bool {
        let count = text.utf8CodeUnitCount
        guard at + count <= bytes.count else { return false }
        for index in 0..<count where bytes[at + index] != text.utf8Start[index] { return false }
        at += count
        return true
    }

    /// A string, after white space. A plain one (no escape: nearly all) is made straight from its
    /// bytes.
    mutating func string() -> String? {
        guard take(UInt8(ascii: "\"")) else { return nil }
        let start = at
        while at < bytes.count {
            let byte = bytes[at]
            if byte == UInt8(ascii: "\"") {
                at += 1
                return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<(at - 1)]), as: UTF8.self)
            }
            if byte == UInt8(ascii: "\\") { return escapedString(from: start) }
            guard byte >= 0x20, byte < 0x7F else { return nil }
            at += 1
        }
        return nil
    }

    /// The rest of a string that has an escape at `at`, its bytes from `start` on copied as they
    /// are read.
    private mutating func escapedString(from start: Int) -> String? {
        var out = Array(UnsafeRawBufferPointer(rebasing: bytes[start..<at]))
        while at < bytes.count {
            let byte = bytes[at]
            at += 1
            switch byte {
            case UInt8(ascii: "\""): return String(decoding: out, as: UTF8.self)
            case UInt8(ascii: "\\"):
                guard at < bytes.count else { return nil }
                let escaped = bytes[at]
                at += 1
                switch escaped {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(escaped)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                default: return nil // `\u`, which JSONDecoder reads
                }
            case 0x20..<0x7F: out.append(byte)
            default: return nil
            }
        }
        return nil
    }

    /// A number as JSON writes it (`-`? digits without a leading zero, fraction?, exponent?),
    /// finite as a Double. No white space is skipped first.
    mutating func number() -> Double? {
        let start = at
        if next == UInt8(ascii: "-") { at += 1 }
        guard let first = next, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { return nil }
        digits()
        if first == UInt8(ascii: "0"), at - start > (bytes[start] == UInt8(ascii: "-") ? 2 : 1) { return nil }
        if next == UInt8(ascii: ".") {
            at += 1
            guard digits() > 0 else { return nil }
        }
        if next == UInt8(ascii: "e") || next == UInt8(ascii: "E") {
            at += 1
            if next == UInt8(ascii: "+") || next == UInt8(ascii: "-") { at += 1 }
            guard digits() > 0 else { return nil }
        }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<at]), as: UTF8.self)
        guard let value = Double(text), value.isFinite else { return nil }
        return value
    }

    @discardableResult
    private mutating func digits() -> Int {
        let start = at
        while let byte = next, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { at += 1 }
        return at - start
    }

    /// A call's serial, after white space: 1 to 4294967295 in plain digits, no leading zero.
    /// Whatever follows the digits (a fraction, an exponent) is left for the caller to refuse.
    mutating func serial() -> UInt32? {
        space()
        var value: UInt64 = 0
        let start = at
        while at < bytes.count, bytes[at] >= UInt8(ascii: "0"), bytes[at] <= UInt8(ascii: "9") {
            value = value * 10 + UInt64(bytes[at] - UInt8(ascii: "0"))
            at += 1
            guard at - start <= 10 else { return nil }
        }
        guard at > start, bytes[start] != UInt8(ascii: "0"), value <= UInt64(UInt32.max) else { return nil }
        return UInt32(value)
    }

    /// Steps over a value made of strings, arrays and objects, to where it ends: brackets are
    /// counted and strings read, nothing else (a number or a literal gives up), and the grammar is
    /// not checked. A reader that skips a part reads it again, strictly, once it knows what the
    /// part must be.
    mutating func skipValue() -> Bool {
        var depth = 0
        repeat {
            space()
            guard at < bytes.count else { return false }
            switch bytes[at] {
            case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1; at += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"): depth -= 1; at += 1
            case UInt8(ascii: ","), UInt8(ascii: ":"): at += 1
            case UInt8(ascii: "\""): guard string() != nil else { return false }
            default: return false
            }
        } while depth > 0
        return true
    }
}
