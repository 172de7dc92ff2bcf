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
        serial = serial == UInt32.max ? 1 : serial + 1
        let mine = serial
        let limit = deadline(in: untilAnswered ? nil : timeout)
        try socket.write(try WireCodec.encode(Call(serial: mine, method: M.name, args: arguments)), deadline: limit)
        while true {
            let payload = try socket.readFrame(deadline: limit, tick: tick)
            let envelope = try WireCodec.envelope(of: payload)
            switch envelope.type {
            case .reply where envelope.serial == mine:
                return try WireCodec.decode(Reply<M.Result>.self, from: payload).result
            case .error where envelope.serial == mine || envelope.serial == 0:
                throw try WireCodec.decode(ErrorReply.self, from: payload).brokerError
            case .signal:
                if let onSignal, let signal = try? WireCodec.decode(Signal.self, from: payload) { onSignal(signal) }
            default:
                continue // an answer to nothing of ours: not possible on a connection used one call at a time
            }
        }
    }

    /// Closes the connection.
    public func close() {
        socket.shutDown()
    }
}
