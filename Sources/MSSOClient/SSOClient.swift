import Dispatch
import FoundationEssentials
@_exported import MSSOProtocol
import Synchronization

/// A connection to the user's msso broker: what an app uses to sign requests and follow the
/// SSO session. Apps never see a password or a refresh token.
///
/// ```swift
/// let sso = try await SSOClient.connect()
/// let headers = try await sso.sign(method: "GET", url: "https://api.example.com/me")
/// for await event in try await sso.events() where event.kind == .loggedOut { dropUserState() }
/// ```
///
/// Errors are ``BrokerError``s; branch on their `name` (`.notLoggedIn`, `.expired`, …) and show
/// their `message` to the user. Safe to share between tasks; one connection serves many calls,
/// each bounded by the client's timeout (logins wait for the user as long as the broker does).
/// A connection the broker closed for being idle is opened again by the next call. Apps that
/// use Foundation's `URLRequest` also link `MSSOClientFoundation`.
///
/// Each verb about one session acts as ``account`` (a group's account, `msso login --account
/// NAME`), unless the call names another; ``status(group:account:)`` lists every account unless
/// the call names one, as `msso status` does.
public final class SSOClient: Sendable {
    private let path: String
    private let clientName: String?
    private let timeout: Double
    /// The account of each group the calls act as: the one given to ``connect(socketPath:clientName:timeout:account:)``,
    /// else `$MSSO_ACCOUNT`; nil: the broker's choice (the app's registration's `account`, else
    /// the group's default account).
    public let account: String?
    private let state = Mutex(State())
    private let reader = DispatchQueue(label: "msso.client.reader")

    private struct State {
        var socket: BrokerSocket?
        var serial: UInt32 = 0
        var waiting: [UInt32: Waiter] = [:]
        var listeners: [AsyncStream<SSOEvent>.Continuation] = []
        /// Why the connection ended, once it has.
        var ended: BrokerError?
        /// The broker closed it for being idle: the next call may open a new one.
        var idle = false
    }

    private struct Waiter {
        var continuation: CheckedContinuation<[UInt8], any Error>
        var onPrompt: (@Sendable (DevicePrompt) -> Void)?
        var onBrowser: (@Sendable (BrowserPrompt) -> Void)?
    }

    private init(path: String, clientName: String?, timeout: Double, account: String?) {
        self.path = path
        self.clientName = clientName
        self.timeout = timeout
        self.account = account
    }

    /// Connects to the broker and agrees on the protocol version.
    /// - Parameters:
    ///   - socketPath: defaults to `$MSSO_SOCKET`, else `$XDG_RUNTIME_DIR/msso/broker.sock`, else
    ///     `/run/user/UID/msso/broker.sock`.
    ///   - timeout: seconds a call may take before it fails with "the broker did not answer".
    ///   - account: the account of each group the calls act as; defaults to `$MSSO_ACCOUNT`, else
    ///     none (the broker's choice).
    public static func connect(socketPath: String? = nil, clientName: String? = nil, timeout: Double = 20,
                               account: String? = nil) async throws -> SSOClient {
        let environment = ProcessInfo.processInfo.environment
        let client = SSOClient(path: socketPath ?? SocketPath.resolve(environment: environment), clientName: clientName, timeout: timeout,
                               account: account ?? environment["MSSO_ACCOUNT"].flatMap { $0.isEmpty ? nil : $0 })
        try await client.open()
        return client
    }

    /// Closes the connection; pending calls fail and event streams end.
    public func close() async {
        let socket = state.withLock { state -> BrokerSocket? in
            state.idle = false
            state.ended = state.ended ?? BrokerError(.brokerUnreachable, "the connection to the msso broker was closed")
            return state.socket
        }
        socket?.shutDown()
    }

    // MARK: Verbs

    /// Logs in with the identity provider's password grant.
    public func login(group: String? = nil, account: String? = nil, username: String, password: String) async throws -> SessionStatus {
        try await call(Methods.Login.self, LoginArguments(group: group, account: account ?? self.account, flow: .password, username: username,
                                                          password: password))
    }

    /// Logs in with the device authorization grant: `prompt` is called once with the URL and code
    /// to show the user; the call returns when they have approved (or throws `LoginDenied`).
    public func loginWithDevice(group: String? = nil, account: String? = nil,
                                prompt: @escaping @Sendable (DevicePrompt) -> Void) async throws -> SessionStatus {
        try await call(Methods.Login.self, LoginArguments(group: group, account: account ?? self.account, flow: .device), onPrompt: prompt)
    }

