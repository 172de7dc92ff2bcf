import CMSSOSystem
import FoundationEssentials
import Glibc
import Logging
import MSSOCore
import MSSOProtocol

/// One client connection: its bytes in and out, its deadlines, and whom each of its calls came
/// from. Lives on the reactor's thread; other threads reach it through ``post(_:)`` and
/// ``deliver(_:)``.
///
/// Bounded in every way a peer could push: calls in flight (reading pauses at the cap), bytes
/// waiting to be written (reading pauses past the high-water mark, or past 16 KiB once the
/// server's ``ReplyBudget`` is half used; past the whole budget the biggest holders are closed;
/// a subscriber that stops reading is let go), a frame's bytes (a frame once begun must arrive within the frame
/// timeout; only a few connections at a time may hold a large one), and time (hello, idleness).
final class Connection: ReactorHandler, SignalSink, @unchecked Sendable {
    let fd: Int32
    var token: UInt64 = 0
    /// The process that connected (`SO_PEERCRED`), the only one whose calls are served here.
    let connectedPid: Int32
    /// Its pidfd (`SO_PEERPIDFD`; -1 on kernels without it), held while the connection is open:
    /// each call is checked to come from the pid it names while that process is alive.
    let connectedPidfd: Int32
    /// Its /proc directory, opened while it lived (-1: none): see ``Sender/processDirectory``.
    let connectedDirectory: Int32
    /// Its address space when accepted (-1: none, as for a process that is not dumpable): an
    /// exec ends it, so each call shows whether the process exec'd since, even an exec away and
    /// back to the same file between two calls, which its executable cannot show.
    let connectedImage: Int32
    /// The connecting process's kernel number (see ``Sender/process``; 0 when unknown).
    let connectedProcess: UInt64
    /// The SSH forward whose socket accepted this connection: its calls are the forward's
    /// host's, and must all be written by the process that connected (the local ssh).
    let forward: Forwards.Forward?
    /// Whether this connection asked for a forward (`forward`): it ends the forward by closing,
    /// so it is never closed for idleness.
    var holdsForward = false
    private unowned let server: BrokerServer

    /// Bytes read that do not yet make a whole frame, and who wrote them.
    private var input = InboundFrames()
    private var holdsLargeFrame = false
    /// Replies the peer has not read yet, counted in the server's ``ReplyBudget`` too.
    private var outbox = OutputQueue()
    private var lastWrite: UInt64
    private var lastActivity: UInt64
    private let connectedAt: UInt64
    private(set) var subscribed = false
    private var inFlight = 0
    /// Calls of the current read waiting for their sender to be identified (or for the rules to
    /// reload), with the sender, and since when.
    private var held: (calls: [Decoded], sender: Sender, since: UInt64)?
    /// Calls read while as many as may be were in flight: taken up as answers come.
    private var waiting: (calls: [Decoded], sender: Sender)?
    /// Calls a closed connection cancels: logins waiting for the user.
    private var cancelOnClose: [UInt32: Task<Void, Never>] = [:]
    private var interest: UInt32 = CMSSO_READABLE
    /// Its last read took all it was allowed: it waits behind quieter peers (``Reactor``).
    private(set) var busy = false
    private(set) var closed = false

    typealias Decoded = InboundFrames.Decoded

    /// Takes `fd`, `connectedPidfd`, `connectedDirectory` and `connectedImage` (closed with the
    /// connection). `running`: its executable when accepted, if known.
    init(fd: Int32, connectedPid: Int32, connectedPidfd: Int32 = -1, connectedDirectory: Int32 = -1,
         connectedImage: Int32 = -1, running: ProcessFacts.FileIdentity? = nil, server: BrokerServer,
         forward: Forwards.Forward? = nil) {
        checks = CallChecks(connectedPid: connectedPid, running: running)
        self.fd = fd
        self.connectedPid = connectedPid
        self.connectedPidfd = connectedPidfd
        self.connectedDirectory = connectedDirectory
        self.connectedImage = connectedImage
        self.connectedProcess = Sender.process(of: connectedPidfd)
        self.forward = forward
        self.server = server
        let now = cmsso_monotonic_ns()
        connectedAt = now
        lastActivity = now
        lastWrite = now
    }

    // MARK: Events

