import CMSSOSystem
import FoundationEssentials
import Logging
import MSSOCore
import MSSOProtocol

/// Who is calling, worked out for each call from the process that sent it.
struct Caller: Sendable {
    let uid: UInt32
    let pid: Int32
    let role: AccessPolicy.Role
    let app: AppIdentity
    /// The registrations the app matches.
    let registrations: [AppRegistration]
    /// The remote host the call came from, through an SSH forward (role ``AccessPolicy/Role/forwarded``).
    var host: String? = nil
    /// That host's `[forward."HOST"]` table as the configuration has it now (nil: none any more,
    /// or forwarding turned off).
    var forward: ForwardRule? = nil
    /// Which forward (its socket) the call came through: one `msso ssh` session.
    var forwardSession: String? = nil

    /// Whether a call of `kind` on `group` waits for the user's answer: from a host whose table
    /// has `confirm` (status verbs excepted), or through a registration with `confirm = true`
    /// that gives the caller `group` (tokens and signatures).
    func needsConfirmation(_ group: String, _ kind: CallArguments.Kind) -> Bool {
        if host != nil { return forward?.asks(kind) ?? false }
        return AccessPolicy.rule(for: kind).givesCredentials && registrations.contains { $0.confirm == true && $0.groups.contains(group) }
    }

    /// The groups the caller may use among the configured ones: those its registrations give, or
    /// its host's table names.
    func usableGroups(_ configuration: Configuration) -> Set<String> {
        if host != nil { return Set(forward?.groups ?? []).intersection(configuration.groups.keys) }
        return Set(registrations.flatMap(\.groups)).intersection(configuration.groups.keys)
    }

    /// The caller in words, for refusals.
    var described: String {
        host.map { "host \($0)" } ?? app.executable ?? app.flatpak ?? "this program"
    }
}

/// Where a call's answers go: the ``Connection`` it came on (a unit test gives its own, so the
/// dispatcher is tested without a socket).
protocol CallChannel: SignalSink {
    /// The remote host, when the connection is an SSH forward's.
    var forwardHost: String? { get }
    /// Writes a frame now (on the reactor's thread).
    func send(_ frame: [UInt8])
    /// Writes a frame from any thread (a prompt signal while a login waits).
    func post(_ frame: [UInt8])
    /// The answer to a call that ran on the broker (from any thread).
    func complete(_ reply: [UInt8], serial: UInt32)
    /// A call that the channel's end cancels (a login waiting for the user).
    func cancelWhenClosed(_ serial: UInt32, _ task: Task<Void, Never>)
    /// The broker now sends this channel signals.
    func subscribedByBroker()
}

extension Connection: CallChannel {
    var forwardHost: String? { forward?.host }
}

/// Decides whether this caller may make this call on this group, answers a `sign` on a fresh
/// token at once (on the reactor's thread), runs everything else on the broker, audits each
/// call. It maps every method to its broker verb but three, which ``Connection`` answers itself
/// on the reactor's thread: `hello` (the handshake), `ping` (the floor, touching no state) and
/// `forward` (a socket for `msso ssh`, held by the connection that asked).
final class Dispatcher: Sendable {
    let broker: Broker
    let policy: AccessPolicy
    let rules: Rules
    let audit: (any AuditTrail)?
    let logger: Logger
    /// The user's answers for registrations with `confirm = true`.
    let confirmations = Confirmations()

    init(broker: Broker, policy: AccessPolicy, rules: Rules, audit: (any AuditTrail)?, logger: Logger) {
        self.broker = broker
        self.policy = policy
        self.rules = rules
        self.audit = audit
        self.logger = logger
    }

    enum Answer {
        /// The reply frame, ready.
        case now([UInt8])
        /// The broker is working on it; the channel hears through ``CallChannel/complete(_:serial:)``.
        case later
    }

