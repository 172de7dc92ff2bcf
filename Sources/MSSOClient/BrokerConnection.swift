import FoundationEssentials
import MSSOProtocol

/// One connection to the user's msso broker, used one call at a time, blocking: what a command
/// (the `msso` CLI, `msso-logout`, `git-credential-msso`) needs to make a call and exit. Every call
/// has a deadline: a broker that does not answer is an error that says so, never a hang.
///
/// ```swift
/// let broker = try BrokerConnection.connect(clientName: "my-tool")
/// let status = try broker.call(Methods.Check.self, GroupArguments(group: "com.example.suite"))
/// ```
public final class BrokerConnection: @unchecked Sendable {
    private let socket: BrokerSocket
    private var serial: UInt32 = 0
    /// Seconds a call may take by default.
    public let timeout: Double

    private init(socket: BrokerSocket, timeout: Double) {
        self.socket = socket
        self.timeout = timeout
    }

    /// Connects and says hello.
    /// - Parameters:
    ///   - socketPath: defaults to `$MSSO_SOCKET`, else `$XDG_RUNTIME_DIR/msso/broker.sock`, else
    ///     `/run/user/UID/msso/broker.sock`.
    ///   - timeout: seconds each call may take (connecting included).
    public static func connect(socketPath: String? = nil, clientName: String? = nil, timeout: Double = 20) throws(BrokerError) -> BrokerConnection {
        let path = socketPath ?? SocketPath.resolve(environment: ProcessInfo.processInfo.environment)
        let connection = BrokerConnection(socket: try BrokerSocket.connect(path: path, timeout: timeout), timeout: timeout)
        _ = try connection.call(Methods.Hello.self, .init(client: clientName))
        return connection
    }

    /// Sends one call and waits for its answer: the result, or the broker's error.
    /// - Parameters:
    ///   - untilAnswered: wait as long as it takes (a login waiting for the user), not the timeout.
    ///   - onSignal: signals that arrive meanwhile (a login's prompt).
    ///   - tick: runs about once a second while waiting.
    public func call<M: BrokerMethod>(_: M.Type, _ arguments: M.Arguments, untilAnswered: Bool = false,
                                      onSignal: ((Signal) -> Void)? = nil, tick: (() -> Void)? = nil) throws(BrokerError) -> M.Result {
        try exchange(M.self, arguments, quickCall: { _ in nil }, quickResult: { _ in nil }, untilAnswered: untilAnswered,
                     onSignal: onSignal, tick: tick)
    }

    /// The same for this package's commands, with the method's call written and its answer read
    /// by hand where it has a quick form (``QuickMethod``): a command is a fresh process each time.
    package func call<M: QuickMethod>(_: M.Type, _ arguments: M.Arguments, untilAnswered: Bool = false,
                                      onSignal: ((Signal) -> Void)? = nil, tick: (() -> Void)? = nil) throws(BrokerError) -> M.Result {
        try exchange(M.self, arguments, quickCall: { M.quickCall(serial: $0, arguments) }, quickResult: M.quickResult,
                     untilAnswered: untilAnswered, onSignal: onSignal, tick: tick)
    }

    private func exchange<M: BrokerMethod>(_: M.Type, _ arguments: M.Arguments, quickCall: (UInt32) -> [UInt8]?,
                                           quickResult: (JSONValue) -> M.Result?, untilAnswered: Bool,
                                           onSignal: ((Signal) -> Void)?, tick: (() -> Void)?) throws(BrokerError) -> M.Result {
        serial = serial == UInt32.max ? 1 : serial + 1
        let mine = serial
        let limit = deadline(in: untilAnswered ? nil : timeout)
        let frame: [UInt8]
        if let quick = quickCall(mine) {
            frame = quick
        } else {
            frame = try WireCodec.encode(Call(serial: mine, method: M.name, args: arguments))
        }
        do {
            try socket.write(frame, deadline: limit)
        } catch {
            throw farewell() ?? error
        }
        while true {
            let payload = try socket.readFrame(deadline: limit, tick: tick)
            if let quick = try Self.quickAnswer(payload, serial: mine, quickResult) { return quick }
            let answer = try WireCodec.decode(Answer<M.Result>.self, from: payload)
            switch answer.type {
            case .reply where answer.serial == mine:
                guard let result = answer.result else { throw BrokerError(.internal, "the broker's reply had no result") }
                return result
            case .error where answer.serial == mine || answer.serial == 0:
                throw BrokerError(answer.error ?? .internal, answer.message ?? "the broker failed without a message")
            case .signal:
                if let signal = answer.signal { onSignal?(signal) }
            default:
                continue // an answer to nothing of ours: not possible on a connection used one call at a time
            }
        }
    }

    /// The answer to call `serial` read without `JSONDecoder` (see ``QuickDecodable``): its
    /// result, or the broker's error thrown; nil when it is anything else, or not plain enough.
    private static func quickAnswer<Result>(_ payload: [UInt8], serial: UInt32, _ quickResult: (JSONValue) -> Result?) throws(BrokerError) -> Result? {
        guard let value = payload.withUnsafeBytes({ JSONValue.parse($0) }), value["serial"]?.number == Double(serial) else { return nil }
        switch value["type"]?.string {
        case "reply": return value["result"].flatMap(quickResult)
        case "error":
            guard let name = value["error"]?.string, let message = value["message"]?.string else { return nil }
            throw BrokerError(ErrorName(rawValue: name), message)
        default: return nil
        }
    }

    /// Why the broker closed the connection, if it said so before closing (e.g. `Busy` when it is
    /// at its connection cap): a write found the connection closed, but its last frame may be
    /// waiting to be read.
    private func farewell() -> BrokerError? {
        guard let payload = try? socket.readFrame(deadline: deadline(in: 0.2)),
              let answer = try? WireCodec.decode(Answer<Methods.Ping.Result>.self, from: payload),
              answer.type == .error, let name = answer.error else { return nil }
        return BrokerError(name, answer.message ?? "the broker closed the connection")
    }

    /// Whatever the broker sends, read in one pass: a command's whole life is a few frames, and
    /// each pass of the decoder costs.
    private struct Answer<Result: Decodable>: Decodable {
        var type: MessageType?
        var serial: UInt32?
        var result: Result?
        var error: ErrorName?
        var message: String?
        var signal: Signal?

        enum CodingKeys: String, CodingKey { case type, serial, result, error, message }

        init(from decoder: Decoder) throws {
            let fields = try decoder.container(keyedBy: CodingKeys.self)
            type = try? fields.decode(MessageType.self, forKey: .type)
            serial = try? fields.decode(UInt32.self, forKey: .serial)
            switch type {
            case .reply?: result = try fields.decode(Result.self, forKey: .result)
            case .error?:
                error = try fields.decode(ErrorName.self, forKey: .error)
                message = try fields.decode(String.self, forKey: .message)
            case .signal?: signal = try? Signal(from: decoder)
            default: break
            }
        }
    }

    /// Closes the connection.
    public func close() {
        socket.shutDown()
    }
}
