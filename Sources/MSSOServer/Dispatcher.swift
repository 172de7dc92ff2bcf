import CMSSOSystem
import FoundationEssentials
import Logging
import MSSOCore
import MSSOProtocol

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
    /// Answers `hello` (the handshake: the channel's own state says whether it may come now).
    func greet(_ serial: UInt32, _ hello: Methods.Hello.Arguments, _ caller: Caller)
    /// Answers `forward`: a socket for a remote host, which the channel holds (`msso ssh`).
    func openForward(_ serial: UInt32, _ asked: Methods.Forward.Arguments, _ caller: Caller) throws(BrokerError) -> String
}

extension Connection: CallChannel {
    var forwardHost: String? { forward?.host }
}

/// Maps every method to its answer, once the ``Gate`` has decided the call: a `sign` on a fresh
/// token is answered at once (on the reactor's thread), `hello` and `forward` by the channel (its
/// own state, its own sockets), everything else on the broker; each call is audited.
final class Dispatcher: Sendable {
    let broker: Broker
    let gate: Gate
    let audit: (any AuditTrail)?
    let logger: Logger
    /// The user's answers for registrations with `confirm = true`.
    let confirmations = Confirmations()

    var policy: AccessPolicy { gate.policy }
    var rules: Rules { gate.rules }

    init(broker: Broker, policy: AccessPolicy, rules: Rules, audit: (any AuditTrail)?, logger: Logger) {
        self.broker = broker
        self.gate = Gate(policy: policy, rules: rules)
        self.audit = audit
        self.logger = logger
    }

    enum Answer {
        /// The reply frame, ready.
        case now([UInt8])
        /// The broker is working on it; the channel hears through ``CallChannel/complete(_:serial:)``.
        case later
        /// The channel answered it (`hello`).
        case answered
    }