    /// Logs in through the user's browser (authorization code with PKCE): `open` is called once
    /// with the URL to open on this machine; the call returns when the browser came back.
    public func loginWithBrowser(group: String? = nil, account: String? = nil,
                                 open: @escaping @Sendable (BrowserPrompt) -> Void) async throws -> SessionStatus {
        try await call(Methods.Login.self, LoginArguments(group: group, account: account ?? self.account, flow: .browser), onBrowser: open)
    }

    /// Slides the session window (call it when the user is active).
    public func extend(group: String? = nil, account: String? = nil) async throws -> SessionStatus {
        try await call(Methods.Extend.self, GroupArguments(group: group, account: account ?? self.account))
    }

    /// Ends the session of the group's account for every app. Returns the groups that had one
    /// (`call(Methods.Logout.self, …)` has each session's account too).
    @discardableResult
    public func logout(group: String? = nil, account: String? = nil) async throws -> [String] {
        try await call(Methods.Logout.self, .init(group: group, account: account ?? self.account)).loggedOut
    }

    /// Ends the session of every account of every group.
    @discardableResult
    public func logoutAll() async throws -> [String] {
        try await call(Methods.Logout.self, .init(all: true)).loggedOut
    }

    /// The sessions of every account of every configured group, or of one group's; of one
    /// account when the call names it and the group (not ``account``: as `msso status`, it lists
    /// them all).
    public func status(group: String? = nil, account: String? = nil) async throws -> [SessionStatus] {
        try await call(Methods.Status.self, GroupArguments(group: group, account: account)).groups
    }

    /// One group's session (its ``account``'s, or the named account's).
    public func check(group: String? = nil, account: String? = nil) async throws -> SessionStatus {
        try await call(Methods.Check.self, GroupArguments(group: group, account: account ?? self.account))
    }

    /// The headers that authenticate a request described by its parts: add them to the request.
    /// - Parameters:
    ///   - headers: the headers the request already has (some profiles cover them).
    ///   - body: the request's body (some profiles cover its digest).
    ///   - dpopNonce: a `DPoP-Nonce` the server answered with (retry the request with it).
    ///   - account: the group's account to sign as (default: ``account``).
    public func sign(method: String, url: String, headers: [Header] = [], body: [UInt8]? = nil, group: String? = nil,
                     account: String? = nil, dpopNonce: String? = nil) async throws -> [Header] {
        let digest = body.map { BodyDigest.base64SHA256($0) }
        return try await call(Methods.Sign.self, SignRequest(group: group, account: account ?? self.account, method: method, url: url,
                                                             headers: headers.isEmpty ? nil : headers, bodySHA256: digest,
                                                             dpopNonce: dpopNonce)).headers
    }

    /// The access token itself (bearer groups only), for handing to a program that cannot have
    /// each request signed. `resource`: where the program will send it (needed when the group
    /// names `resources`).
    public func token(group: String? = nil, account: String? = nil, renew: Bool = false, resource: String? = nil) async throws -> Methods.Token.Result {
        try await call(Methods.Token.self, .init(group: group, account: account ?? self.account, renew: renew, resource: resource))
    }

    /// Round trip with no broker state involved (for health checks and benchmarks).
    public func ping(_ data: String = "") async throws -> String {
        try await call(Methods.Ping.self, PingData(data: data)).data
    }

    /// Subscribes to the events of some groups (all the app may use when nil), of ``account``'s
    /// session (or `account`'s) when there is one. The stream ends when the connection closes;
    /// subscribed connections are never closed for being idle.
    public func events(groups: [String]? = nil, account: String? = nil) async throws -> AsyncStream<SSOEvent> {
        let (stream, continuation) = AsyncStream<SSOEvent>.makeStream(bufferingPolicy: .unbounded)
        state.withLock { $0.listeners.append(continuation) }
        _ = try await call(Methods.Subscribe.self, .init(groups: groups, account: account ?? self.account))
        return stream
    }

    // MARK: Calls