    func dispatch(_ serial: UInt32, method: String, _ arguments: CallArguments, caller: Caller, connection: some CallChannel) -> Answer {
        if case .sign(var request) = arguments {
            var group: String?
            do {
                try authorize(.sign, caller)
                let config = try resolve(request.group, .sign, caller, into: &group)
                request.group = config.name
                if !caller.needsConfirmation(config.name, .sign), let response = try broker.signWithoutWaiting(request, group: config) {
                    record(method, caller, group: group, failure: nil)
                    return .now(ReplyWriter.signReply(serial: serial, headers: response.headers))
                }
            } catch {
                let failure = error as? BrokerError ?? BrokerError(.internal, "internal error in mssod; see its log")
                record(method, caller, group: group, failure: failure)
                return .now(ReplyWriter.error(serial: serial, failure))
            }
        }
        let task = Task {
            let reply = await self.answer(serial, method: method, arguments, caller: caller, connection: connection)
            connection.complete(reply, serial: serial)
        }
        if case .login = arguments { connection.cancelWhenClosed(serial, task) } // nobody left to approve it
        return .later
    }

    /// Throws unless the table (``AccessPolicy/rule(for:)``) lets this caller make this call.
    func authorize(_ kind: CallArguments.Kind, _ caller: Caller) throws(BrokerError) {
        try policy.authorize(kind, role: caller.role, registered: !caller.usableGroups(rules.configuration).isEmpty,
                             who: caller.described, forward: caller.forward)
    }

    /// Waits for the user's yes when the caller's registration for `group` asks for it
    /// (`confirm`), or its host's `[forward]` table does. A request outside the group's
    /// `resources` is refused first (the broker's verb would refuse it anyway): the user is never
    /// asked about what would not be served.
    private func confirm(_ kind: CallArguments.Kind, _ caller: Caller, group config: GroupConfig, resource: String? = nil) async throws(BrokerError) {
        guard caller.needsConfirmation(config.name, kind) else { return }
        if AccessPolicy.rule(for: kind).givesCredentials {
            try config.resources?.authorize(resource, group: config.name, verb: kind == .sign ? "signature" : "token")
        }
        let request = if let host = caller.host {
            // The host is the requester: the local ssh that carries its calls is nobody's identity.
            ConfirmationRequest(group: config.name, verb: kind.rawValue, host: host, forward: caller.forwardSession ?? "")
        } else {
            ConfirmationRequest(group: config.name, verb: kind.rawValue, tool: caller.app.executable ?? caller.app.flatpak ?? "an app",
                                requesters: Confirmations.requesters(of: caller.pid))
        }
        try await confirmations.confirm(request, now: Double(cmsso_monotonic_ns()) / 1e9)
    }

    /// An unknown method: answered, and audited under a name that cannot forge anything.
    func refuseUnknown(_ method: String, serial: UInt32, sender: Sender, connection: some CallChannel) {
        let error = BrokerError(.unknownMethod, "no method named \"\(method.prefix(64))\"; see docs/PROTOCOL.md for the methods of protocol version \(protocolVersion)")
        record(method, Caller(uid: sender.uid, pid: sender.pid, role: .app, app: AppIdentity(executable: nil), registrations: []),
               group: nil, failure: error, host: connection.forwardHost)
        connection.send(ReplyWriter.error(serial: serial, error))
    }

    private func answer(_ serial: UInt32, method: String, _ arguments: CallArguments, caller: Caller, connection: some CallChannel) async -> [UInt8] {
        var group: String?
        var detail: String?
        let reply: [UInt8]
        var failure: BrokerError?
        do {
            try authorize(arguments.kind, caller)
            reply = try await route(serial, arguments, connection: connection, caller: caller, group: &group, detail: &detail)
        } catch {
            failure = error as? BrokerError ?? BrokerError(.internal, "internal error in mssod; see its log")
            if failure!.name == .internal {
                logger.error("call failed", metadata: ["method": "\(method)", "error": "\(String(describing: type(of: error)))"])
            }
            reply = ReplyWriter.error(serial: serial, failure!)
        }
        record(method, caller, group: group, failure: failure, detail: detail)
        return reply
    }

