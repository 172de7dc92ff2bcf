import Crypto
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@_exported import MSSOProtocol
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A connection to the user's msso broker: what an app uses to sign requests and follow the
/// SSO session. Apps never see a password or a refresh token.
///
/// ```swift
/// let sso = try await SSOClient.connect()
/// var request = URLRequest(url: URL(string: "https://api.example.com/me")!)
/// try await sso.sign(&request)
/// for await event in try await sso.events() where event.kind == .loggedOut { dropUserState() }
/// ```
///
/// Errors are ``BrokerError``s; branch on their `name` (`.notLoggedIn`, `.expired`, …) and show
/// their `message` to the user. Safe to share between tasks; one connection serves many calls.
public final class SSOClient: Sendable {
    private let channel: Channel
    private let calls: PendingCalls

    private init(channel: Channel, calls: PendingCalls) {
        self.channel = channel
        self.calls = calls
    }

    /// Connects to the broker and agrees on the protocol version.
    /// - Parameter socketPath: defaults to `$MSSO_SOCKET`, else `$XDG_RUNTIME_DIR/msso/broker.sock`.
    public static func connect(socketPath: String? = nil, clientName: String? = nil) async throws -> SSOClient {
        guard let path = socketPath ?? SocketPath.resolve(environment: ProcessInfo.processInfo.environment) else {
            throw BrokerError(.brokerUnreachable, "cannot locate the msso broker: XDG_RUNTIME_DIR and MSSO_SOCKET are unset")
        }
        let calls = PendingCalls()
        let channel: Channel
        do {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandlers([
                            ByteToMessageHandler(FrameDecoder()),
                            MessageToByteHandler(FrameEncoder()),
                            ClientHandler(calls: calls),
                        ])
                    }
                }
                .connect(unixDomainSocketPath: path).get()
        } catch {
            throw BrokerError(.brokerUnreachable, "the msso broker is not running (nothing answers on \(path)); start it with `systemctl --user start msso.socket` or `mssod`")
        }
        let client = SSOClient(channel: channel, calls: calls)
        do {
            _ = try await client.call(Methods.Hello.self, .init(client: clientName))
        } catch {
            await client.close()
            throw error
        }
        return client
    }

    /// Closes the connection; pending calls fail and event streams end.
    public func close() async {
        try? await channel.close()
    }

    // MARK: Verbs

    /// Logs in with the identity provider's password grant.
    public func login(group: String? = nil, username: String, password: String) async throws -> SessionStatus {
        try await call(Methods.Login.self, LoginArguments(group: group, flow: .password, username: username, password: password))
    }

    /// Logs in with the device authorization grant: `prompt` is called once with the URL and code
    /// to show the user; the call returns when they have approved (or throws `LoginDenied`).
    public func loginWithDevice(group: String? = nil, prompt: @escaping @Sendable (DevicePrompt) -> Void) async throws -> SessionStatus {
        try await call(Methods.Login.self, LoginArguments(group: group, flow: .device), onPrompt: prompt)
    }

    /// Logs in through the user's browser (authorization code with PKCE): `open` is called once
    /// with the URL to open on this machine; the call returns when the browser came back.
    public func loginWithBrowser(group: String? = nil, open: @escaping @Sendable (BrowserPrompt) -> Void) async throws -> SessionStatus {
        try await call(Methods.Login.self, LoginArguments(group: group, flow: .browser), onBrowser: open)
    }

    /// Slides the session window (call it when the user is active).
    public func extend(group: String? = nil) async throws -> SessionStatus {
        try await call(Methods.Extend.self, GroupArguments(group: group))
    }

    /// Ends the group's session for every app. Returns the groups that had one.
    @discardableResult
    public func logout(group: String? = nil) async throws -> [String] {
        try await call(Methods.Logout.self, .init(group: group)).loggedOut
    }

    /// Ends every group's session.
    @discardableResult
    public func logoutAll() async throws -> [String] {
        try await call(Methods.Logout.self, .init(all: true)).loggedOut
    }

    /// Every configured group's session, or one group's.
    public func status(group: String? = nil) async throws -> [SessionStatus] {
        try await call(Methods.Status.self, GroupArguments(group: group)).groups
    }

    /// One group's session.
    public func check(group: String? = nil) async throws -> SessionStatus {
        try await call(Methods.Check.self, GroupArguments(group: group))
    }

    /// The headers that authenticate a request described by its parts.
    /// - Parameter dpopNonce: a `DPoP-Nonce` the server answered with (retry the request with it).
    public func sign(method: String, url: String, headers: [Header] = [], body: Data? = nil, group: String? = nil,
                     dpopNonce: String? = nil) async throws -> [Header] {
        let digest = body.map { Data(SHA256.hash(data: $0)).base64EncodedString() }
        return try await call(Methods.Sign.self, SignRequest(group: group, method: method, url: url, headers: headers.isEmpty ? nil : headers,
                                                             bodySHA256: digest, dpopNonce: dpopNonce)).headers
    }

    /// Adds the authenticating headers to `request` in place.
    public func sign(_ request: inout URLRequest, group: String? = nil) async throws {
        guard let url = request.url?.absoluteString else {
            throw BrokerError(.badRequest, "the request has no URL")
        }
        let existing = (request.allHTTPHeaderFields ?? [:]).sorted { $0.key < $1.key }.map { Header($0.key, $0.value) }
        let headers = try await sign(method: request.httpMethod ?? "GET", url: url, headers: existing, body: request.httpBody, group: group)
        for header in headers { request.setValue(header.value, forHTTPHeaderField: header.name) }
    }

    /// Round trip with no broker state involved (for health checks and benchmarks).
    public func ping(_ data: String = "") async throws -> String {
        try await call(Methods.Ping.self, PingData(data: data)).data
    }

    /// Subscribes to the events of some groups (all configured ones when nil). The stream ends
    /// when the connection closes.
    public func events(groups: [String]? = nil) async throws -> AsyncStream<SSOEvent> {
        let (stream, continuation) = AsyncStream<SSOEvent>.makeStream(bufferingPolicy: .unbounded)
        calls.addListener(continuation)
        _ = try await call(Methods.Subscribe.self, .init(groups: groups))
        return stream
    }

    // MARK: Calls

    /// Sends one call and waits for its reply. The one generic path every verb takes.
    public func call<M: BrokerMethod>(_: M.Type, _ arguments: M.Arguments,
                                      onPrompt: (@Sendable (DevicePrompt) -> Void)? = nil,
                                      onBrowser: (@Sendable (BrowserPrompt) -> Void)? = nil) async throws -> M.Result {
        let serial = calls.nextSerial()
        let payload = try WireCodec.encode(Call(serial: serial, method: M.name, args: arguments), allocator: channel.allocator)
        let answer: ByteBuffer = try await withCheckedThrowingContinuation { continuation in
            calls.register(serial, continuation, onPrompt: onPrompt, onBrowser: onBrowser)
            channel.writeAndFlush(payload).whenFailure { [calls] _ in calls.fail(serial) }
        }
        if try WireCodec.envelope(of: answer).type == .error {
            throw try WireCodec.decode(ErrorReply.self, from: answer).brokerError
        }
        return try WireCodec.decode(Reply<M.Result>.self, from: answer).result
    }
}

/// A change of a group's SSO session, pushed by the broker to subscribed apps.
public struct SSOEvent: Sendable, Equatable {
    public enum Kind: String, Sendable {
        case loggedIn = "LoggedIn", extended = "Extended", loggedOut = "LoggedOut", expiring = "Expiring", expired = "Expired"
    }
    public var kind: Kind
    public var group: String
    /// The group's session after the event.
    public var status: SessionStatus?
}
