import Logging
import MSSOCore
import MSSOProtocol
import NIOCore

/// One client connection, as the broker sees it: who it is and how to reach it with signals.
final class Connection: SignalSink {
    let channel: Channel
    let peer: Peer

    init(channel: Channel, peer: Peer) {
        self.channel = channel
        self.peer = peer
    }

    /// A subscriber that stops reading must not slow the broker or anyone else: once its
    /// backlog passes the high-water mark, it is disconnected (it may reconnect and resubscribe).
    func deliver(_ signal: Signal) {
        guard channel.isWritable else {
            channel.close(promise: nil)
            return
        }
        send(signal)
    }

    func send(_ message: some Encodable) {
        channel.writeAndFlush(Dispatcher.encode(message), promise: nil)
    }
}

/// Reads call frames of one connection: the `hello` handshake on the event loop (so no call can
/// overtake it), everything else dispatched concurrently and answered by serial.
final class ConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let connection: Connection
    private let dispatcher: Dispatcher
    private let helloTimeout: TimeAmount
    private var greeted = false
    private var helloDeadline: Scheduled<Void>?

    init(connection: Connection, dispatcher: Dispatcher, helloTimeout: TimeAmount) {
        self.connection = connection
        self.dispatcher = dispatcher
        self.helloTimeout = helloTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // A client that connects and never says hello would hold a descriptor forever.
        let connection = self.connection
        helloDeadline = context.eventLoop.scheduleTask(in: helloTimeout) {
            connection.send(ErrorReply(serial: 0, error: BrokerError(.badRequest, "no hello received in time; closing")))
            connection.channel.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let payload = unwrapInboundIn(data)
        let envelope: Envelope
        do {
            envelope = try WireCodec.envelope(of: payload)
        } catch {
            return connection.send(ErrorReply(serial: 0, error: error))
        }
        guard envelope.type == .call, let serial = envelope.serial, let method = envelope.method else {
            return connection.send(ErrorReply(serial: envelope.serial ?? 0, error: BrokerError(.badRequest, "expected a call: {\"type\": \"call\", \"serial\", \"method\", \"args\"}")))
        }
        guard serial != 0 else {
            return connection.send(ErrorReply(serial: 0, error: BrokerError(.badRequest, "serials run from 1 to 4294967295; 0 means \"no call\"")))
        }
        guard greeted else { return greet(payload, method: method, serial: serial) }
        let (dispatcher, connection) = (self.dispatcher, self.connection)
        Task {
            let reply = await dispatcher.answer(payload, method: method, serial: serial, connection: connection)
            connection.channel.writeAndFlush(reply, promise: nil)
        }
    }

    private func greet(_ payload: ByteBuffer, method: String, serial: UInt32) {
        guard method == Methods.Hello.name else {
            return connection.send(ErrorReply(serial: serial, error: BrokerError(.badRequest, "the first call must be hello")))
        }
        do {
            let call = try WireCodec.decode(Call<Methods.Hello.Arguments>.self, from: payload)
            guard call.args.version == protocolVersion else {
                throw BrokerError(.unsupportedVersion, "this mssod speaks protocol version \(protocolVersion), not \(call.args.version); update the client or the daemon")
            }
            greeted = true
            helloDeadline?.cancel()
            connection.send(Reply(serial: serial, result: Methods.Hello.Result(
                version: protocolVersion, daemon: "mssod \(brokerVersion)", peer: connection.peer.description)))
        } catch {
            connection.send(ErrorReply(serial: serial, error: error as? BrokerError ?? BrokerError(.badRequest, "malformed hello")))
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // A frame over the cap leaves the stream out of step: say why, then hang up.
        if let framing = error as? FramingError {
            connection.send(ErrorReply(serial: 0, error: BrokerError(.badRequest, framing.description)))
        }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        helloDeadline?.cancel()
        let (broker, connection) = (dispatcher.broker, self.connection)
        Task { await broker.unsubscribe(connection) }
        context.fireChannelInactive()
    }
}

/// The daemon's version, reported by `hello`.
public let brokerVersion = "0.1.0"
