import MSSOProtocol

/// The servers a group's tokens are for: `resources = ["https://git.example.com/", …]` in its
/// table. Each entry is a URL prefix: a request's scheme, host and port must equal the entry's
/// (the port defaults to the scheme's), and its path must start with the entry's path, segment by
/// segment (`https://git.example.com/team` covers `/team` and `/team/…`, not `/teams`).
///
/// Held by the daemon at `sign` (the request's URL) and `token` (the `resource` the caller names;
/// none is refused), so that a tool asked to send the token elsewhere (git with a hostile remote,
/// kubectl with a hostile kubeconfig) gets nothing. Both sides are read by one strict parser, on
/// bytes: absolute http(s), a host of letters, digits, `-`, `_` and `.` (or an IPv6 literal), an
/// optional port, no user info, nothing but printable ASCII and no backslash. Under an entry with
/// a path other than `/`, a path with a dot segment (`..`, `%2e%2e`) or an encoded slash (`%2f`,
/// `%5c`) is refused too: a server could resolve it to somewhere outside the prefix.
public struct Resources: Equatable, Sendable {
    struct Prefix: Equatable, Sendable {
        var https: Bool
        var host: [UInt8] // lowercased
        var port: Int
        var path: [UInt8] // starts with "/"
    }

    let prefixes: [Prefix]
    /// The entries as configured, for sentences.
    public let entries: [String]

    /// At most this many entries.
    public static let maximum = 64

    /// Parses a group's `resources`, or throws a sentence saying which entry is wrong and why.
    public init(_ entries: [String]) throws(Problem) {
        guard !entries.isEmpty else {
            throw Problem("an empty list would refuse every sign and token; name the servers the group's tokens are for, or leave `resources` out")
        }
        guard entries.count <= Self.maximum else { throw Problem("at most \(Self.maximum) entries") }
        var prefixes: [Prefix] = []
        for entry in entries {
            guard let parsed = Self.prefix(entry) else {
                throw Problem("\"\(entry)\" is not a URL prefix such as \"https://git.example.com/\" (absolute http(s), a host, an optional port and path; no user info, query, fragment or wildcard)")
            }
            if !parsed.https, !Loopback.isHost(String(decoding: parsed.host, as: UTF8.self)) {
                throw Problem("\"\(entry)\": plain http is allowed only on loopback (a bearer token would cross the network in the clear); use https")
            }
            if parsed.path.count > 1, !Self.plain(parsed.path[...]) {
                throw Problem("\"\(entry)\": the path holds a dot segment or an encoded slash; write it resolved")
            }
            prefixes.append(parsed)
        }
        self.prefixes = prefixes
        self.entries = entries
    }

    public struct Problem: Error, Equatable {
        public let message: String
        init(_ message: String) { self.message = message }
    }

    /// Whether `url` is within one of the prefixes: the URL's bytes read in place, no copy.
    public func allows(_ url: String) -> Bool {
        if let found = url.utf8.withContiguousStorageIfAvailable({ allows($0) }) { return found }
        return Array(url.utf8).withUnsafeBufferPointer { allows($0) }
    }

    func allows(_ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let parts = Self.parts(b) else { return false }
        let host = b[parts.host], path = b[parts.path]
        return prefixes.contains { prefix in
            guard prefix.https == parts.https, prefix.port == parts.port, prefix.host.count == host.count,
                  zip(prefix.host, host).allSatisfy({ $0 == $1 | (($1 >= 0x41 && $1 <= 0x5A) ? 0x20 : 0) }) else { return false }
            if prefix.path.count == 1 { return true } // the whole origin
            guard path.starts(with: prefix.path) else { return false } // (no path: `/`, within the origin only)
            let rest = path.dropFirst(prefix.path.count)
            guard prefix.path.last == UInt8(ascii: "/") || rest.isEmpty || rest.first == UInt8(ascii: "/") else { return false }
            return Self.plain(path)
        }
    }

    static let root: [UInt8] = [UInt8(ascii: "/")]

    /// Throws `ResourceForbidden` unless `url` is within the prefixes. `verb` says what was asked.
    public func authorize(_ url: String?, group: String, verb: String) throws(BrokerError) {
        guard let url else {
            throw BrokerError(.resourceForbidden, "the access group \"\(group)\" hands out its token only for its resources (\(entries.joined(separator: ", "))), and this \(verb) named none; pass the URL the token is for (`msso token --resource URL`, or `resource` in the call)")
        }
        guard !allows(url) else { return }
        throw BrokerError(.resourceForbidden, "\"\(url.prefix(200))\" is not one of the resources of the access group \"\(group)\" (\(entries.joined(separator: ", "))), so msso gives no \(verb) for it; if that server should get the group's tokens, add it to `resources` in the group's table of config.toml (msso.toml(5))")
    }

    // MARK: The parser

    /// What the prefix test needs of a URL: where its host and path are in its bytes.
    struct Parts {
        var https: Bool
        var host: Range<Int>
        var port: Int
        /// Empty when the URL has no path (it then means `/`).
        var path: Range<Int>
        var hasQueryOrFragment: Bool
    }

