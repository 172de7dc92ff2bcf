import FoundationEssentials
import MSSOProtocol
import NIOCore
import NIOHTTP1
import NIOPosix

/// The browser login's redirect target (RFC 8252 §7.3): an HTTP listener on 127.0.0.1 that waits
/// for the one request to its path carrying this login's `state`, and hands over its query (`code`
/// or `error`). A request with another state (another login's, or a local process's trying to
/// abort this one) gets an error page and changes nothing: the login keeps waiting.
final class LoopbackRedirect: Sendable {
    private let channel: Channel
    private let result: EventLoopPromise<[String: String]>
    let port: Int

    private init(channel: Channel, result: EventLoopPromise<[String: String]>, port: Int) {
        self.channel = channel
        self.result = result
        self.port = port
    }

    /// Listens on 127.0.0.1:`port` (0: any free port) for a request to `path` with `state`.
    static func start(port: Int, path: String, state: String) async throws(BrokerError) -> LoopbackRedirect {
        let group = MultiThreadedEventLoopGroup.singleton
        let result = group.next().makePromise(of: [String: String].self)
        do {
            let channel = try await ServerBootstrap(group: group)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(.maxMessagesPerRead, value: 1)
                .childChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                        try channel.pipeline.syncOperations.addHandler(CallbackHandler(path: path, state: state, result: result))
                    }
                }
                .bind(host: "127.0.0.1", port: port).get()
            return LoopbackRedirect(channel: channel, result: result, port: channel.localAddress?.port ?? port)
        } catch {
            result.fail(error)
            throw BrokerError(.idpUnavailable, "cannot listen on 127.0.0.1:\(port) for the browser's redirect (is another browser login waiting?)")
        }
    }

    /// The redirect's query, or nil when the browser did not come back in time or the waiting
    /// task was cancelled (its caller has gone).
    func wait(timeout: Double) async -> [String: String]? {
        let deadline = channel.eventLoop.scheduleTask(in: .milliseconds(Int64(min(timeout, 86400) * 1000))) {
            self.result.fail(BrokerError(.loginDenied, "timed out"))
        }
        defer { deadline.cancel() }
        return await withTaskCancellationHandler {
            try? await result.futureResult.get()
        } onCancel: {
            result.fail(CancellationError())
        }
    }

    func close() async {
        result.fail(BrokerError(.loginDenied, "closed"))
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