    /// Sends one call and waits for its answer. The one generic path every verb takes.
    public func call<M: BrokerMethod>(_: M.Type, _ arguments: M.Arguments,
                                      onPrompt: (@Sendable (DevicePrompt) -> Void)? = nil,
                                      onBrowser: (@Sendable (BrowserPrompt) -> Void)? = nil) async throws -> M.Result {
        if state.withLock({ $0.idle }) { try await open() } // the broker closed it for being idle
        let interactive = onPrompt != nil || onBrowser != nil
        let (serial, socket) = try state.withLock { state throws(BrokerError) -> (UInt32, BrokerSocket) in
            guard let socket = state.socket, state.ended == nil else { throw state.ended ?? BrokerSocket.lost }
            state.serial = state.serial == UInt32.max ? 1 : state.serial + 1
            return (state.serial, socket)
        }
        let frame = try WireCodec.encode(Call(serial: serial, method: M.name, args: arguments))
        let timer = interactive ? nil : Task { [weak self, timeout] in
            try? await Task.sleep(nanoseconds: UInt64(timeout * 1_000_000_000))
            if !Task.isCancelled { self?.fail(serial, BrokerSocket.timedOut(path: socket.path)) }
        }
        defer { timer?.cancel() }
        let answer: [UInt8] = try await withCheckedThrowingContinuation { continuation in
            let ended = state.withLock { state -> BrokerError? in
                if let ended = state.ended { return ended }
                state.waiting[serial] = Waiter(continuation: continuation, onPrompt: onPrompt, onBrowser: onBrowser)
                return nil
            }
            if let ended { return continuation.resume(throwing: ended) }
            do throws(BrokerError) {
                try socket.write(frame, deadline: deadline(in: timeout))
            } catch where error == BrokerSocket.lost {
                // The broker closed the connection: the reader sees the end, with the reason the
                // broker gave before closing (e.g. Busy at its connection cap), and fails this call.
            } catch {
                fail(serial, error)
            }
        }
        if try WireCodec.envelope(of: answer).type == .error {
            throw try WireCodec.decode(ErrorReply.self, from: answer).brokerError
        }
        return try WireCodec.decode(Reply<M.Result>.self, from: answer).result
    }

    private func fail(_ serial: UInt32, _ error: BrokerError) {
        state.withLock { $0.waiting.removeValue(forKey: serial) }?.continuation.resume(throwing: error)
    }

    // MARK: The connection

    /// Connects (again), says hello, and starts reading.
    private func open() async throws {
        let socket = try BrokerSocket.connect(path: path, timeout: timeout)
        let previous = state.withLock { state -> BrokerSocket? in
            defer {
                state.socket = socket
                state.ended = nil
                state.idle = false
            }
            return state.socket
        }
        previous?.shutDown()
        reader.async { [self] in read(socket) }
        do {
            _ = try await call(Methods.Hello.self, .init(client: clientName))
        } catch {
            socket.shutDown()
            throw error
        }
    }

    /// Routes what the broker sends (on the reader's thread): answers to their callers, signals
    /// to listeners or prompt handlers, until the connection ends.
    private func read(_ socket: BrokerSocket) {
        var ended: BrokerError = BrokerSocket.lost
        while true {
            let payload: [UInt8]
            do {
                payload = try socket.readFrame(deadline: nil)
            } catch {
                break
            }
            guard let envelope = try? WireCodec.envelope(of: payload) else { continue }
            switch envelope.type {
            case .reply?, .error?:
                if let serial = envelope.serial, serial != 0 {
                    state.withLock { $0.waiting.removeValue(forKey: serial) }?.continuation.resume(returning: payload)
                } else if let error = try? WireCodec.decode(ErrorReply.self, from: payload) {
                    ended = error.brokerError // why the broker is about to close the connection
                }
            case .signal?:
                guard let signal = try? WireCodec.decode(Signal.self, from: payload) else { continue }
                if signal.signal == .devicePrompt, let serial = signal.serial, let prompt = signal.prompt {
                    state.withLock { $0.waiting[serial]?.onPrompt }?(prompt)
                } else if signal.signal == .browserPrompt, let serial = signal.serial, let browser = signal.browser {
                    state.withLock { $0.waiting[serial]?.onBrowser }?(browser)
                } else if let kind = SSOEvent.Kind(rawValue: signal.signal.rawValue) {
                    let event = SSOEvent(kind: kind, group: signal.group, status: signal.status)
                    for listener in state.withLock({ $0.listeners }) { listener.yield(event) }
                }
            case .call?, nil:
                continue // the broker never calls clients
            }
        }
        let (waiting, listeners) = state.withLock { state in
            guard state.socket === socket else { return ([Waiter](), [AsyncStream<SSOEvent>.Continuation]()) } // replaced already
            state.ended = state.ended ?? ended
            state.idle = ended.name == .timedOut && state.listeners.isEmpty
            defer {
                state.waiting = [:]
                state.listeners = []
            }
            return (Array(state.waiting.values), state.listeners)
        }
        waiting.forEach { $0.continuation.resume(throwing: ended) }
        listeners.forEach { $0.finish() }
    }
}

/// A change of a group's SSO session, pushed by the broker to subscribed apps.
public struct SSOEvent: Sendable, Equatable {
    // BEGIN GENERATED event-kinds: by scripts/generate-names from protocol/names.json; do not edit
    public enum Kind: String, Sendable {
        case loggedIn = "LoggedIn"
        case extended = "Extended"
        case loggedOut = "LoggedOut"
        case expiring = "Expiring"
        case expired = "Expired"
    }
    // END GENERATED event-kinds
    public var kind: Kind
    public var group: String
    /// The group's session after the event.
    public var status: SessionStatus?
}
