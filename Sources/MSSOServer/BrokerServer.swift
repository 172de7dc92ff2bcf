import Foundation
import Logging
import MSSOAudit
import MSSOCore
import MSSOProtocol
import NIOCore
import NIOPosix

/// The broker's Unix-domain socket: a 0600 socket in a 0700 directory owned by the user.
public final class BrokerServer: Sendable {
    private let channel: Channel
    public let socketPath: String
    /// False when systemd made the socket (socket activation): then it is systemd's to remove.
    private let ownsSocketFile: Bool

    private init(channel: Channel, socketPath: String, ownsSocketFile: Bool) {
        self.channel = channel
        self.socketPath = socketPath
        self.ownsSocketFile = ownsSocketFile
    }

    /// Starts serving `broker`: on `inheritedSocket` (a listening descriptor passed by systemd
    /// socket activation) when given, else on a socket it binds at `socketPath`.
    public static func start(socketPath: String, inheritedSocket: CInt? = nil, broker: Broker, rules: Rules,
                             audit: AuditLog?, ownTools: Set<String> = [], logger: Logger,
                             helloTimeout: TimeAmount = .seconds(10),
                             group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton) async throws -> BrokerServer {
        let owner = getuid()
        if inheritedSocket == nil { try prepare(socketPath: socketPath, owner: owner) }
        let policy = AccessPolicy(owner: owner, ownTools: ownTools)
        let dispatcher = Dispatcher(broker: broker, policy: policy, rules: rules, audit: audit, logger: logger)
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 256)
            // Out of descriptors, accept() fails at once and forever: back off instead of spinning.
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(AcceptBackoffHandler()) }
            }
            // Bounds what a client that stops reading can make the daemon hold (see Connection.deliver).
            .childChannelOption(.writeBufferWaterMark, value: .init(low: 64 * 1024, high: 256 * 1024))
            .childChannelInitializer { channel in
                rules.refreshIfChanged()
                return Peer.of(channel).flatMap { peer in
                    let connection = Connection(channel: channel, peer: peer)
                    guard policy.admits(peer) else {
                        logger.notice("refused connection", metadata: ["uid": "\(peer.uid)", "pid": "\(peer.pid)"])
                        return channel.eventLoop.makeCompletedFuture {
                            try channel.pipeline.syncOperations.addHandlers([
                                MessageToByteHandler(FrameEncoder()), Refusal(error: policy.refusal(for: peer)),
                            ])
                        }
                    }
                    logger.debug("connection", metadata: ["uid": "\(peer.uid)", "pid": "\(peer.pid)", "exe": "\(peer.executable ?? "?")"])
                    return channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandlers([
                            ByteToMessageHandler(FrameDecoder()),
                            MessageToByteHandler(FrameEncoder()),
                            ConnectionHandler(connection: connection, dispatcher: dispatcher, helloTimeout: helloTimeout),
                        ])
                    }
                }
            }
        if let inheritedSocket {
            let channel = try await bootstrap.withBoundSocket(inheritedSocket).get()
            logger.info("listening on the socket systemd passed", metadata: ["socket": "\(socketPath)"])
            return BrokerServer(channel: channel, socketPath: socketPath, ownsSocketFile: false)
        }
        // The socket is created under the daemon's umask (0077); chmod makes the mode explicit.
        let channel = try await bootstrap.bind(unixDomainSocketPath: socketPath).get()
        guard chmod(socketPath, 0o600) == 0 else {
            try? await channel.close()
            throw BrokerError(.internal, "cannot set the mode of \(socketPath)")
        }
        logger.info("listening", metadata: ["socket": "\(socketPath)"])
        return BrokerServer(channel: channel, socketPath: socketPath, ownsSocketFile: true)
    }

    /// Stops accepting, closes the listener and removes the socket file it made.
    public func close() async {
        try? await channel.close()
        if ownsSocketFile { unlink(socketPath) }
    }

    /// The listening socket systemd passed (sd_listen_fds(3): LISTEN_PID is us, LISTEN_FDS ≥ 1,
    /// the first descriptor is 3), if any. Clears the variables so children do not inherit them.
    public static func socketFromSystemd(environment: [String: String]) -> CInt? {
        defer {
            unsetenv("LISTEN_PID")
            unsetenv("LISTEN_FDS")
            unsetenv("LISTEN_FDNAMES")
        }
        guard environment["LISTEN_PID"].flatMap(Int32.init) == getpid(),
              let count = environment["LISTEN_FDS"].flatMap(Int.init), count >= 1 else { return nil }
        return 3
    }

    /// Makes the socket's directory (0700, the user's), and clears a stale socket left by a crash,
    /// refusing if another daemon still answers there.
    static func prepare(socketPath: String, owner: uid_t) throws {
        let directory = (socketPath as NSString).deletingLastPathComponent
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw BrokerError(.internal, "cannot create \(directory): \(String(cString: strerror(errno)))")
        }
        var info = stat()
        guard stat(directory, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
            throw BrokerError(.internal, "\(directory) is not a directory")
        }
        guard info.st_uid == owner, info.st_mode & 0o077 == 0 else {
            throw BrokerError(.internal, "\(directory) must belong to uid \(owner) with mode 0700; refusing to listen there")
        }
        guard access(socketPath, F_OK) == 0 else { return }
        if socketAnswers(socketPath) {
            throw BrokerError(.internal, "another mssod already listens on \(socketPath)")
        }
        unlink(socketPath)
    }

    private static func socketAnswers(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
            }
        }
    }
}

/// Tells a refused peer why, in one framed error, then hangs up.
final class Refusal: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    private let error: BrokerError

    init(error: BrokerError) { self.error = error }

    func channelActive(context: ChannelHandlerContext) {
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(Dispatcher.encode(ErrorReply(serial: 0, error: error)))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {} // nothing a refused peer says is read
}