    /// A configured entry as a prefix (nothing may follow its path).
    static func prefix(_ entry: String) -> Prefix? {
        Array(entry.utf8).withUnsafeBufferPointer { b in
            guard let parts = parts(b), !parts.hasQueryOrFragment else { return nil }
            return Prefix(https: parts.https, host: b[parts.host].map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, port: parts.port,
                          path: parts.path.isEmpty ? root : Array(b[parts.path]))
        }
    }

    static func parts(_ b: UnsafeBufferPointer<UInt8>) -> Parts? {
        // Printable ASCII only, and no backslash (some clients read it as a slash).
        guard b.count <= 8192, b.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\\") }) else { return nil }
        var i = 0
        while i < b.count, b[i] | 0x20 >= UInt8(ascii: "a"), b[i] | 0x20 <= UInt8(ascii: "z") { i += 1 }
        let https: Bool
        switch i {
        case 4 where b[0] | 0x20 == UInt8(ascii: "h") && b[1] | 0x20 == UInt8(ascii: "t") && b[2] | 0x20 == UInt8(ascii: "t")
                  && b[3] | 0x20 == UInt8(ascii: "p"): https = false
        case 5 where b[0] | 0x20 == UInt8(ascii: "h") && b[1] | 0x20 == UInt8(ascii: "t") && b[2] | 0x20 == UInt8(ascii: "t")
                  && b[3] | 0x20 == UInt8(ascii: "p") && b[4] | 0x20 == UInt8(ascii: "s"): https = true
        default: return nil
        }
        guard i + 3 <= b.count, b[i] == UInt8(ascii: ":"), b[i + 1] == UInt8(ascii: "/"), b[i + 2] == UInt8(ascii: "/") else { return nil }
        i += 3
        let hostStart = i
        if i < b.count, b[i] == UInt8(ascii: "[") {
            i += 1
            while i < b.count, isHex(b[i]) || b[i] == UInt8(ascii: ":") || b[i] == UInt8(ascii: ".") { i += 1 }
            guard i < b.count, b[i] == UInt8(ascii: "]"), i > hostStart + 1 else { return nil }
            i += 1
        } else {
            while i < b.count, isHex(b[i]) || (b[i] | 0x20 >= UInt8(ascii: "a") && b[i] | 0x20 <= UInt8(ascii: "z"))
                    || b[i] == UInt8(ascii: "-") || b[i] == UInt8(ascii: "_") || b[i] == UInt8(ascii: ".") { i += 1 }
        }
        guard i > hostStart else { return nil }
        let host = hostStart..<i
        var port = https ? 443 : 80
        if i < b.count, b[i] == UInt8(ascii: ":") {
            i += 1
            var digits = 0, value = 0
            while i < b.count, b[i] >= UInt8(ascii: "0"), b[i] <= UInt8(ascii: "9"), digits < 6 {
                value = value * 10 + Int(b[i] - UInt8(ascii: "0"))
                digits += 1
                i += 1
            }
            if digits > 0 {
                guard value >= 1, value <= 65535 else { return nil }
                port = value
            }
        }
        // The authority ends here: anything else in it (user info's `@`, a `%`) is refused.
        guard i == b.count || b[i] == UInt8(ascii: "/") || b[i] == UInt8(ascii: "?") || b[i] == UInt8(ascii: "#") else { return nil }
        let pathStart = i
        while i < b.count, b[i] != UInt8(ascii: "?"), b[i] != UInt8(ascii: "#") { i += 1 }
        let path = pathStart..<i
        return Parts(https: https, host: host, port: port, path: path, hasQueryOrFragment: i < b.count)
    }

    static func isHex(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "f"))
    }

    /// No segment is `.` or `..` (also percent-encoded), and no slash or backslash is encoded.
    static func plain<Path: Collection<UInt8>>(_ path: Path) -> Bool where Path.Index == Int {
        var dots = 0, other = false
        var i = path.startIndex
        while i <= path.endIndex {
            if i == path.endIndex || path[i] == UInt8(ascii: "/") {
                if !other && (dots == 1 || dots == 2) { return false }
                dots = 0
                other = false
                i += 1
                continue
            }
            if path[i] == UInt8(ascii: "%") {
                guard i + 2 < path.endIndex else { other = true; i += 1; continue } // a lone %: not a dot
                let high = path[i + 1], low = path[i + 2] | 0x20
                if high == UInt8(ascii: "2") && low == UInt8(ascii: "e") {
                    dots += 1
                } else if (high == UInt8(ascii: "2") && low == UInt8(ascii: "f")) || (high == UInt8(ascii: "5") && low == UInt8(ascii: "c")) {
                    return false
                } else {
                    other = true
                }
                i += 3
                continue
            }
            if path[i] == UInt8(ascii: ".") { dots += 1 } else { other = true }
            i += 1
        }
        return true
    }
}
