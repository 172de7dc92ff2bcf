import Foundation
import Logging
import MSSOAudit
import MSSOCore
import MSSOProtocol
import NIOCore

/// Decodes a call, decides whether this caller may make it on this group, runs it on the broker,
/// audits it, encodes the answer. The one place that maps method names to broker verbs.
struct Dispatcher: Sendable {
    let broker: Broker
    let policy: AccessPolicy
    let rules: Rules
    let audit: AuditLog?
    let logger: Logger

    /// The reply (or error) to one call frame.
    /// Who is calling, worked out once per call.
    struct Caller {
        let role: AccessPolicy.Role
        let app: AppIdentity
        /// The registrations the app matches (a pinned one may hash the executable, once).
        let registrations: [AppRegistration]

        /// The registered groups among the configured ones.
        func usableGroups(_ configuration: Configuration) -> Set<String> {
            Set(registrations.flatMap(\.groups)).intersection(configuration.groups.keys)
        }
    }

    func answer(_ payload: ByteBuffer, method: String, serial: UInt32, connection: Connection) async -> ByteBuffer {
        let peer = connection.peer
        let caller = Caller(role: policy.role(of: peer), app: peer.app, registrations: rules.entitlements.matches(peer.app))
        var group: String?
        let reply: ByteBuffer
        var failure: BrokerError?
        do {
            try policy.authorize(method, role: caller.role)
            reply = try await route(payload, method: method, connection: connection, caller: caller, group: &group)
        } catch {
            failure = error as? BrokerError ?? BrokerError(.internal, "internal error in mssod; see its log")
            if failure!.name == .internal {
                logger.error("call failed", metadata: ["method": "\(method)", "error": "\(String(describing: type(of: error)))"])
            }
            reply = Self.encode(ErrorReply(serial: serial, error: failure!))
        }
        logger.debug("call", metadata: ["method": "\(method)", "uid": "\(peer.uid)", "pid": "\(peer.pid)",
                                        "group": "\(group ?? "-")", "outcome": "\(failure?.name.rawValue ?? "ok")"])
        if method != Methods.Ping.name, let audit {
            audit.record(AuditEntry(time: Date().timeIntervalSince1970, uid: peer.uid, pid: peer.pid, executable: peer.executable,
                                    app: caller.registrations.first?.name ?? peer.app.flatpak, group: group,
                                    verb: method, outcome: failure == nil ? "ok" : "error", error: failure?.name.rawValue))
        }
        return reply
    }

