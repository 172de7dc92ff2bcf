/// Small text work that the daemon, the signing code and the commands each need, written once.

package enum JSONString {
    /// Appends `text` as a JSON string (RFC 8259 §7): quotes, backslashes and control characters
    /// escaped, each in the shortest form JSON has, so an echoed string is never longer than the
    /// caller wrote it. Replies and DPoP proofs write through it, on the sign path: most strings
    /// (tokens, header names, a UUID, a URL) need no escape and are copied whole.
    package static func append(_ text: String, to bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        var plain = text
        let copied = plain.withUTF8 { utf8 -> Bool in
            guard !utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) else { return false }
            bytes.append(contentsOf: utf8)
            return true
        }
        if copied { return bytes.append(UInt8(ascii: "\"")) }
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [92, 34])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [92, 92])
            case 0x0A: bytes.append(contentsOf: [92, 110])
            case 0x0D: bytes.append(contentsOf: [92, 114])
            case 0x09: bytes.append(contentsOf: [92, 116])
            case 0x08: bytes.append(contentsOf: [92, 98])
            case 0x0C: bytes.append(contentsOf: [92, 102])
            case 0..<0x20:
                bytes.append(contentsOf: [92, 117, 48, 48] + Array(Hex.lowercase(CollectionOfOne(byte)).utf8))
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// `text` as a JSON string literal.
    package static func literal(_ text: String) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count + 2)
        append(text, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
}

package enum Hex {
    /// `bytes` in lowercase hex, two digits a byte (a registration's `sha256` is written so).
    package static func lowercase<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.underestimatedCount * 2)
        for byte in bytes { out += [digits[Int(byte >> 4)], digits[Int(byte & 0xF)]] }
        return String(decoding: out, as: UTF8.self)
    }

    /// `count` hex digits from the system's random source: a name nobody can guess in advance.
    package static func random(digits count: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return String(decoding: (0..<count).map { _ in digits[Int(generator.next() & 15)] }, as: UTF8.self)
    }

    private static let digits = Array("0123456789abcdef".utf8)
}

package extension Substring {
    /// Without leading and trailing spaces and tabs (an HTTP field value's optional whitespace,
    /// RFC 9110 §5.5), and with `newlines` without line ends too (a secret read from a file). On
    /// the UTF-8 bytes: reversing a String's Characters to trim it took half of a signature's time.
    func trimmed(newlines: Bool = false) -> String {
        let blank: (UInt8) -> Bool = { $0 == 0x20 || $0 == 0x09 || (newlines && ($0 == 0x0A || $0 == 0x0D)) }
        guard let first = utf8.firstIndex(where: { !blank($0) }), let last = utf8.lastIndex(where: { !blank($0) }) else { return "" }
        return String(self[first...last])
    }
}

package extension String {
    /// See ``Substring/trimmed(newlines:)``.
    func trimmed(newlines: Bool = false) -> String { self[...].trimmed(newlines: newlines) }
}
