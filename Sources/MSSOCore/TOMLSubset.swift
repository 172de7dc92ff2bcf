/// The part of TOML msso's config uses: `[a."b"]` tables (keys before the first table make one
/// whose path is empty), `key = value` with strings
/// (basic and literal), booleans, integers and arrays of strings (across lines too), comments.
///
/// Hand-written rather than a TOML package so every error can name the line and key, and so a
/// construct msso does not read is refused instead of silently ignored.
enum TOMLSubset {
    struct Value {
        enum Kind: Equatable {
            case string(String)
            case strings([String])
            case integer(Int)
            case boolean(Bool)
        }
        var kind: Kind
        var line: Int
    }

    struct Table {
        var path: [String]
        var line: Int
        var values: [String: Value] = [:]
    }

    static func parse(_ text: String, file: String) throws -> [Table] {
        var tables: [Table] = []
        var defined = Set<[String]>() // linear in the number of tables, however many there are
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)[...]
        var number = 0
        func fail(_ problem: String, key: String? = nil) -> ConfigError {
            ConfigError(file: file, line: number, key: key, problem: problem)
        }
        while let raw = lines.popFirst() {
            number += 1
            var scanner = Scanner(Array(raw))
            scanner.skipBlanks()
            if scanner.atEndOfContent { continue }
            if scanner.peek == "[" {
                scanner.advance()
                var path: [String] = []
                repeat {
                    scanner.skipBlanks()
                    guard let part = try scanner.key(fail) else { throw fail("expected a table name") }
                    path.append(part)
                    scanner.skipBlanks()
                } while scanner.consume(".")
                guard scanner.consume("]") else { throw fail("expected ] to close the table name") }
                scanner.skipBlanks()
                guard scanner.atEndOfContent else { throw fail("unexpected text after the table name") }
                guard defined.insert(path).inserted else {
                    throw fail("table [\(path.joined(separator: "."))] is defined twice")
                }
                tables.append(Table(path: path, line: number))
                continue
            }
            guard let key = try scanner.key(fail) else { throw fail("expected `key = value`") }
            scanner.skipBlanks()
            guard scanner.consume("=") else { throw fail("expected = after the key", key: key) }
            scanner.skipBlanks()
            let startLine = number
            var value: Value.Kind
            if scanner.peek == "[" {
                // Arrays may run over several lines: gather until the closing bracket.
                scanner.advance()
                var items: [String] = []
                while true {
                    scanner.skipBlanks()
                    if scanner.atEndOfContent {
                        guard let next = lines.popFirst() else { throw fail("array is not closed", key: key) }
                        number += 1
                        scanner = Scanner(Array(next))
                        continue
                    }
                    if scanner.consume("]") { break }
                    guard let item = try scanner.string(fail, key) else {
                        throw fail("arrays may hold only quoted strings", key: key)
                    }
                    items.append(item)
                    scanner.skipBlanks()
                    if scanner.consume(",") { continue }
                    scanner.skipBlanks()
                    if scanner.atEndOfContent { continue }
                    guard scanner.consume("]") else { throw fail("expected , or ] in the array", key: key) }
                    break
                }
                value = .strings(items)
            } else if let s = try scanner.string(fail, key) {
                value = .string(s)
            } else {
                let word = scanner.word()
                if word == "true" || word == "false" {
                    value = .boolean(word == "true")
                } else if let n = Int(String(word.filter { $0 != "_" })) {
                    value = .integer(n)
                } else {
                    // Never echo the value: it may be a secret written without quotes.
                    throw fail(word.isEmpty ? "missing value" : "unsupported value; strings must be quoted", key: key)
                }
            }
            scanner.skipBlanks()
            guard scanner.atEndOfContent else { throw fail("unexpected text after the value", key: key) }
            if tables.isEmpty { tables.append(Table(path: [], line: startLine)) } // keys before any table: the file's own
            guard tables[tables.count - 1].values[key] == nil else { throw fail("key is defined twice", key: key) }
            tables[tables.count - 1].values[key] = Value(kind: value, line: startLine)
        }
        return tables
    }

    /// A cursor over one line.
    struct Scanner {
        let chars: [Character]
        var index = 0
        init(_ chars: [Character]) { self.chars = chars }

        var peek: Character? { index < chars.count ? chars[index] : nil }
        /// True at the end of the line or at a comment.
        var atEndOfContent: Bool { peek == nil || peek == "#" || peek == "\r" }
        mutating func advance() { index += 1 }
        mutating func skipBlanks() { while peek == " " || peek == "\t" { advance() } }
        mutating func consume(_ c: Character) -> Bool {
            guard peek == c else { return false }
            advance()
            return true
        }

        mutating func word() -> String {
            var out = ""
            while let c = peek, !" \t#,]\r".contains(c) { out.append(c); advance() }
            return out
        }

        /// A bare key (`a-z0-9_-`) or a quoted one.
        mutating func key(_ fail: (String, String?) -> ConfigError) throws -> String? {
            if let quoted = try string({ problem, _ in fail(problem, nil) }, nil) { return quoted }
            var out = ""
            while let c = peek, c.isASCII, c.isLetter || c.isNumber || c == "_" || c == "-" { out.append(c); advance() }
            return out.isEmpty ? nil : out
        }

        /// A basic ("…", with escapes) or literal ('…') string, or nil if none starts here.
        mutating func string(_ fail: (String, String?) -> ConfigError, _ key: String?) throws -> String? {
            guard let quote = peek, quote == "\"" || quote == "'" else { return nil }
            advance()
            var out = ""
            while true {
                guard let c = peek else { throw fail("string is not closed on this line", key) }
                advance()
                if c == quote {
                    // The keyring, PAM and every C program on the way would end the text at a NUL:
                    // a group "adm\u{0}" would be the administrator's "adm" there, and another here.
                    guard !out.unicodeScalars.contains("\u{0}") else { throw fail("a NUL character (\\u0000) is not allowed", key) }
                    return out
                }
                if c == "\\" && quote == "\"" {
                    guard let e = peek else { throw fail("string is not closed on this line", key) }
                    advance()
                    switch e {
                    case "\"": out.append("\"")
                    case "\\": out.append("\\")
                    case "n": out.append("\n")
                    case "t": out.append("\t")
                    case "u":
                        let hex = String(chars[index..<min(index + 4, chars.count)])
                        guard hex.count == 4, let v = UInt32(hex, radix: 16), let scalar = Unicode.Scalar(v) else {
                            throw fail("bad \\u escape", key)
                        }
                        out.unicodeScalars.append(scalar)
                        index += 4
                    default: throw fail("unknown escape \\\(e)", key)
                    }
                } else {
                    out.append(c)
                }
            }
        }
    }
}