    private func route(_ payload: ByteBuffer, method: String, connection: Connection, caller: Caller,
                       group: inout String?) async throws -> ByteBuffer {
        let (role, app) = (caller.role, caller.app)
        switch method {
        case Methods.Ping.name:
            let call = try decode(Methods.Ping.self, payload)
            return reply(Methods.Ping.self, call, call.args)
        case Methods.Sign.name:
            var call = try decode(Methods.Sign.self, payload)
            call.args.group = try resolve(call.args.group, method, caller, into: &group)
            return reply(Methods.Sign.self, call, try await broker.sign(call.args))
        case Methods.Login.name:
            var call = try decode(Methods.Login.self, payload)
            try policy.authorize(call.args.flow, role: role)
            let name = try resolve(call.args.group, method, caller, into: &group)
            call.args.group = name
            let serial = call.serial
            return reply(Methods.Login.self, call, try await broker.login(call.args) { prompt in
                switch prompt {
                case .device(let device):
                    connection.send(Signal(signal: .devicePrompt, group: name, serial: serial, prompt: device))
                case .browser(let browser):
                    connection.send(Signal(signal: .browserPrompt, group: name, serial: serial, browser: browser))
                }
            })
        case Methods.Extend.name:
            let call = try decode(Methods.Extend.self, payload)
            return reply(Methods.Extend.self, call, try await broker.extend(try resolve(call.args.group, method, caller, into: &group)))
        case Methods.Logout.name:
            let call = try decode(Methods.Logout.self, payload)
            guard call.args.all == true else {
                let name = try resolve(call.args.group, method, caller, into: &group)
                return reply(Methods.Logout.self, call, .init(loggedOut: try await broker.logout(name, all: false)))
            }
            guard role == .app else { return reply(Methods.Logout.self, call, .init(loggedOut: try await broker.logout(nil, all: true))) }
            var ended: [String] = []
            for name in caller.usableGroups(rules.configuration).sorted() { ended += try await broker.logout(name, all: false) }
            return reply(Methods.Logout.self, call, .init(loggedOut: ended))
        case Methods.Status.name:
            let call = try decode(Methods.Status.self, payload)
            if call.args.group != nil || role != .app {
                let name = try call.args.group.map { try resolve($0, method, caller, into: &group) }
                return reply(Methods.Status.self, call, .init(groups: try await broker.status(name)))
            }
            let mine = caller.usableGroups(rules.configuration)
            return reply(Methods.Status.self, call, .init(groups: try await broker.status(nil).filter { mine.contains($0.group) }))
        case Methods.Check.name:
            let call = try decode(Methods.Check.self, payload)
            return reply(Methods.Check.self, call, try await broker.check(try resolve(call.args.group, method, caller, into: &group)))
        case Methods.Subscribe.name:
            let call = try decode(Methods.Subscribe.self, payload)
            let names = try call.args.groups.map { try $0.map { try resolve($0, method, caller, into: &group) } }
                ?? (role == .app ? caller.usableGroups(rules.configuration).sorted() : nil)
            return reply(Methods.Subscribe.self, call, .init(groups: try await broker.subscribe(connection, groups: names)))
        case Methods.Apps.name:
            let call = try decode(Methods.Apps.self, payload)
            let (configuration, entitlements) = (rules.configuration, rules.entitlements)
            let caller = CallerDescription(executable: app.executable, flatpak: app.flatpak, unit: app.unit,
                                           apps: entitlements.matches(app).map(\.name),
                                           groups: role == .app ? caller.usableGroups(rules.configuration).sorted() : configuration.groups.keys.sorted())
            return reply(Methods.Apps.self, call, .init(caller: caller, registrations: entitlements.registrations, ignored: entitlements.ignored,
                                     userApps: configuration.policy.userApps, userDirectory: configuration.userDirectory + "/apps.d"))
        case Methods.Audit.name:
            let call = try decode(Methods.Audit.self, payload)
            guard let audit else { throw BrokerError(.internal, "the audit log could not be opened; see mssod's log") }
            let entries = try audit.query(group: call.args.group, since: call.args.since, limit: min(call.args.limit ?? 1000, 10_000))
            return reply(Methods.Audit.self, call, .init(entries: entries))
        case Methods.Keys.name:
            let call = try decode(Methods.Keys.self, payload)
            let name = try resolve(call.args.group, method, caller, into: &group)
            return reply(Methods.Keys.self, call, try await broker.key(name, rotate: call.args.rotate ?? false))
        case Methods.Hello.name:
            throw BrokerError(.badRequest, "hello may be sent only once, first")
        default:
            throw BrokerError(.unknownMethod, "no method named \"\(method)\"; see docs/PROTOCOL.md for the methods of protocol version \(protocolVersion)")
        }
    }

    /// The group a call is about, after checking the caller may use it. An app registered for
    /// exactly one of several configured groups gets that one by default.
    private func resolve(_ name: String?, _ method: String, _ caller: Caller, into group: inout String?) throws -> String {
        let configuration = rules.configuration
        var name = name
        if name == nil, caller.role == .app, configuration.groups.count > 1 {
            let mine = caller.usableGroups(configuration)
            if mine.count == 1 { name = mine.first }
        }
        let resolved = try configuration.group(named: name).name
        group = resolved
        if policy.needsEntitlement(method, role: caller.role), !caller.registrations.contains(where: { $0.groups.contains(resolved) }) {
            try rules.entitlements.authorize(caller.app, group: resolved) // throws NotEntitled, worded for the user
        }
        return resolved
    }

    private func decode<M: BrokerMethod>(_: M.Type, _ payload: ByteBuffer) throws -> Call<M.Arguments> {
        try WireCodec.decode(Call<M.Arguments>.self, from: payload)
    }

    private func reply<M: BrokerMethod>(_: M.Type, _ call: Call<M.Arguments>, _ result: M.Result) -> ByteBuffer {
        Self.encode(Reply(serial: call.serial, result: result))
    }

    static func encode(_ message: some Encodable) -> ByteBuffer {
        if let buffer = try? WireCodec.encode(message) { return buffer }
        // Only a reply over the frame cap lands here; say so instead of sending it.
        return try! WireCodec.encode(ErrorReply(serial: 0, error: BrokerError(.internal, "reply too large")))
    }
}