    func ready(_ events: UInt32) {
        if events & CMSSO_WRITABLE != 0 { flush() }
        // (Reported while reading was still wanted: a busy connection's events wait in the
        // reactor's backlog, and the reply budget may have paused it since.)
        if events & CMSSO_READABLE != 0, interest & CMSSO_READABLE != 0, !closed {
            receive()
        } else if events & (CMSSO_ERROR | CMSSO_HANGUP) != 0 {
            close()
        }
    }

    private func receive() {
        let room = input.room(holdsLargeFrame: holdsLargeFrame, scratch: server.scratch.count)
        guard room > 0 else { return updateInterest() } // waits for a slot (tried again on every tick)
        var credentials = cmsso_credentials()
        let count = server.scratch.withUnsafeMutableBytes { cmsso_receive(fd, $0.baseAddress, min(room, $0.count), &credentials) }
        if count == -Int(EAGAIN) || count == -Int(EINTR) { return }
        guard count > 0 else { return close() } // end of stream, or an error
        busy = count == room && room <= InboundFrames.fairShare // (not the rest of one long frame)
        // The connection's process, or another (refused in `step`): see ``Sender``.
        let own = checks.isConnections(credentials.pid)
        let sender = Sender(uid: credentials.uid, gid: credentials.gid, pid: credentials.pid, pidfd: own ? connectedPidfd : -1,
                            processDirectory: own ? connectedDirectory : -1, process: own ? connectedProcess : 0)
        guard server.policy.admits(uid: sender.uid) else {
            // The socket was handed to another user's process: that process is refused.
            server.logger.notice("refused a call from another uid", metadata: ["uid": "\(sender.uid)", "pid": "\(sender.pid)"])
            send(ReplyWriter.error(serial: 0, server.policy.refusal(uid: sender.uid)))
            return closeAfterWriting()
        }
        lastActivity = cmsso_monotonic_ns()
        let calls: [Decoded]
        switch input.take(server.scratch[..<count], from: (sender.pid, sender.uid, sender.process), now: cmsso_monotonic_ns) {
        case .tooLarge(let announced):
            send(ReplyWriter.error(serial: 0, BrokerError(.badRequest, FramingError.tooLarge(announced).description)))
            return closeAfterWriting()
        case .frames(let frames):
            calls = frames
        }
        if !input.needsLargeFrameSlot, holdsLargeFrame {
            releaseLargeFrame()
            input.compact()
        }
        claimLargeFrameIfNeeded()
        handle(calls, from: sender)
        updateInterest()
    }

    /// Answers calls in order; stops (and holds the rest) at one whose sender must first be
    /// identified.
    private func handle(_ calls: [Decoded], from sender: Sender) {
        for (index, decoded) in calls.enumerated() {
            guard !closed, !closing else { break }
            if inFlight >= server.limits.callsInFlight {
                // The cap holds within one read too (found by an outside test: hundreds of calls
                // pipelined in one read each became a task): the rest waits for an answer.
                waiting = (Array(calls[index...]), sender)
                return
            }
            callsBehind = calls.count - index - 1
            switch step(decoded, sender: sender) {
            case .done:
                continue
            case .wait:
                held = (Array(calls[index...]), sender, cmsso_monotonic_ns())
                return
            }
        }
    }

    private enum Step { case done, wait }

    /// The per-call checks and hello's (``CallChecks``), and what they remember.
    private var checks: CallChecks
    var greeted: Bool { checks.greeted }

    /// Whole calls read behind the one being answered, in the same read: see ``greet``.
    private var callsBehind = 0

