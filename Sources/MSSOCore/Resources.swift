import Glibc
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
/// optional port, no user info, nothing but printable ASCII and no backslash.
///
/// Under an entry with a path other than `/`, a path is refused too when a server could resolve
/// one of its segments to somewhere outside the prefix (``escape(_:)``, the one rule): a segment
/// that, percent-decoded until nothing more decodes (`%252e` is `.` to a server that decodes
/// twice; IIS's `%uXXXX` too), holds a slash or backslash (or what lenient servers take for one:
/// overlong UTF-8, full-width forms), or is dots alone (`.`, `..`, `...`; overlong and full-width
/// dots too) up to its first `;` (Java servers such as Tomcat drop a segment's `;params` before
/// resolving: `/team/..;/admin` runs `/admin`), `?` or `#` (which end it for a server that decodes
/// before it parses) or NUL (which ends a C string), white space around them aside (Windows drops
/// trailing spaces). The query and fragment are not looked at: no server resolves them.
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
            if let problem = Self.hostProblem(parsed.host) { throw Problem("\"\(entry)\": \(problem)") }
            if parsed.path.count > 1, let escape = parsed.path.withUnsafeBufferPointer({ Self.escape($0) }) {
                let segment = String(decoding: parsed.path[escape.segment], as: UTF8.self)
                throw Problem("\"\(entry)\": its path's segment \"\(segment)\" \(escape.reason(segment)); write the path resolved, without it")
            }
            prefixes.append(parsed)
        }
        self.prefixes = prefixes
        self.entries = entries
    }

    /// Why an entry's host could never match a request to its server as written, if it could
    /// not: requests are matched by the host's bytes, and a request names an address in its one
    /// usual form (found by an outside test: `[2001:0db8::1]/admin/` beside `[2001:db8::1]/` gave
    /// a request for the first the second's token).
    static func hostProblem(_ host: [UInt8]) -> String? {
        let text = String(decoding: host, as: UTF8.self)
        if host.last == UInt8(ascii: ".") {
            return "write the host without its trailing dot (\(text.dropLast())): a request to it never matches"
        }
        func canonical(_ family: Int32, _ address: String) -> String? {
            var bytes = [UInt8](repeating: 0, count: 16), out = [CChar](repeating: 0, count: 64)
            guard inet_pton(family, address, &bytes) == 1, inet_ntop(family, bytes, &out, socklen_t(out.count)) != nil else { return nil }
            return String(decoding: out.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        if host.first == UInt8(ascii: "[") {
            let inside = String(text.dropFirst().dropLast())
            guard let usual = canonical(AF_INET6, inside) else { return "\(text) is no IPv6 address" }
            return usual == inside ? nil : "write the address as [\(usual)], its usual form, which requests use"
        }
        if host.allSatisfy({ $0 == UInt8(ascii: ".") || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) }) {
            guard let usual = canonical(AF_INET, text) else { return "\(text) is no IPv4 address" }
            return usual == text ? nil : "write the address as \(usual), its usual form, which requests use"
        }
        return nil
    }

    /// Where two entries share a server and each gets a token of its own (`tokens =
    /// "per-resource"`), why one's path could be read as another's, if it could: its paths must be
    /// plain (letters, digits and `-._!$&'()*+,=@`, no empty segment), as the requests that get
    /// either token must be (``unplainSegment(_:)``), or a request could be taken by a server for
    /// one and by msso for the other (found by an outside test: `//admin/`, `%61dmin/`, `admin;x/`
    /// beside `/` gave `/admin/x` the `/` entry's token).
    public func entryProblemWherePathsShareAServer() -> String? {
        let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._!$&'()*+,=@/".utf8)
        for (k, prefix) in prefixes.enumerated()
        where prefixes.indices.contains(where: { $0 != k && prefixes[$0].https == prefix.https && prefixes[$0].host == prefix.host && prefixes[$0].port == prefix.port }) {
            let inner = prefix.path.dropFirst().dropLast(prefix.path.last == UInt8(ascii: "/") && prefix.path.count > 1 ? 1 : 0)
            if !prefix.path.allSatisfy(allowed.contains) || inner.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).contains(where: \.isEmpty) && !inner.isEmpty {
                return "\"\(entries[k])\" shares its server with another entry, and each gets a token of its own (`tokens = \"per-resource\"`), so its path must be plain, as a server reads it: letters, digits and -._!$&'()*+,=@ in each segment, no empty segment, no percent-encoding, `;` or `~`; write the path as the server resolves it"
            }
        }
        return nil
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
        return prefixes.contains { prefix in
            switch Self.reach(of: prefix, b, parts) {
            case .none: false
            case .origin: true
            case .path: Self.escape(UnsafeBufferPointer(rebasing: b[parts.path])) == nil
            }
        }
    }

    /// The entry a URL the gate allowed falls in (the most specific, when several cover it): the
    /// server a per-resource token is minted for.
    public func entry(for url: String) -> String? {
        if prefixes.count == 1 { return entries[0] } // the gate allowed the URL: within the one there is
        if let found = url.utf8.withContiguousStorageIfAvailable({ entry(for: $0) }) { return found }
        return Array(url.utf8).withUnsafeBufferPointer { entry(for: $0) }
    }

    func entry(for b: UnsafeBufferPointer<UInt8>) -> String? {
        guard let parts = Self.parts(b) else { return nil }
        var best: Int?
        for (k, prefix) in prefixes.enumerated() {
            switch Self.reach(of: prefix, b, parts) {
            case .none: continue
            case .origin: break
            // As `allows`: a path that escapes a path prefix is not within it.
            case .path: if Self.escape(UnsafeBufferPointer(rebasing: b[parts.path])) != nil { continue }
            }
            if best == nil || prefix.path.count > prefixes[best!].path.count { best = k }
        }
        return best.map { entries[$0] }
    }

    /// Where `url` names no path at all (`https://h.example`: git's helper without
    /// `credential.useHttpPath`) and more than one entry shares its origin, those entries: the
    /// request could be for any of them. Nil otherwise.
    public func entriesForUnknownPath(_ url: String) -> [String]? {
        guard prefixes.count > 1 else { return nil }
        // Read in place (this runs for every sign of such a group): no copy unless one is needed.
        func sharing(_ b: UnsafeBufferPointer<UInt8>) -> [String]? {
            guard let parts = Self.parts(b), parts.path.isEmpty else { return nil }
            let host = b[parts.host].map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
            let here = prefixes.indices.filter { prefixes[$0].https == parts.https && prefixes[$0].port == parts.port && prefixes[$0].host == host }
            return here.count > 1 ? here.map { entries[$0] } : nil
        }
        if let found = url.utf8.withContiguousStorageIfAvailable(sharing) { return found }
        return Array(url.utf8).withUnsafeBufferPointer(sharing)
    }

    /// The entry `url` falls in once its path is resolved as a lenient server resolves it
    /// (``resolvedPath(_:)``), when that is another than ``entry(for:)`` finds by its bytes: a
    /// request a server would route to another entry's server than the token is minted for.
    /// Nil when they agree, or when one entry alone could cover the URL's origin.
    public func otherEntryOnceResolved(_ url: String) -> String? {
        guard prefixes.count > 1, let raw = entry(for: url) else { return nil }
        return Array(url.utf8).withUnsafeBufferPointer { b -> String? in
            guard let parts = Self.parts(b) else { return nil }
            let host = b[parts.host].map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
            let here = prefixes.indices.filter { prefixes[$0].https == parts.https && prefixes[$0].port == parts.port && prefixes[$0].host == host }
            guard here.count > 1 else { return nil }
            // A strict server reads the path by its bytes: an entry whose path prefix the URL starts
            // with, though one of its segments would escape it, is one it may route to.
            let byBytes = here.filter { Self.reach(of: prefixes[$0], b, parts) != .none }.max { prefixes[$0].path.count < prefixes[$1].path.count }
            if let byBytes, entries[byBytes] != raw { return entries[byBytes] }
            // The most lenient reading: resolved, and compared without case (IIS, some Spring
            // setups), the entry's own path without its last slash within it (`/admin` for
            // `/admin/`: a server may add the slash).
            let path = Self.resolvedPath(UnsafeBufferPointer(rebasing: b[parts.path])).map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
            var read: Int?
            for k in here {
                let prefix = prefixes[k].path.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
                let bare = prefix.count > 1 && prefix.last == UInt8(ascii: "/") ? Array(prefix.dropLast()) : prefix
                let covers = prefix.count == 1 || path == bare || path.starts(with: bare + (bare.last == UInt8(ascii: "/") ? [] : [UInt8(ascii: "/")]))
                if covers, read == nil || prefixes[k].path.count > prefixes[read!].path.count { read = k }
            }
            guard let read, entries[read] != raw else { return nil }
            return entries[read]
        }
    }

    /// Where the URL's origin has more than one entry, the first segment of its path
    /// (``decoded(_:)``) that is not plain: a segment of letters, digits and `-._!$&'()*+,=@` that
    /// is not dots alone, nor an entry's segment with more after it (`admin.json`, `adminx`). Nil when
    /// every one is, or when one entry alone covers the origin. Servers read other segments in
    /// ways past counting (found by outside tests: IIS drops trailing spaces and dots and
    /// `::$INDEX_ALLOCATION` and reads short names, others full-width dots), so where two entries
    /// meet msso hands out neither token for such a path.
    public func unplainSegment(_ url: String) -> String? {
        guard prefixes.count > 1 else { return nil }
        return Array(url.utf8).withUnsafeBufferPointer { b -> String? in
            guard let parts = Self.parts(b) else { return nil }
            let host = b[parts.host].map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
            let here = prefixes.filter { $0.https == parts.https && $0.port == parts.port && $0.host == host }
            guard here.count > 1 else { return nil }
            func lowered(_ bytes: some Sequence<UInt8>) -> [UInt8] { bytes.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 } }
            let entrySegments = here.map { $0.path.split(separator: UInt8(ascii: "/")).map(lowered) }
            var segments: [[UInt8]] = [] // the URL's, lowered, so far
            // No `~`: IIS resolves a short name (`ADMINI~1`) to the long one it stands for.
            let allowed = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._!$&'()*+,=@".utf8)
            for (depth, raw) in b[parts.path].split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).enumerated() {
                let decoded = Self.decoded(Array(raw))
                if decoded.allSatisfy({ $0 == UInt8(ascii: ".") }) || !decoded.allSatisfy(allowed.contains) {
                    return String(decoding: raw.prefix(200), as: UTF8.self)
                }
                // An entry's segment with more after it (`admin.json`, `adminx` beside `/admin/`, the
                // segments before it the entry's): Spring MVC before 5.3 served it from that entry's
                // handler (suffix patterns), nginx's `location /admin` takes both.
                // (One that is another entry's segment is that entry's: `/r10/` beside `/r1/`.)
                let segment = lowered(decoded)
                let along = entrySegments.filter { depth < $0.count && segments.elementsEqual($0.prefix(depth)) }
                if !along.contains(where: { $0[depth] == segment }),
                   along.contains(where: { segment.count > $0[depth].count && segment.starts(with: $0[depth]) }) {
                    return String(decoding: raw.prefix(200), as: UTF8.self)
                }
                segments.append(segment)
            }
            return nil
        }
    }

    /// A segment percent-decoded until nothing more decodes, `%uXXXX` too (as IIS does).
    static func decoded(_ segment: [UInt8]) -> [UInt8] {
        var bytes = segment
        while bytes.contains(UInt8(ascii: "%")) {
            var out: [UInt8] = [], k = 0
            while k < bytes.count {
                if bytes[k] == UInt8(ascii: "%"), k + 2 < bytes.count, isHex(bytes[k + 1]), isHex(bytes[k + 2]) {
                    out.append(hexValue(bytes[k + 1]) << 4 | hexValue(bytes[k + 2]))
                    k += 3
                } else if bytes[k] == UInt8(ascii: "%"), k + 5 < bytes.count, bytes[k + 1] | 0x20 == UInt8(ascii: "u"),
                          bytes[(k + 2)...(k + 5)].allSatisfy(isHex),
                          let scalar = Unicode.Scalar(bytes[(k + 2)...(k + 5)].reduce(UInt32(0)) { $0 << 4 | UInt32(hexValue($1)) }) {
                    out.append(contentsOf: UTF8.encode(scalar)!) // %uXXXX: IIS
                    k += 6
                } else {
                    out.append(bytes[k])
                    k += 1
                }
            }
            if out == bytes { break }
            bytes = out
        }
        return bytes
    }

    /// A path as the most lenient server reads it: each segment percent-decoded until nothing more
    /// decodes (`%uXXXX` too, as IIS does; an encoded slash or backslash then splits it), cut at
    /// its first `;` (Java servers drop a segment's parameters), `?`, `#` (a server that decodes
    /// before it splits off the query) or NUL, trailing dots dropped (IIS), empty segments dropped
    /// (`//`), `.` and `..` resolved.
    static func resolvedPath(_ path: UnsafeBufferPointer<UInt8>) -> [UInt8] {
        var segments: [[UInt8]] = []
        for raw in path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false) {
            let bytes = decoded(Array(raw))
            let slash = UInt8(ascii: "/"), backslash = UInt8(ascii: "\\"), dot = UInt8(ascii: "."), semicolon = UInt8(ascii: ";")
            let pieces: [ArraySlice<UInt8>] = bytes.split(omittingEmptySubsequences: false) { $0 == slash || $0 == backslash }
            for piece in pieces {
                var segment: [UInt8] = Array(piece.prefix { $0 != semicolon && $0 != UInt8(ascii: "?") && $0 != UInt8(ascii: "#") && $0 != 0 })
                if segment != [dot, dot] { while segment.count > 1, segment.last == dot { segment.removeLast() } } // IIS drops trailing dots
                if segment.isEmpty || segment == [dot] { continue }
                if segment == [dot, dot] {
                    _ = segments.popLast()
                } else {
                    segments.append(segment)
                }
            }
        }
        let trailing = path.last == UInt8(ascii: "/")
        return [UInt8(ascii: "/")] + Array(segments.joined(separator: [UInt8(ascii: "/")])) + (trailing && !segments.isEmpty ? [UInt8(ascii: "/")] : [])
    }

    /// How far a prefix covers a URL by its bytes: not at all, as its whole origin, or as a path
    /// prefix (where ``escape(_:)`` must find nothing).
    enum Reach { case none, origin, path }

    static func reach(of prefix: Prefix, _ b: UnsafeBufferPointer<UInt8>, _ parts: Parts) -> Reach {
        // Index loops: `zip` and `starts(with:)` were left generic here, at twice the cost.
        guard prefix.https == parts.https, prefix.port == parts.port, prefix.host.count == parts.host.count else { return .none }
        for k in 0..<prefix.host.count {
            let byte = b[parts.host.lowerBound + k]
            guard prefix.host[k] == byte | ((byte >= 0x41 && byte <= 0x5A) ? 0x20 : 0) else { return .none }
        }
        let count = prefix.path.count
        if count == 1 { return .origin } // nothing outside it to reach
        guard parts.path.count >= count else { return .none } // (no path: `/`, within the origin only)
        for k in 0..<count where prefix.path[k] != b[parts.path.lowerBound + k] { return .none }
        // Segment by segment: `/team` covers `/team` and `/team/…`, not `/teams`.
        let next = parts.path.lowerBound + count
        return prefix.path[count - 1] == UInt8(ascii: "/") || next == parts.path.upperBound || b[next] == UInt8(ascii: "/") ? .path : .none
    }

    /// For the sentence of a refusal: when `url` is under a path prefix by its bytes, the segment
    /// that escapes it, and the URL's origin.
    func escaping(_ url: String) -> (escape: Escape, segment: String, origin: String)? {
        Array(url.utf8).withUnsafeBufferPointer { b in
            guard let parts = Self.parts(b), prefixes.contains(where: { Self.reach(of: $0, b, parts) == .path }),
                  let escape = Self.escape(UnsafeBufferPointer(rebasing: b[parts.path])) else { return nil }
            let start = parts.path.lowerBound
            return (escape, String(decoding: b[(start + escape.segment.lowerBound)..<(start + escape.segment.upperBound)].prefix(80), as: UTF8.self),
                    String(decoding: b[..<start], as: UTF8.self) + "/")
        }
    }

    static let root: [UInt8] = [UInt8(ascii: "/")]

    /// Throws `ResourceForbidden` unless `url` is within the prefixes. `verb` says what was asked.
    public func authorize(_ url: String?, group: String, verb: String) throws(BrokerError) {
        guard let url else {
            throw BrokerError(.resourceForbidden, "the access group \"\(group)\" hands out its token only for its resources (\(entries.joined(separator: ", "))), and this \(verb) named none; pass the URL the token is for (`msso token --resource URL`, or `resource` in the call)")
        }
        guard !allows(url) else { return }
        if let (escape, segment, origin) = escaping(url) {
            throw BrokerError(.resourceForbidden, "\"\(url.prefix(200))\" is under the resources of the access group \"\(group)\" (\(entries.joined(separator: ", "))) only as written: its path's segment \"\(segment)\" \(escape.reason(segment)), and a server that resolves it can take the request outside them, so msso gives no \(verb) for it; send the request to its path resolved, without such a segment, or, if the whole server should get the group's tokens, add its origin (\(origin.prefix(200))) to `resources` in the group's table of config.toml (msso.toml(5))")
        }
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

    /// A segment of a path that a server could resolve to somewhere outside the path it is under.
    struct Escape: Equatable {
        enum Kind { case dot, parent, slash, notUTF8 }
        /// Where the segment is in the path's bytes.
        var segment: Range<Int>
        var kind: Kind

        /// Why `segment` (this one's text) escapes, for a sentence: "… segment "..;" is read as …".
        func reason(_ segment: String) -> String {
            switch kind {
            case _ where segment == "." || segment == "..": "is a dot segment"
            case .dot, .parent: "is read as `\(kind == .dot ? "." : "..")` by servers that drop a segment's `;` parameters, percent-decode more than once or IIS's `%u`, read full-width dots, or drop trailing dots and spaces"
            case .slash: "holds an encoded slash or backslash (`%2f`, `%5c`, or encoded again: `%252f`, or what some servers take for one), which some servers decode"
            case .notUTF8: "decodes to bytes that are not UTF-8, which old decoders read as they please (`%c0%ae` as `.`, `%c0%af` as `/`)"
            }
        }
    }

    /// The first segment of `path` that escapes (the type's comment says when), or nil. Bytes read
    /// in place: only a segment holding a `%` is decoded, into a buffer on the stack.
    static func escape(_ path: UnsafeBufferPointer<UInt8>) -> Escape? {
        var start = 0, encoded = false
        for i in 0...path.count {
            if i < path.count, path[i] != UInt8(ascii: "/") {
                if path[i] == UInt8(ascii: "%") { encoded = true }
                continue
            }
            let segment = UnsafeBufferPointer(rebasing: path[start..<i])
            if let kind = encoded ? decodedKind(segment) : dotKind(segment) { return Escape(segment: start..<i, kind: kind) }
            (start, encoded) = (i + 1, false)
        }
        return nil
    }

    /// Whether a segment's bytes (as written: no `%` in them) are dots alone up to the first `;`,
    /// `?`, `#` or NUL: `.`, or `..` (and `...`, which Windows servers read as `..` once they have
    /// dropped its trailing dots).
    static func dotKind(_ segment: UnsafeBufferPointer<UInt8>) -> Escape.Kind? {
        guard segment.first == UInt8(ascii: ".") else { return nil } // most segments: one look
        var dots = 0
        for byte in segment {
            switch byte {
            case UInt8(ascii: "."): dots += 1
            case UInt8(ascii: ";"), UInt8(ascii: "?"), UInt8(ascii: "#"), 0: return dots == 1 ? .dot : .parent
            default: return nil
            }
        }
        return dots == 1 ? .dot : .parent
    }

    /// What a segment holding a `%` is to a server that decodes it until nothing more decodes,
    /// `%uXXXX` too (IIS). Decoding `%XX` or `%uXXXX` anywhere never undoes another (neither `%`
    /// nor `u` is a hex digit), so every order ends in the same bytes: this one decodes at the
    /// end of what it has written, as soon as an escape is complete there, whether read or just
    /// decoded (`%%32e` is `%2e`, then `.`). Linear time. The bytes decoded are then read as the
    /// most lenient server reads them (``lenientKind(_:)``).
    static func decodedKind(_ segment: UnsafeBufferPointer<UInt8>) -> Escape.Kind? {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: segment.count) { out -> Escape.Kind? in
            var n = 0
            for byte in segment {
                out[n] = byte
                n += 1
                while true {
                    if n >= 3, out[n - 3] == UInt8(ascii: "%"), isHex(out[n - 2]), isHex(out[n - 1]) {
                        out[n - 3] = hexValue(out[n - 2]) << 4 | hexValue(out[n - 1])
                        n -= 2
                    } else if n >= 6, out[n - 6] == UInt8(ascii: "%"), out[n - 5] | 0x20 == UInt8(ascii: "u"), isHex(out[n - 4]), isHex(out[n - 3]),
                              isHex(out[n - 2]), isHex(out[n - 1]) {
                        let value = (0..<4).reduce(UInt32(0)) { $0 << 4 | UInt32(hexValue(out[n - 4 + $1])) }
                        guard let scalar = Unicode.Scalar(value) else { break } // a lone surrogate: left as written
                        n -= 6
                        for unit in UTF8.encode(scalar)! {
                            out[n] = unit
                            n += 1
                        }
                    } else {
                        break
                    }
                    if out[n - 1] == UInt8(ascii: "/") || out[n - 1] == UInt8(ascii: "\\") { return .slash }
                }
            }
            return lenientKind(UnsafeMutableBufferPointer(rebasing: out[..<n]))
        }
    }

    /// What one character of a decoded segment is to the most lenient server.
    enum Lenient: Equatable {
        /// `/`, `\\`, or what some server takes for one: NFKC's full-width and small forms, the
        /// slashes some fold to `/`, and what Windows' best-fit code pages turn into `\\` (¥ and ₩:
        /// the "WorstFit" class).
        case slash
        /// `.`, or what NFKC reads as dots (full-width, small, ideographic, leaders): how many.
        case dots(Int)
        /// White space, a control character or an invisible one, which servers trim (Java's
        /// `trim()` takes everything up to U+0020; .NET and Python Unicode white space).
        case space
        /// `;`, `?`, `#` or NUL: where a server that drops parameters, or decodes before it parses,
        /// or reads a C string, ends the segment.
        case end
        case other
    }

    static func lenient(_ scalar: UInt32) -> Lenient {
        switch scalar {
        case 0x2F, 0x5C, 0x2215, 0x2216, 0x2044, 0xFF0F, 0xFF3C, 0xFE68, 0x29F5, 0x29F8, 0x29F9, 0x2571, 0x2572, 0x27CB, 0x27CD, 0x0338,
             0x1735, 0x00A5, 0x20A9, 0xFFE5, 0xFFE6: .slash
        case 0x2E, 0xFF0E, 0xFE52, 0x2024, 0xFF61, 0x3002: .dots(1)
        case 0x2025: .dots(2)
        case 0x2026: .dots(3)
        case 0x3B, 0x3F, 0x23, 0x00: .end
        case 0x01...0x20, 0x7F...0xA0, 0x2000...0x200F, 0x2028...0x202F, 0x205F...0x2064, 0x1680, 0x180E, 0x3000, 0xFEFF: .space
        default: .other
        }
    }

    /// What decoded bytes of one segment are to the most lenient server: bytes that are not UTF-8
    /// escape (overlong forms, which old Java, Tomcat and IIS decoders read as `.`, `/`, NUL or a
    /// space, even with a continuation byte's high bits wrong: `%c0%ae`, `%c0%2e`, `%c1%1c`); a
    /// slash anywhere in them escapes; so do dots alone, once cut at the segment's first end and
    /// stripped of the white space around them (Windows drops trailing spaces and dots: `..%20`,
    /// `..%2e`, `...`). Found by outside tests, each of these reached outside a path prefix.
    static func lenientKind(_ bytes: UnsafeMutableBufferPointer<UInt8>) -> Escape.Kind? {
        if bytes.contains(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "\\") }) { return .slash } // (as the one-pass decoder says first)
        guard let text = String(validating: UnsafeBufferPointer(bytes), as: UTF8.self) else { return .notUTF8 }
        var dots = 0, other = false, ended = false, spaceAfterDots = false
        for scalar in text.unicodeScalars {
            let kind = lenient(scalar.value)
            if kind == .slash { return .slash }
            guard !ended else { continue } // (past the end only a slash still counts: a server may decode it first)
            switch kind {
            case .end: ended = true
            case .space: if dots > 0 { spaceAfterDots = true }
            case .dots(let count):
                if spaceAfterDots { other = true }
                dots += count
            case .other, .slash: other = true
            }
        }
        guard !other, dots > 0 else { return nil }
        return dots == 1 ? .dot : .parent
    }

    static func hexValue(_ byte: UInt8) -> UInt8 {
        byte <= UInt8(ascii: "9") ? byte - UInt8(ascii: "0") : (byte | 0x20) - UInt8(ascii: "a") + 10
    }
}
