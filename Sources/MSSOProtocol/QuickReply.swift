/// The commands' side of the hot calls (`hello`, `check`, `sign`, `token`), written and read by
/// hand. A command is a fresh process each time, and the first use of Codable in a process costs
/// more than the whole exchange with the broker (the runtime instantiates the generic coders' and
/// containers' metadata and scans conformances: about 40 % of `msso check`'s CPU). Anything these
/// readers do not recognise goes to `JSONDecoder`, so a reply means the same whichever reads it
/// (tests check the two agree).
package protocol QuickCodable {
    /// The call's arguments as JSON object members, or nil to let `JSONEncoder` write them.
    static func quickArguments(_ arguments: Self) -> [(String, QuickValue)]?
}

/// A method as the package's own commands call it: its call written, and its result read, by hand
/// where it has a quick form (chosen statically, through this conformance: a dynamic cast would
/// cost a fresh process a scan of every conformance). Package-only, as the quick reader and
/// writer are: an app sees ``BrokerMethod`` and the Codable types.
package protocol QuickMethod: BrokerMethod {
    /// The call frame written by hand (see ``QuickCodable``), or nil for `JSONEncoder`.
    static func quickCall(serial: UInt32, _ arguments: Arguments) -> [UInt8]?
    /// The result read from plain JSON by hand (see ``QuickDecodable``), or nil for `JSONDecoder`.
    static func quickResult(_ value: JSONValue) -> Result?
}

extension QuickMethod {
    package static func quickCall(serial: UInt32, _ arguments: Arguments) -> [UInt8]? { nil }
    package static func quickResult(_ value: JSONValue) -> Result? { nil }
}

extension QuickMethod where Arguments: QuickCodable {
    package static func quickCall(serial: UInt32, _ arguments: Arguments) -> [UInt8]? {
        Arguments.quickArguments(arguments).map { ReplyWriter.call(serial: serial, method: name, arguments: $0) }
    }
}

extension QuickMethod where Result: QuickDecodable {
    package static func quickResult(_ value: JSONValue) -> Result? { Result(quick: value) }
}

extension Methods.Hello: QuickMethod {}
extension Methods.Ping: QuickMethod {}
extension Methods.Subscribe: QuickMethod {}
extension Methods.Audit: QuickMethod {}
extension Methods.Diagnose: QuickMethod {}
extension Methods.Login: QuickMethod {}
extension Methods.Extend: QuickMethod {}
extension Methods.Logout: QuickMethod {}
extension Methods.Status: QuickMethod {}
extension Methods.Check: QuickMethod {}
extension Methods.Forward: QuickMethod {}
extension Methods.Sign: QuickMethod {}
extension Methods.Token: QuickMethod {}
extension Methods.Keys: QuickMethod {}
extension Methods.Apps: QuickMethod {}
extension Methods.Lock: QuickMethod {}
extension Methods.Unlock: QuickMethod {}

/// A value the quick writer can write.
package enum QuickValue {
    case string(String)
    case number(Int)
    case bool(Bool)
    case pairs([Header])
}

/// A JSON value, read by ``JSONValue/parse(_:)`` for small replies: the subset of JSON that
/// ``JSONScanner`` reads, nested at most 32 deep, no key twice.
package enum JSONValue: Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    package subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    package var string: String? { if case .string(let value) = self { return value }; return nil }
    package var number: Double? { if case .number(let value) = self { return value }; return nil }

    /// The value, or nil when the bytes are not one JSON value that ``JSONScanner`` reads (or nest
    /// deeper than 32, or repeat a key: then `JSONDecoder` decides).
    package static func parse(_ bytes: UnsafeRawBufferPointer) -> JSONValue? {
        var scanner = JSONScanner(bytes)
        guard let value = scanner.value(depth: 0), scanner.atEnd() else { return nil }
        return value
    }
}