    private func step(_ decoded: Decoded, sender: Sender) -> Step {
        let serial: UInt32, method: String, arguments: CallArguments, frame: Int
        switch checks.check(decoded, senderPid: sender.pid, probes: self) {
        case .refuse(let serial, let error):
            send(ReplyWriter.error(serial: serial, error))
            return .done
        case .unknown(let serial, let method):
            server.dispatcher.refuseUnknown(method, serial: serial, sender: sender, connection: self)
            return .done
        case .echo(let serial, let data):
            send(ReplyWriter.pingReply(serial: serial, data: data.data))
            return .done
        case .call(let number, let name, let value, let bytes):
            (serial, method, arguments, frame) = (number, name, value, bytes)
        }
        if server.reloading { return .wait }
        let caller: Caller
        if let forward {
            // Judged as the forward's host, within its `[forward."HOST"]` table as the configuration
            // now has it, never as the process that wrote it (the local ssh, which carries whatever
            // runs on the remote host). (The pid is the connection's: alive now, its process wrote it.)
            guard sender.uid == server.policy.owner, sender.pidfd < 0 || cmsso_pidfd_alive(sender.pidfd) == 1 else {
                send(ReplyWriter.error(serial: serial, BrokerError(.forbidden, "only the ssh process that connected may write on a forward's connection")))
                return .done
            }
            let configuration = server.rules.configuration
            caller = Caller(uid: sender.uid, pid: sender.pid, role: .forwarded, app: AppIdentity(executable: nil, onHost: false),
                            registrations: [], host: forward.host,
                            forward: configuration.policy.forwarding ? configuration.forwards[forward.host] : nil,
                            forwardSession: forward.path)
        } else {
            var app: AppIdentity?
            if server.policy.role(uid: sender.uid, app: nil) != .root {
                switch server.callers.identity(of: sender, then: { [weak self] identity in self?.identified(identity) }) {
                case .known(let identity, let executable):
                    if let refusal = checks.sameProgram(running: executable) {
                        send(ReplyWriter.error(serial: serial, refusal))
                        return .done
                    }
                    app = identity
                case .pending: return .wait
                case .gone:
                    send(ReplyWriter.error(serial: serial, CallChecks.senderGone))
                    return .done
                case .busy:
                    send(ReplyWriter.error(serial: serial, BrokerError(.busy, "the broker is identifying too many new processes at once; try again in a moment")))
                    return .done
                }
            }
            caller = Caller(uid: sender.uid, pid: sender.pid, role: server.policy.role(uid: sender.uid, app: app),
                            app: app ?? AppIdentity(executable: nil),
                            registrations: app.map { server.rules.entitlements.matches($0) } ?? [])
        }
        // What the call holds while it runs, within the budget of all connections' calls; but a
        // small call on a connection with nothing running goes whatever the budget (at most one
        // per connection, 16 KiB each): a flood fills the budget, and everyone else is still served.
        let charged = inFlight == 0 && frame <= CallBudget.leastPerCall ? 0 : CallBudget.charge(frame)
        guard charged == 0 || server.calls.take(charged) else {
            send(ReplyWriter.error(serial: serial, BrokerError(.busy, "mssod holds \(server.calls.held / 1024) KiB of calls still running (waiting for an identity provider, a refresh, or your answer to a confirmation), its limit; try again when they have finished")))
            return .done
        }
        switch server.dispatcher.dispatch(serial, method: method, arguments, caller: caller, connection: self) {
        case .now(let reply):
            server.calls.release(charged)
            send(reply)
        case .later:
            inFlight += 1
            holding[serial, default: []].append(charged)
        case .answered:
            server.calls.release(charged)
        }
        return .done
    }

    /// The bytes each call running on the broker holds, by serial (a peer may reuse one).
    private var holding: [UInt32: [Int]] = [:]

    /// Gives back what the call `serial` held (its answer came, or the connection closed).
    private func release(_ serial: UInt32) {
        guard let size = holding[serial]?.popLast() else { return }
        if holding[serial]!.isEmpty { holding[serial] = nil }
        server.calls.release(size)
    }

    /// `forward`: a socket for a remote host, held by this connection (made here, on the
    /// reactor's thread, where sockets are made and watched), for its process.
    func openForward(_ serial: UInt32, _ asked: Methods.Forward.Arguments, _ caller: Caller) throws(BrokerError) -> String {
        try server.forwards.open(host: asked.host, for: self, requester: Sender(uid: caller.uid, gid: 0, pid: connectedPid, pidfd: connectedPidfd))
    }

    func greet(_ serial: UInt32, _ hello: Methods.Hello.Arguments, _ caller: Caller) {
        switch checks.greet(hello, nothingBehind: callsBehind == 0 && input.count == 0 && cmsso_unread_bytes(fd) == 0) {
        case .greeted:
            let peer = PeerDescription(uid: caller.uid, pid: caller.pid, executable: caller.app.executable, host: caller.host)
            send(WireCodec.frame(Reply(serial: serial, result: Methods.Hello.Result(version: protocolVersion, daemon: "mssod \(brokerVersion)", peer: peer)), serial: serial))
        case .refused(let error):
            send(ReplyWriter.error(serial: serial, error))
        case .refusedClosing(let error):
            send(ReplyWriter.error(serial: serial, error))
            closeAfterWriting()
        }
    }

