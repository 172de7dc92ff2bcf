/// A call frame as the daemon reads it, decoded in one pass: the routing fields, then `args` as
/// the type its method takes (see ``Methods``).
///
/// The routing fields are read leniently, each on its own, so that a frame with a bad `type` but
/// a readable `serial` still gets an error naming that serial and its sender is not left waiting.
public struct IncomingCall: Decodable, Sendable {
    public let type: MessageType?
    public let serial: UInt32?
    public let method: String?
    /// The arguments, or why they could not be read (a sentence naming the field, never a value).
    public let arguments: Result<CallArguments, BrokerError>
    /// The frame's payload, in bytes: about what the call holds while it runs.
    public internal(set) var size = 0

    enum CodingKeys: String, CodingKey { case type, serial, method, args }

    /// Reads a call frame's payload: the plain form of the hot calls by ``QuickCall``, anything
    /// else by `JSONDecoder`.
    public static func read(_ payload: UnsafeRawBufferPointer) throws(BrokerError) -> IncomingCall {
        var call: IncomingCall
        if let quick = QuickCall.parse(payload) { call = quick } else { call = try WireCodec.decode(IncomingCall.self, from: payload) }
        call.size = payload.count
        return call
    }

    init(type: MessageType?, serial: UInt32?, method: String?, arguments: Result<CallArguments, BrokerError>) {
        (self.type, self.serial, self.method, self.arguments) = (type, serial, method, arguments)
    }

    public init(from decoder: Decoder) throws {
        let fields = try decoder.container(keyedBy: CodingKeys.self) // fails only if not a JSON object
        type = try? fields.decode(MessageType.self, forKey: .type)
        serial = try? fields.decode(UInt32.self, forKey: .serial)
        method = try? fields.decode(String.self, forKey: .method)
        guard type == .call, let method, let kind = CallArguments.Kind(rawValue: method) else {
            arguments = .failure(BrokerError(.badRequest, "not a call"))
            return
        }
        guard fields.contains(.args) else {
            arguments = .failure(BrokerError(.badRequest, "malformed message: missing field `args`"))
            return
        }
        do {
            arguments = .success(try CallArguments(kind, from: try fields.superDecoder(forKey: .args)))
        } catch let error as DecodingError {
            arguments = .failure(BrokerError(.badRequest, "malformed message: \(WireCodec.describe(error))"))
        } catch {
            arguments = .failure(BrokerError(.badRequest, "malformed message: invalid value in `args`"))
        }
    }
}

/// The arguments of each method, typed. One case per method of ``Methods``.
public enum CallArguments: Sendable {
    case hello(Methods.Hello.Arguments)
    case ping(Methods.Ping.Arguments)
    case login(Methods.Login.Arguments)
    case extend(Methods.Extend.Arguments)
    case logout(Methods.Logout.Arguments)
    case status(Methods.Status.Arguments)
    case check(Methods.Check.Arguments)
    case sign(Methods.Sign.Arguments)
    case token(Methods.Token.Arguments)
    case subscribe(Methods.Subscribe.Arguments)
    case apps(Methods.Apps.Arguments)
    case audit(Methods.Audit.Arguments)
    case keys(Methods.Keys.Arguments)
    case lock(Methods.Lock.Arguments)
    case unlock(Methods.Unlock.Arguments)
    case diagnose(Methods.Diagnose.Arguments)
    case forward(Methods.Forward.Arguments)

    /// The method names, as on the wire.
    public enum Kind: String, Sendable, CaseIterable {
        case hello, ping, login, extend, logout, status, check, sign, token, subscribe, apps, audit, keys, lock, unlock, diagnose, forward
    }

    init(_ kind: Kind, from decoder: Decoder) throws {
        switch kind {
        case .hello: self = .hello(try .init(from: decoder))
        case .ping: self = .ping(try .init(from: decoder))
        case .login: self = .login(try .init(from: decoder))
        case .extend: self = .extend(try .init(from: decoder))
        case .logout: self = .logout(try .init(from: decoder))
        case .status: self = .status(try .init(from: decoder))
        case .check: self = .check(try .init(from: decoder))
        case .sign: self = .sign(try .init(from: decoder))
        case .token: self = .token(try .init(from: decoder))
        case .subscribe: self = .subscribe(try .init(from: decoder))
        case .apps: self = .apps(try .init(from: decoder))
        case .audit: self = .audit(try .init(from: decoder))
        case .keys: self = .keys(try .init(from: decoder))
        case .lock: self = .lock(try .init(from: decoder))
        case .unlock: self = .unlock(try .init(from: decoder))
        case .diagnose: self = .diagnose(try .init(from: decoder))
        case .forward: self = .forward(try .init(from: decoder))
        }
    }

    /// Which method these are the arguments of.
    public var kind: Kind {
        switch self {
        case .hello: .hello
        case .ping: .ping
        case .login: .login
        case .extend: .extend
        case .logout: .logout
        case .status: .status
        case .check: .check
        case .sign: .sign
        case .token: .token
        case .subscribe: .subscribe
        case .apps: .apps
        case .audit: .audit
        case .keys: .keys
        case .lock: .lock
        case .unlock: .unlock
        case .diagnose: .diagnose
        case .forward: .forward
        }
    }
}

/// Method names as they may appear in a log line or an audit row.
public enum MethodName {
    /// `[A-Za-z]+`, at most 64 letters: only such a name reaches a log or the audit log.
    public static func isWellFormed(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 64 && name.utf8.allSatisfy { (65...90).contains($0) || (97...122).contains($0) }
    }

    /// `name` if well-formed, else `(invalid)`: a peer cannot forge a log line or an audit verb.
    public static func loggable(_ name: String?) -> String {
        guard let name, isWellFormed(name) else { return "(invalid)" }
        return name
    }
}
