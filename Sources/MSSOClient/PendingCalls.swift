import MSSOProtocol
import NIOConcurrencyHelpers
import NIOCore

/// The calls of one connection waiting for their replies, and the event listeners.
final class PendingCalls: Sendable {
    private struct State {
        var serial: UInt32 = 0
        var waiting: [UInt32: CheckedContinuation<ByteBuffer, Error>] = [:]
        var prompts: [UInt32: @Sendable (DevicePrompt) -> Void] = [:]
        var browsers: [UInt32: @Sendable (BrowserPrompt) -> Void] = [:]
        var listeners: [AsyncStream<SSOEvent>.Continuation] = []
        /// Set once the connection is gone: later calls fail at once with it.
        var closed: BrokerError?
    }
    private let state = NIOLockedValueBox(State())

    func nextSerial() -> UInt32 {
        state.withLockedValue {
            $0.serial &+= 1
            if $0.serial == 0 { $0.serial = 1 } // 0 is the daemon's "no call" serial
            return $0.serial
        }
    }

    func register(_ serial: UInt32, _ continuation: CheckedContinuation<ByteBuffer, Error>,
                  onPrompt: (@Sendable (DevicePrompt) -> Void)?, onBrowser: (@Sendable (BrowserPrompt) -> Void)?) {
        let closed: BrokerError? = state.withLockedValue {
            if let closed = $0.closed { return closed }
            $0.waiting[serial] = continuation
            $0.prompts[serial] = onPrompt
            $0.browsers[serial] = onBrowser
            return nil
        }
        if let closed { continuation.resume(throwing: closed) }
    }

    func complete(_ serial: UInt32, with payload: ByteBuffer) {
        let continuation = state.withLockedValue {
            $0.prompts[serial] = nil
            $0.browsers[serial] = nil
            return $0.waiting.removeValue(forKey: serial)
        }
        continuation?.resume(returning: payload)
    }

    func fail(_ serial: UInt32) {
        let (continuation, error) = state.withLockedValue {
            ($0.waiting.removeValue(forKey: serial), $0.closed ?? Self.lost)
        }
        continuation?.resume(throwing: error)
    }

    func prompt(_ serial: UInt32, _ prompt: DevicePrompt) {
        state.withLockedValue { $0.prompts[serial] }?(prompt)
    }

    func browser(_ serial: UInt32, _ prompt: BrowserPrompt) {
        state.withLockedValue { $0.browsers[serial] }?(prompt)
    }

    func addListener(_ continuation: AsyncStream<SSOEvent>.Continuation) {
        state.withLockedValue { $0.listeners.append(continuation) }
    }

    func broadcast(_ event: SSOEvent) {
        for listener in state.withLockedValue({ $0.listeners }) { listener.yield(event) }
    }

    /// The daemon's connection-level error (serial 0), kept as the reason for what follows.
    func noteConnectionError(_ error: BrokerError) {
        state.withLockedValue { if $0.closed == nil { $0.closed = error } }
    }

    /// The connection closed: fail every waiting call and end every event stream.
    func closeAll() {
        let (waiting, listeners, error) = state.withLockedValue { state -> ([CheckedContinuation<ByteBuffer, Error>], [AsyncStream<SSOEvent>.Continuation], BrokerError) in
            let error = state.closed ?? Self.lost
            state.closed = error
            defer {
                state.waiting = [:]
                state.prompts = [:]
                state.browsers = [:]
                state.listeners = []
            }
            return (Array(state.waiting.values), state.listeners, error)
        }
        waiting.forEach { $0.resume(throwing: error) }
        listeners.forEach { $0.finish() }
    }

    static let lost = BrokerError(.brokerUnreachable, "the connection to the msso broker was lost; is mssod still running?")
}

/// Routes inbound frames: replies to their callers, signals to listeners or prompt handlers.
final class ClientHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    private let calls: PendingCalls

    init(calls: PendingCalls) { self.calls = calls }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let payload = unwrapInboundIn(data)
        guard let envelope = try? WireCodec.envelope(of: payload) else { return }
        switch envelope.type {
        case nil:
            break
        case .reply, .error:
            if let serial = envelope.serial, serial != 0 {
                calls.complete(serial, with: payload)
            } else if let error = try? WireCodec.decode(ErrorReply.self, from: payload) {
                calls.noteConnectionError(error.brokerError)
            }
        case .signal:
            guard let signal = try? WireCodec.decode(Signal.self, from: payload) else { return }
            if signal.signal == .devicePrompt, let serial = signal.serial, let prompt = signal.prompt {
                calls.prompt(serial, prompt)
            } else if signal.signal == .browserPrompt, let serial = signal.serial, let browser = signal.browser {
                calls.browser(serial, browser)
            } else if let kind = SSOEvent.Kind(rawValue: signal.signal.rawValue) {
                calls.broadcast(SSOEvent(kind: kind, group: signal.group, status: signal.status))
            }
        case .call:
            break // the daemon never calls clients
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        calls.closeAll()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }
}