    /// The sender of the held calls is identified (or could not be): carry on with them.
    private func identified(_ identity: AppIdentity?) {
        guard held != nil, !closed else { return }
        guard identity != nil else {
            return refuseHeld(BrokerError(.forbidden, "the process that sent this call could not be identified (it exited, or changed while it was looked at)"))
        }
        let waiting = held!
        held = nil
        handle(waiting.calls, from: waiting.sender)
        updateInterest()
    }

    /// Answers every held call with `error` (pings still get their echo).
    private func refuseHeld(_ error: BrokerError) {
        guard let waiting = held else { return }
        held = nil
        for decoded in waiting.calls {
            switch decoded {
            case .malformed(let serial, let problem): send(ReplyWriter.error(serial: serial, problem))
            case .call(let call):
                if case .success(.ping(let data)) = call.arguments, let serial = call.serial, greeted {
                    send(ReplyWriter.pingReply(serial: serial, data: data.data))
                } else {
                    send(ReplyWriter.error(serial: call.serial ?? 0, error))
                }
            }
        }
        updateInterest()
    }

    /// The rules finished reloading: held calls go on.
    func rulesReloaded() {
        guard let waiting = held, !closed else { return }
        held = nil
        handle(waiting.calls, from: waiting.sender)
        updateInterest()
    }

    // MARK: Answers from other threads

    /// Writes a frame from any thread (a prompt signal while a login waits).
    func post(_ frame: [UInt8]) {
        server.reactor.execute { [self] in
            guard !closed else { return }
            send(frame)
            updateInterest()
        }
    }

    /// The answer to a call that ran on the broker.
    func complete(_ reply: [UInt8], serial: UInt32) {
        server.reactor.execute { [self] in
            inFlight -= 1
            release(serial)
            cancelOnClose[serial] = nil
            guard !closed else { return }
            lastActivity = cmsso_monotonic_ns()
            send(reply)
            if let rest = waiting, held == nil {
                waiting = nil
                handle(rest.calls, from: rest.sender)
            }
            updateInterest()
        }
    }

    /// Tracks a call that the connection's end should cancel (a login waiting for the user).
    func cancelWhenClosed(_ serial: UInt32, _ task: Task<Void, Never>) {
        cancelOnClose[serial] = task
    }

    /// The broker now sends this connection signals (called from the broker's side). A
    /// connection that closed meanwhile is taken off the broker's list again.
    func subscribedByBroker() {
        server.reactor.execute { [self] in
            if closed {
                let broker = server.dispatcher.broker
                Task { await broker.unsubscribe(self) }
            } else {
                subscribed = true
            }
        }
    }

    /// A signal for a subscriber. A subscriber that stopped reading is let go once its backlog
    /// passes the high-water mark: it may reconnect and subscribe again.
    func deliver(_ signal: Signal) {
        let frame = WireCodec.frame(signal, serial: 0)
        server.reactor.execute { [self] in
            guard !closed else { return }
            guard pendingOutput < server.limits.outputHighWater else { return close() }
            send(frame)
            updateInterest()
        }
    }

    // MARK: Writing

    var pendingOutput: Int { outbox.pending }

    func send(_ frame: [UInt8]) {
        guard !closed else { return }
        var written = 0
        if pendingOutput == 0 {
            written = frame.withUnsafeBytes { cmsso_send(fd, $0.baseAddress, $0.count) }
            if written == frame.count { return lastWrite = cmsso_monotonic_ns() }
            if written < 0 && written != -Int(EAGAIN) { return close() }
        }
        // The peer's buffer is full: the rest waits here, and counts against the budget of all.
        server.holdReplies(outbox.enqueue(frame, after: max(written, 0)))
    }

    private func flush() {
        let (written, failed) = outbox.drain(again: -Int(EAGAIN)) { bytes in cmsso_send(fd, bytes.baseAddress, bytes.count) }
        if written > 0 {
            server.releaseReplies(written)
            lastWrite = cmsso_monotonic_ns()
        }
        if failed { return close() }
        if pendingOutput == 0, closing { return close() }
        updateInterest()
    }