private extension JSONScanner {
    mutating func value(depth: Int) -> JSONValue? {
        guard depth < 32 else { return nil }
        space()
        switch next {
        case UInt8(ascii: "{"):
            at += 1
            var members: [String: JSONValue] = [:]
            if take(UInt8(ascii: "}")) { return .object(members) }
            repeat {
                guard let key = string(), take(UInt8(ascii: ":")), members[key] == nil,
                      let member = value(depth: depth + 1) else { return nil }
                members[key] = member
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "}")) ? .object(members) : nil
        case UInt8(ascii: "["):
            at += 1
            var elements: [JSONValue] = []
            if take(UInt8(ascii: "]")) { return .array(elements) }
            repeat {
                guard let element = value(depth: depth + 1) else { return nil }
                elements.append(element)
            } while take(UInt8(ascii: ","))
            return take(UInt8(ascii: "]")) ? .array(elements) : nil
        case UInt8(ascii: "\""): return string().map(JSONValue.string)
        case UInt8(ascii: "t"): return word("true") ? .bool(true) : nil
        case UInt8(ascii: "f"): return word("false") ? .bool(false) : nil
        case UInt8(ascii: "n"): return word("null") ? .null : nil
        case nil: return nil
        default: return number().map(JSONValue.number)
        }
    }
}

extension ReplyWriter {
    /// `{"type":"call","serial":N,"method":M,"args":{…}}`, framed.
    package static func call(serial: UInt32, method: String, arguments: [(String, QuickValue)]) -> [UInt8] {
        var writer = ReplyWriter(capacity: 128)
        writer.raw("{\"type\":\"call\",\"serial\":")
        writer.number(serial)
        writer.raw(",\"method\":")
        writer.string(method)
        writer.raw(",\"args\":{")
        for (index, (key, value)) in arguments.enumerated() {
            if index > 0 { writer.raw(",") }
            writer.string(key)
            writer.raw(":")
            switch value {
            case .string(let text): writer.string(text)
            case .number(let number): writer.number(number)
            case .bool(let flag): flag ? writer.raw("true") : writer.raw("false")
            case .pairs(let headers): writer.headers(headers)
            }
        }
        writer.raw("}}")
        return writer.frame(serial: serial)
    }
}

// MARK: The hot calls' arguments

extension Methods.Hello.Arguments: QuickCodable {
    package static func quickArguments(_ arguments: Self) -> [(String, QuickValue)]? {
        [("version", .number(arguments.version))] + (arguments.client.map { [("client", .string($0))] } ?? [])
    }
}

extension GroupArguments: QuickCodable {
    package static func quickArguments(_ arguments: Self) -> [(String, QuickValue)]? {
        (arguments.group.map { [("group", .string($0))] } ?? []) + (arguments.account.map { [("account", .string($0))] } ?? [])
    }
}

extension Methods.Token.Arguments: QuickCodable {
    package static func quickArguments(_ arguments: Self) -> [(String, QuickValue)]? {
        var members: [(String, QuickValue)] = []
        if let group = arguments.group { members.append(("group", .string(group))) }
        if let account = arguments.account { members.append(("account", .string(account))) }
        if let renew = arguments.renew { members.append(("renew", .bool(renew))) }
        if let resource = arguments.resource { members.append(("resource", .string(resource))) }
        return members
    }
}

extension SignRequest: QuickCodable {
    package static func quickArguments(_ arguments: Self) -> [(String, QuickValue)]? {
        var members: [(String, QuickValue)] = [("method", .string(arguments.method)), ("url", .string(arguments.url))]
        if let group = arguments.group { members.append(("group", .string(group))) }
        if let account = arguments.account { members.append(("account", .string(account))) }
        if let headers = arguments.headers { members.append(("headers", .pairs(headers))) }
        if let body = arguments.bodySHA256 { members.append(("bodySHA256", .string(body))) }
        if let nonce = arguments.dpopNonce { members.append(("dpopNonce", .string(nonce))) }
        return members
    }
}

// MARK: The hot calls' results

