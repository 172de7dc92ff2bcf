import CMSSOSystem
import FoundationEssentials
import Glibc
import MSSOProtocol
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// The browser login's redirect target (RFC 8252 §7.3): an HTTP listener on 127.0.0.1 that waits
/// for the one request to its path carrying this login's `state`, and hands over its query (`code`
/// or `error`). A request with another state (another login's, or a local process's trying to
/// abort this one) gets an error page and changes nothing: the login keeps waiting.
///
/// Every user of the machine can reach 127.0.0.1, so what the listener holds is bounded: a
/// connection from a process of another user is closed at once (the kernel's socket table says
/// whose it is: ``peerIsThisUser(_:)``); at most ``maximumConnections`` of the user's own are open
/// at once, each for at most ``connectionTimeout``; and when the login ends (its answer, a
/// refusal, its timeout, its caller gone) the listener and every connection it accepted close.
final class LoopbackRedirect: Sendable {
    /// Connections open at once: a browser opens one or two for the redirect (and its favicon).
    static let maximumConnections = 16
    /// How long a connection may stay open: a browser sends its request as soon as it connects.
    static let connectionTimeout = TimeAmount.seconds(10)

    private let channel: Channel
    private let result: EventLoopPromise<[String: String]>
    private let accepted: Accepted
    let port: Int

    private init(channel: Channel, result: EventLoopPromise<[String: String]>, accepted: Accepted, port: Int) {
        self.channel = channel
        self.result = result
        self.accepted = accepted
        self.port = port
    }

    /// The connections open now, until the login ends.
    final class Accepted: Sendable {
        private let state = Mutex<(open: [ObjectIdentifier: Channel], ended: Bool)>(([:], false))

        /// Takes `channel` in when the login has not ended and fewer than the cap are open.
        func admit(_ channel: Channel) -> Bool {
            state.withLock { state in
                guard !state.ended, state.open.count < LoopbackRedirect.maximumConnections else { return false }
                state.open[ObjectIdentifier(channel)] = channel
                return true
            }
        }

        func remove(_ channel: Channel) {
            _ = state.withLock { $0.open.removeValue(forKey: ObjectIdentifier(channel)) }
        }

        var count: Int { state.withLock { $0.open.count } }

        /// Closes every connection, and any accepted from now on.
        func end() {
            let open = state.withLock { state in
                state.ended = true
                defer { state.open = [:] }
                return Array(state.open.values)
            }
            for channel in open { channel.close(promise: nil) }
        }
    }

    private struct Refused: Error {}

    /// Listens on 127.0.0.1:`port` (0: any free port) for a request to `path` with `state`.
    static func start(port: Int, path: String, state: String) async throws(BrokerError) -> LoopbackRedirect {
        // One loop accepts and judges: a refused connection is closed before the next is accepted,
        // so another user's flood holds a handful of descriptors, not as many as the accept outruns.
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let result = loop.makePromise(of: [String: String].self)
        let accepted = Accepted()
        do {
            let channel = try await ServerBootstrap(group: loop, childGroup: loop)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(.maxMessagesPerRead, value: 1)
                .childChannelInitializer { channel in
                    // Refused: closed by the bootstrap before it is ever read.
                    guard peerIsThisUser(channel), accepted.admit(channel) else {
                        return channel.eventLoop.makeFailedFuture(Refused())
                    }
                    let deadline = channel.eventLoop.scheduleTask(in: connectionTimeout) { channel.close(promise: nil) }
                    channel.closeFuture.whenComplete { _ in
                        deadline.cancel()
                        accepted.remove(channel)
                    }
                    return channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                        try channel.pipeline.syncOperations.addHandler(CallbackHandler(path: path, state: state, result: result))
                    }
                }
                .bind(host: "127.0.0.1", port: port).get()
            return LoopbackRedirect(channel: channel, result: result, accepted: accepted, port: channel.localAddress?.port ?? port)
        } catch {
            result.fail(error)
            throw BrokerError(.idpUnavailable, "cannot listen on 127.0.0.1:\(port) for the browser's redirect: another program holds the port (another browser login, or any program of any user of this machine); close it, or register a redirect_uri with another port at the identity provider")
        }
    }

    /// Whether the process at the other end of `channel` runs as this process's user. TCP says
    /// nothing of its peer, but both ends of a loopback connection are this machine's sockets, and
    /// the kernel's socket table names the owner of each (sock_diag, else /proc/net/tcp). When
    /// neither can be read, the connection is let in: the cap and the deadline still bound it.
    static func peerIsThisUser(_ channel: Channel) -> Bool {
        guard case .v4(let remote) = channel.remoteAddress, case .v4(let local) = channel.localAddress else { return false }
        var uid: UInt32 = 0
        let found = cmsso_loopback_peer_uid(UInt32(bigEndian: remote.address.sin_addr.s_addr), UInt16(bigEndian: remote.address.sin_port),
                                            UInt32(bigEndian: local.address.sin_addr.s_addr), UInt16(bigEndian: local.address.sin_port), &uid)
        if found == 0 { return uid == getuid() }
        return found != -ENOENT // gone (or closing): nothing to answer
    }

    /// Connections open now (tests).
    var openConnections: Int { accepted.count }

    /// The redirect's query, or nil when the browser did not come back in time or the waiting
    /// task was cancelled (its caller has gone). Either way the listener and its connections are
    /// closed when it returns: the login has its answer, or will have none.
    func wait(timeout: Double) async -> [String: String]? {
        let deadline = channel.eventLoop.scheduleTask(in: .milliseconds(Int64(min(timeout, 86400) * 1000))) {
            self.result.fail(BrokerError(.loginDenied, "timed out"))
        }
        defer { deadline.cancel() }
        let answer = await withTaskCancellationHandler {
            try? await result.futureResult.get()
        } onCancel: {
            result.fail(CancellationError())
        }
        await close()
        return answer
    }

    /// Stops listening and closes every connection (again is harmless).
    func close() async {
        result.fail(BrokerError(.loginDenied, "closed"))
        accepted.end()
        try? await channel.close()
    }
}

/// Answers this login's redirect with a page the user can read; another state with an error page
/// that changes nothing; anything else with 404.
private final class CallbackHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    private let path: String
    private let state: String
    private let result: EventLoopPromise<[String: String]>

    init(path: String, state: String, result: EventLoopPromise<[String: String]>) {
        self.path = path
        self.state = state
        self.result = result
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let head) = unwrapInboundIn(data) else { return }
        let components = URLComponents(string: head.uri)
        guard components?.path == path else { return respond(context, .notFound, "Not found.") }
        var query: [String: String] = [:]
        for item in (components?.queryItems ?? []).prefix(32) { query[item.name] = item.value ?? "" }
        guard query["state"] == state else {
            return respond(context, .badRequest, "This answer belongs to another login attempt, so it was ignored. If you are logging in, use the link msso showed you.")
        }
        respond(context, .ok, query["error"] == nil ? "Login complete: you can close this window." : "Login refused: you can close this window.")
        result.succeed(query)
    }

    private func respond(_ context: ChannelHandlerContext, _ status: HTTPResponseStatus, _ text: String) {
        let body = "<!doctype html><meta charset=utf-8><title>msso</title><p>\(text)</p>\n"
        var headers = HTTPHeaders([("Content-Type", "text/html; charset=utf-8"), ("Content-Length", "\(body.utf8.count)"),
                                   ("Connection", "close"), ("Cache-Control", "no-store")])
        headers.replaceOrAdd(name: "Referrer-Policy", value: "no-referrer")
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: body)))), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }
}