    private var closing = false

    /// Closes once what is queued is written (or at the next deadline).
    private func closeAfterWriting() {
        closing = true
        if pendingOutput == 0 { close() } else { updateInterest() }
    }

    /// Reads only while the connection can take more: not closing, no calls held, fewer calls in
    /// flight than the cap, the peer reading its answers, and a large frame only with a slot.
    func updateInterest() {
        guard !closed else { return }
        claimLargeFrameIfNeeded() // a connection waiting for a slot gets one as soon as one is free
        var wanted: UInt32 = 0
        let canRead = !closing && held == nil && waiting == nil && inFlight < server.limits.callsInFlight
            && server.replies.mayRead(holding: pendingOutput) && (!input.needsLargeFrameSlot || holdsLargeFrame)
        if canRead { wanted |= CMSSO_READABLE }
        if pendingOutput > 0 { wanted |= CMSSO_WRITABLE }
        guard wanted != interest else { return }
        interest = wanted
        server.reactor.modify(fd, token: token, events: wanted)
    }

    // MARK: Deadlines and closing

    /// Checked on every tick: hello, a frame begun, idleness, a peer that reads nothing.
    func checkDeadlines(now: UInt64) {
        guard !closed else { return }
        let limits = server.limits
        if !greeted, now - connectedAt > limits.helloTimeout {
            return timeOut(BrokerError(.badRequest, "no hello received in time; closing"))
        }
        if input.frameStarted != 0, now - input.frameStarted > limits.frameTimeout {
            return timeOut(BrokerError(.timedOut, "a frame was begun but not finished within \(limits.frameTimeout / 1_000_000_000) s; closing"))
        }
        if let waiting = held, now - waiting.since > Callers.resolutionTimeoutNanoseconds {
            refuseHeld(BrokerError(.busy, "the calling process could not be identified in time; try again"))
        }
        if pendingOutput > 0, now - lastWrite > limits.idleTimeout { return close() } // reads nothing: drop it
        if greeted, !subscribed, !holdsForward, inFlight == 0, held == nil, pendingOutput == 0, now - lastActivity > limits.idleTimeout {
            return timeOut(BrokerError(.timedOut, "the connection was idle for \(limits.idleTimeout / 1_000_000_000) s; closing (reconnect, or subscribe to stay connected)"))
        }
    }

    /// Says why, if the peer's buffer has room for it, and hangs up.
    private func timeOut(_ error: BrokerError) {
        send(ReplyWriter.error(serial: 0, error))
        close()
    }

    func close() {
        guard !closed else { return }
        closed = true
        server.reactor.remove(fd, token: token)
        Glibc.close(fd)
        if connectedPidfd >= 0 { Glibc.close(connectedPidfd) }
        if connectedDirectory >= 0 { Glibc.close(connectedDirectory) }
        if connectedImage >= 0 { Glibc.close(connectedImage) }
        held = nil
        waiting = nil
        input.clear()
        server.releaseReplies(pendingOutput)
        outbox.clear()
        releaseLargeFrame()
        for task in cancelOnClose.values { task.cancel() }
        cancelOnClose = [:]
        server.closed(self)
    }

    /// An unfinished frame that fills the small room needs a large-frame slot to be read further.
    private func claimLargeFrameIfNeeded() {
        if input.needsLargeFrameSlot, !holdsLargeFrame, !closed {
            holdsLargeFrame = server.claimLargeFrame()
        }
    }

    private func releaseLargeFrame() {
        if holdsLargeFrame { server.releaseLargeFrame() }
        holdsLargeFrame = false
    }
}

/// The daemon's version, reported by `hello`: the upstream version of dist/debian/changelog's top
/// entry, written here too (VersionTests and Tests/e2e/test_readme.py hold the two together).
public let brokerVersion = "0.2.0"

extension Connection: CallChecks.Probes {
    func sameImage() -> Bool? { connectedImage < 0 ? nil : cmsso_same_image(connectedImage) == 1 } // (none on a forward)
    func ended() -> Bool { connectedPidfd >= 0 && cmsso_pidfd_alive(connectedPidfd) != 1 }
}