    /// The call's audit row (and a debug line). `host`: the remote host, when not the caller's own
    /// (a `forward` call names the host it asked for).
    /// `detail`: what else the row says (a login's new account).
    func record(_ method: String, _ caller: Caller, group: String?, failure: BrokerError?, host: String? = nil, detail: String? = nil) {
        let verb = MethodName.loggable(method)
        let host = host ?? caller.host
        logger.debug("call", metadata: {
            var metadata: Logger.Metadata = ["method": "\(verb)", "uid": "\(caller.uid)", "pid": "\(caller.pid)",
                                             "group": "\(group ?? "-")", "outcome": "\(failure?.name.rawValue ?? "ok")"]
            if let host { metadata["host"] = "\(host)" } // a forwarded call's, or a forward's
            return metadata
        }())
        guard let audit else { return }
        var detail = detail
        if failure?.name == .notEntitled, let (expected, actual) = rules.entitlements.pinMismatch(caller.app) {
            detail = "pinned sha256 \(expected), running \(actual ?? "unreadable")"
        }
        audit.record(AuditEntry(time: Date().timeIntervalSince1970, uid: caller.uid, pid: caller.pid, executable: caller.app.executable,
                                app: caller.registrations.first?.name ?? caller.app.flatpak, group: group,
                                verb: verb, outcome: failure == nil ? "ok" : "error", error: failure?.name.rawValue, detail: detail,
                                host: host))
    }

    private func route(_ serial: UInt32, _ arguments: CallArguments, connection: some CallChannel, caller: Caller,
                       group: inout String?, detail: inout String?) async throws -> [UInt8] {
        let role = caller.role
        func reply<R: Codable & Sendable>(_ result: R) -> [UInt8] { WireCodec.frame(Reply(serial: serial, result: result), serial: serial) }
        switch arguments {
        case .hello, .ping:
            throw BrokerError(.badRequest, "hello may be sent only once, first")
        case .forward:
            throw BrokerError(.internal, "forward is answered by the connection") // Connection.openForward
        case .sign(var request):
            let config = try resolve(request.group, .sign, caller, into: &group)
            request.group = config.name
            try await confirm(.sign, caller, group: config, resource: request.url)
            return reply(try await broker.sign(request))
        case .token(let args):
            let config = try resolve(args.group, .token, caller, into: &group)
            try await confirm(.token, caller, group: config, resource: args.resource)
            return reply(try await broker.token(config.name, renew: args.renew ?? false, resource: args.resource))
        case .login(var args):
            let config = try resolve(args.group, .login, caller, into: &group)
            try policy.authorize(args.flow, role: role, group: config, newAccount: args.newAccount == true)
            try await confirm(.login, caller, group: config)
            args.group = config.name
            let name = config.name
            let status = try await broker.login(args, requester: caller.host == nil ? "\(caller.described) (pid \(caller.pid))" : caller.described) { prompt, joined in
                switch prompt {
                case .device(let device):
                    connection.post(WireCodec.frame(Signal(signal: .devicePrompt, group: name, serial: serial, prompt: device,
                                                           joined: joined ? true : nil), serial: 0))
                case .browser(let browser):
                    connection.post(WireCodec.frame(Signal(signal: .browserPrompt, group: name, serial: serial, browser: browser,
                                                           joined: joined ? true : nil), serial: 0))
                }
            }
            if status.newAccount == true {
                // Who put the group into a new account, in the row that names the caller.
                detail = "new account: \(status.username ?? "unnamed")" + (status.previousAccount.map { ", was \($0)" } ?? ", the group's first")
            }
            return reply(status)
        case .extend(let args):
            let config = try resolve(args.group, .extend, caller, into: &group)
            try await confirm(.extend, caller, group: config)
            return reply(try await broker.extend(config.name))
        case .logout(let args):
            guard args.all == true else {
                let config = try resolve(args.group, .logout, caller, into: &group)
                try await confirm(.logout, caller, group: config)
                return reply(try await broker.logout(config.name, all: false))
            }
            if role == .forwarded {
                throw BrokerError(.forbidden, "\(caller.described) may not log out of every group through an SSH forward; name the group (msso logout --group G)")
            }
            guard policy.needsEntitlement(.logout, role: role) else {
                return reply(try await broker.logout(nil, all: true))
            }
            var ended = Methods.Logout.Result(loggedOut: [])
            for name in caller.usableGroups(rules.configuration).sorted() { ended = ended + (try await broker.logout(name, all: false)) }
            return reply(ended)
        case .status(let args):
            if args.group != nil || !policy.needsEntitlement(.status, role: role) {
                let name = try args.group.map { try resolve($0, .status, caller, into: &group).name }
                return reply(await statusResult(try await broker.status(name)))
            }
            let mine = caller.usableGroups(rules.configuration)
            return reply(await statusResult(try await broker.status(nil).filter { mine.contains($0.group) }))
        case .check(let args):
            return reply(try await broker.check(try resolve(args.group, .check, caller, into: &group).name))
        case .subscribe(let args):
            let names = try args.groups.map { try $0.map { try resolve($0, .subscribe, caller, into: &group).name } }
                ?? (policy.needsEntitlement(.subscribe, role: role) ? caller.usableGroups(rules.configuration).sorted() : nil)
            let groups = try await broker.subscribe(connection, groups: names)
            connection.subscribedByBroker()
            return reply(Methods.Subscribe.Result(groups: groups))
        case .apps:
            let (configuration, entitlements) = (rules.configuration, rules.entitlements)
            let app = caller.app
            let description = CallerDescription(executable: app.executable, flatpak: app.flatpak, unit: app.unit,
                                                apps: caller.registrations.map(\.name),
                                                groups: role == .ownTool ? configuration.groups.keys.sorted() : caller.usableGroups(configuration).sorted())
            return reply(Methods.Apps.Result(caller: description, registrations: entitlements.registrations, ignored: entitlements.ignored,
                                             userApps: configuration.policy.userApps, userDirectory: configuration.userDirectory + "/apps.d"))
        case .audit(let args):
            guard let audit else { throw BrokerError(.internal, "the audit log could not be opened; see mssod's log") }
            let entries = try audit.query(group: args.group, since: args.since, limit: min(max(args.limit ?? 1000, 0), 10_000))
            return reply(Methods.Audit.Result(entries: entries))
        case .keys(let args):
            let name = try resolve(args.group, .keys, caller, into: &group).name
            return reply(try await broker.key(name, rotate: args.rotate ?? false))
        case .lock(let args):
            return reply(try await broker.lock(passphrase: args.passphrase))
        case .unlock(let args):
            return reply(try await broker.unlock(passphrase: args.passphrase))
        case .diagnose:
            return reply(await diagnosis(caller))
        }
    }