/// A result the commands read without `JSONDecoder` when its JSON is plain.
package protocol QuickDecodable {
    init?(quick value: JSONValue)
}

extension Methods.Hello.Result: QuickDecodable {
    package init?(quick value: JSONValue) {
        guard value.hasOnly(["version", "daemon", "peer"]), value["peer"]?.hasOnly(["uid", "pid", "executable"]) == true,
              let version = value["version"]?.number, let exact = Int(exactly: version), let daemon = value["daemon"]?.string,
              let peer = value["peer"], let uid = peer["uid"]?.number.flatMap({ UInt32(exactly: $0) }),
              let pid = peer["pid"]?.number.flatMap({ Int32(exactly: $0) }) else { return nil }
        let executable = peer["executable"]
        guard executable == nil || executable == .null || executable?.string != nil else { return nil }
        self.init(version: exact, daemon: daemon, peer: PeerDescription(uid: uid, pid: pid, executable: executable?.string))
    }
}

extension JSONValue {
    /// Whether this is an object with no key outside `known`. A reader that meets a key it does not
    /// know (a field added since) gives up, so `JSONDecoder` reads it and nothing is dropped.
    func hasOnly(_ known: Set<String>) -> Bool {
        guard case .object(let members) = self else { return false }
        return members.keys.allSatisfy(known.contains)
    }
}

extension SessionStatus: QuickDecodable {
    package init?(quick value: JSONValue) {
        guard value.hasOnly(["group", "account", "isDefault", "state", "issuer", "username", "loggedInAt", "sessionExpiresAt", "sessionMaxAt",
                             "accessTokenExpiresAt", "admin", "locked"]) else { return nil }
        guard let group = value["group"]?.string, let state = value["state"]?.string.flatMap(State.init(rawValue:)) else { return nil }
        func text(_ key: String) -> String?? {
            switch value[key] { case nil, .null?: return .some(nil); case .string(let s)?: return s; default: return nil }
        }
        func time(_ key: String) -> Double?? {
            switch value[key] { case nil, .null?: return .some(nil); case .number(let n)?: return n; default: return nil }
        }
        guard let issuer = text("issuer"), let username = text("username"), let account = text("account"), let loggedInAt = time("loggedInAt"),
              let sessionExpiresAt = time("sessionExpiresAt"), let sessionMaxAt = time("sessionMaxAt"),
              let accessTokenExpiresAt = time("accessTokenExpiresAt") else { return nil }
        func flag(_ key: String) -> Bool?? {
            switch value[key] { case nil, .null?: return .some(nil); case .bool(let b)?: return b; default: return nil }
        }
        guard let admin = flag("admin"), let locked = flag("locked"), let isDefault = flag("isDefault") else { return nil }
        self.init(group: group, state: state, issuer: issuer, username: username, loggedInAt: loggedInAt,
                  sessionExpiresAt: sessionExpiresAt, sessionMaxAt: sessionMaxAt, accessTokenExpiresAt: accessTokenExpiresAt, admin: admin)
        self.locked = locked
        self.account = account
        self.isDefault = isDefault
    }
}

extension SignResponse: QuickDecodable {
    package init?(quick value: JSONValue) {
        guard value.hasOnly(["headers"]), case .array(let list)? = value["headers"] else { return nil }
        var headers: [Header] = []
        for item in list {
            guard case .array(let pair) = item, pair.count == 2, let name = pair[0].string, let text = pair[1].string else { return nil }
            headers.append(Header(name, text))
        }
        self.init(headers: headers)
    }
}

extension Methods.Token.Result: QuickDecodable {
    package init?(quick value: JSONValue) {
        guard value.hasOnly(["accessToken", "expiresAt", "header"]), let token = value["accessToken"]?.string, let expiresAt = value["expiresAt"]?.number,
              let header = value["header"]?.string else { return nil }
        self.init(accessToken: token, expiresAt: expiresAt, header: header)
    }
}