    func dispatch(_ serial: UInt32, method: String, _ arguments: CallArguments, caller: Caller, connection: some CallChannel) -> Answer {
        var named: String?
        let decision: Decision
        do {
            decision = try gate.decide(arguments, caller, locked: broker.isLocked, group: &named)
        } catch {
            if case .hello = arguments {} else { record(method, caller, group: named, failure: error, host: Self.host(arguments)) }
            return .now(ReplyWriter.error(serial: serial, error))
        }
        let group = named
        // What a minted token was for, on its sign's or token's audit row (never the token).
        let resource = decision.target.isSession ? nil : decision.target
        // Which account: the one the call named or its registration pins, else the group's default now
        // (read only where an audit row is written).
        let account: @Sendable () -> String? = { [broker] in decision.group.map { decision.account ?? broker.defaultAccountNow($0) } }
        @Sendable func reply<R: Codable & Sendable>(_ result: R) -> [UInt8] { WireCodec.frame(Reply(serial: serial, result: result), serial: serial) }
        func later(_ work: @escaping @Sendable (inout String?) async throws -> [UInt8]) -> Answer {
            let task = Task {
                var detail: String?
                let reply: [UInt8]
                var failure: BrokerError?
                do {
                    if decision.confirm { try await confirm(decision, caller) }
                    reply = try await work(&detail)
                } catch {
                    failure = error as? BrokerError ?? BrokerError(.internal, "internal error in mssod; see its log")
                    if failure!.name == .internal {
                        logger.error("call failed", metadata: ["method": "\(method)", "error": "\(String(describing: type(of: error)))"])
                    }
                    reply = ReplyWriter.error(serial: serial, failure!)
                }
                record(method, caller, group: group, failure: failure, detail: detail, resource: resource, account: account())
                connection.complete(reply, serial: serial)
            }
            if case .login = arguments { connection.cancelWhenClosed(serial, task) } // nobody left to approve it
            return .later
        }
        let broker = self.broker
        switch arguments {
        case .hello(let hello):
            connection.greet(serial, hello, caller)
            return .answered
        case .ping(let data):
            // A connection echoes pings itself, before anyone is identified (CallChecks: the floor);
            // a channel that hands one here gets the same echo.
            return .now(ReplyWriter.pingReply(serial: serial, data: data.data))
        case .forward(let asked):
            do {
                let path = try connection.openForward(serial, asked, caller)
                record(method, caller, group: nil, failure: nil, host: Self.host(arguments))
                return .now(reply(Methods.Forward.Result(socket: path)))
            } catch {
                record(method, caller, group: nil, failure: error, host: Self.host(arguments))
                return .now(ReplyWriter.error(serial: serial, error))
            }
        case .sign(var request):
            request.group = decision.group!.name
            request.account = decision.account
            let (config, checked) = (decision.group!, decision.sign!)
            if !decision.confirm {
                do {
                    if let response = try broker.signWithoutWaiting(request, checked: checked, group: config, target: decision.target) {
                        record(method, caller, group: group, failure: nil, resource: resource, account: account())
                        return .now(ReplyWriter.signReply(serial: serial, headers: response.headers))
                    }
                } catch {
                    record(method, caller, group: group, failure: error, resource: resource, account: account())
                    return .now(ReplyWriter.error(serial: serial, error))
                }
            }
            return later { [request] _ in reply(try await broker.sign(request, checked: checked, target: decision.target)) }
        case .token(let args):
            return later { _ in reply(try await broker.token(decision.group!.name, account: decision.account, renew: args.renew ?? false,
                                                             target: decision.target)) }
        case .login(var args):
            args.group = decision.group!.name
            args.account = decision.account
            let requester = caller.host == nil ? "\(caller.described) (pid \(caller.pid))" : caller.described
            return later { [args] detail in
                let name = args.group!
                let status = try await broker.login(args, requester: requester, mayAddAccount: decision.mayAddAccount) { prompt, joined in
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
                    let named = status.account.flatMap { $0 == AccountName.defaultName ? nil : $0 }
                    detail = "new account\(named.map { " \($0)" } ?? ""): \(status.username ?? "unnamed")"
                        + (status.previousAccount.map { ", was \($0)" } ?? (named == nil ? ", the group's first" : ", the account's first"))
                }
                return reply(status)
            }
        case .extend:
            return later { _ in reply(try await broker.extend(decision.group!.name, account: decision.account)) }
        case .logout:
            if let config = decision.group {
                return later { _ in reply(try await broker.logout(config.name, account: decision.account, all: false)) }
            }
            return later { _ in reply(try await broker.logout(everyAccountOf: decision.groups, only: decision.account)) }
        case .status:
            return later { _ in
                var all = try await broker.status(decision.group?.name, account: decision.account)
                if let mine = decision.groups { all = all.filter { mine.contains($0.group) } }
                if let seen = decision.visibleAccounts { all = all.filter { seen.contains($0.account ?? AccountName.defaultName) } }
                return reply(await self.statusResult(all))
            }
        case .check:
            return later { _ in reply(try await broker.check(decision.group!.name, account: decision.account)) }
        case .subscribe:
            return later { _ in
                let groups = try await broker.subscribe(connection, groups: decision.groups, account: decision.account)
                connection.subscribedByBroker()
                return reply(Methods.Subscribe.Result(groups: groups))
            }
        case .apps:
            let (configuration, entitlements) = (rules.configuration, rules.entitlements)
            let app = caller.app
            let description = CallerDescription(executable: app.executable, flatpak: app.flatpak, unit: app.unit,
                                                apps: caller.registrations.map(\.name),
                                                groups: caller.role == .ownTool ? configuration.groups.keys.sorted() : caller.usableGroups(configuration).sorted())
            return later { _ in
                reply(Methods.Apps.Result(caller: description, registrations: entitlements.registrations, ignored: entitlements.ignored,
                                          userApps: configuration.policy.userApps, userDirectory: configuration.userDirectory + "/apps.d"))
            }
        case .audit(let args):
            return later { _ in
                guard let audit = self.audit else { throw BrokerError(.internal, "the audit log could not be opened; see mssod's log") }
                return reply(Methods.Audit.Result(entries: try audit.query(group: args.group, since: args.since, limit: min(max(args.limit ?? 1000, 0), 10_000))))
            }
        case .keys(let args):
            return later { _ in reply(try await broker.key(decision.group!.name, rotate: args.rotate ?? false)) }
        case .lock(let args):
            return later { _ in reply(try await broker.lock(passphrase: args.passphrase)) }
        case .unlock(let args):
            return later { _ in reply(try await broker.unlock(passphrase: args.passphrase)) }
        case .diagnose:
            return later { _ in reply(await self.diagnosis(caller)) }
        }
    }

    /// The host a `forward` call asked for, named in its audit row.
    private static func host(_ arguments: CallArguments) -> String? {
        if case .forward(let asked) = arguments { return ForwardHost.normalized(asked.host) }
        return nil
    }

    /// Waits for the user's yes (the gate said the call asks: ``Decision/confirm``).
    private func confirm(_ decision: Decision, _ caller: Caller) async throws(BrokerError) {
        guard let config = decision.group else { return }
        let verb = decision.action.method.rawValue
        let request = if let host = caller.host {
            // The host is the requester: the local ssh that carries its calls is nobody's identity.
            ConfirmationRequest(group: config.name, verb: verb, host: host, forward: caller.forwardSession ?? "")
        } else {
            ConfirmationRequest(group: config.name, verb: verb, tool: caller.app.executable ?? caller.app.flatpak ?? "an app",
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

    /// The call's audit row (and a debug line). `host`: the remote host, when not the caller's own
    /// (a `forward` call names the host it asked for).
    /// `detail`: what else the row says (a login's new account).
    func record(_ method: String, _ caller: Caller, group: String?, failure: BrokerError?, host: String? = nil, detail: String? = nil,
                resource: TokenTarget? = nil, account: @autoclosure () -> String? = nil) {
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
                                host: host, resource: resource?.description, account: account()))
    }
}
