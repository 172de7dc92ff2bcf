import Logging
import MSSOCore
import MSSOProtocol
import NIOCore

/// Decodes a call, checks it against the policy, runs it on the broker, encodes the answer.
/// The one place that maps method names to broker verbs.
struct Dispatcher: Sendable {
    let broker: Broker
    let policy: AccessPolicy
    let logger: Logger

    /// The reply (or error) to one call frame.
    func answer(_ payload: ByteBuffer, method: String, serial: UInt32, connection: Connection) async -> ByteBuffer {
        let peer = connection.peer
        do {
            try policy.authorize(method, for: peer)
            let reply = try await route(payload, method: method, serial: serial, connection: connection)
            logger.debug("call", metadata: ["method": "\(method)", "uid": "\(peer.uid)", "pid": "\(peer.pid)", "outcome": "ok"])
            return reply
        } catch {
            let failure = error as? BrokerError ?? BrokerError(.internal, "internal error in mssod; see its log")
            if failure.name == .internal {
                logger.error("call failed", metadata: ["method": "\(method)", "error": "\(String(describing: type(of: error)))"])
            } else {
                logger.debug("call", metadata: ["method": "\(method)", "uid": "\(peer.uid)", "pid": "\(peer.pid)", "outcome": "\(failure.name)"])
            }
            return Self.encode(ErrorReply(serial: serial, error: failure))
        }
    }

    private func route(_ payload: ByteBuffer, method: String, serial: UInt32, connection: Connection) async throws -> ByteBuffer {
        switch method {
        case Methods.Ping.name:
            return try await run(Methods.Ping.self, payload) { $0 }
        case Methods.Sign.name:
            return try await run(Methods.Sign.self, payload) { try await broker.sign($0) }
        case Methods.Login.name:
            return try await run(Methods.Login.self, payload) { args in
                try policy.authorize(args.flow, for: connection.peer)
                return try await broker.login(args) { prompt in
                    connection.send(Signal(signal: .devicePrompt, group: args.group ?? "", serial: serial, prompt: prompt))
                }
            }
        case Methods.Extend.name:
            return try await run(Methods.Extend.self, payload) { try await broker.extend($0.group) }
        case Methods.Logout.name:
            return try await run(Methods.Logout.self, payload) {
                .init(loggedOut: try await broker.logout($0.group, all: $0.all ?? false))
            }
        case Methods.Status.name:
            return try await run(Methods.Status.self, payload) { .init(groups: try await broker.status($0.group)) }
        case Methods.Check.name:
            return try await run(Methods.Check.self, payload) { try await broker.check($0.group) }
        case Methods.Subscribe.name:
            return try await run(Methods.Subscribe.self, payload) {
                .init(groups: try await broker.subscribe(connection, groups: $0.groups))
            }
        case Methods.Hello.name:
            throw BrokerError(.badRequest, "hello may be sent only once, first")
        default:
            throw BrokerError(.unknownMethod, "no method named \"\(method)\"; see docs/PROTOCOL.md for the methods of protocol version \(protocolVersion)")
        }
    }

    private func run<M: BrokerMethod>(_: M.Type, _ payload: ByteBuffer, _ body: (M.Arguments) async throws -> M.Result) async throws -> ByteBuffer {
        let call = try WireCodec.decode(Call<M.Arguments>.self, from: payload)
        return Self.encode(Reply(serial: call.serial, result: try await body(call.args)))
    }

    static func encode(_ message: some Encodable) -> ByteBuffer {
        if let buffer = try? WireCodec.encode(message) { return buffer }
        // Only a reply over the frame cap lands here; say so instead of sending it.
        return try! WireCodec.encode(ErrorReply(serial: 0, error: BrokerError(.internal, "reply too large")))
    }
}