    /// The group a call is about, after checking the caller may use it. An app registered for
    /// exactly one of several configured groups gets that one by default.
    private func resolve(_ name: String?, _ kind: CallArguments.Kind, _ caller: Caller, into group: inout String?) throws -> GroupConfig {
        let snapshot = rules.current
        let configuration = snapshot.configuration
        var name = name
        if name == nil, caller.role == .app || caller.role == .forwarded, configuration.groups.count > 1 {
            let mine = caller.usableGroups(configuration)
            if mine.count == 1 { name = mine.first }
        }
        let resolved = try configuration.group(named: name)
        group = resolved.name
        if let host = caller.host {
            guard let forward = caller.forward, forward.groups.contains(resolved.name) else {
                let named = caller.forward.map { $0.groups.map { "\"\($0)\"" }.joined(separator: ", ") } ?? "none"
                throw BrokerError(.notEntitled, "host \(host) may not use access group \"\(resolved.name)\" through the SSH forward: its [forward.\"\(host)\"] table\(caller.forward.map { " (\($0.source))" } ?? "") names \(named); add the group to its `groups` there")
            }
        } else if policy.needsEntitlement(kind, role: caller.role), !caller.registrations.contains(where: { $0.groups.contains(resolved.name) }) {
            try snapshot.entitlements.authorize(caller.app, group: resolved.name) // throws NotEntitled, worded for the user
        }
        return resolved
    }
}
