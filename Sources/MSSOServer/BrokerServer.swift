import CMSSOSystem
import Glibc
import Logging
import MSSOCore
import MSSOProtocol

/// What any one peer can make the broker hold, and for how long.
public struct ServerLimits: Sendable {
    /// Connections at once, and from any one process (`SO_PEERCRED` pid at connect).
    public var connections = 1024
    public var connectionsPerProcess = 256
    /// Calls of one connection running on the broker at once; reading pauses at the cap.
    public var callsInFlight = 32
    /// Bytes waiting to be written to one connection before its reading pauses (and before a
    /// subscriber that stopped reading is let go).
    public var outputHighWater = 256 * 1024
    /// Bytes waiting to be written to all connections together (``ReplyBudget``): past half of
    /// it, a connection holding more than 16 KiB stops being read; past all of it, the
    /// connections holding the most are closed.
    public var outputBudget = 16 * 1024 * 1024
    /// Bytes of the calls running on the broker, across all connections (``CallBudget``): a call
    /// past it is answered `Busy`.
    public var callBudget = 16 * 1024 * 1024
    /// Connections that may hold more than 4 KiB of an unfinished frame at once.
    public var largeFrames = 64
    /// Nanoseconds: for `hello`, for a frame once begun, and for an idle connection (no call in
    /// flight, not subscribed, nothing to write) or one whose peer stopped reading.
    public var helloTimeout: UInt64 = 10_000_000_000
    public var frameTimeout: UInt64 = 10_000_000_000
    public var idleTimeout: UInt64 = 600_000_000_000

    public init() {}
}

/// The broker's Unix-domain socket: a 0600 socket in a 0700 directory owned by the user, its
/// connections, and the watch on the app registrations.
public final class BrokerServer: @unchecked Sendable {
    public let socketPath: String
    let reactor: Reactor
    let policy: AccessPolicy
    let rules: Rules
    let dispatcher: Dispatcher
    /// The user's answers for registrations with `confirm = true`: give it someone to ask.
    public var confirmations: Confirmations { dispatcher.confirmations }
    let callers: Callers
    let limits: ServerLimits
    let logger: Logger
    /// False when systemd made the socket (socket activation): then it is systemd's to remove.
    private let ownsSocketFile: Bool
    private let listener: Int32
    // Confined to the reactor's thread:
    /// Where every connection reads into (one read at a time, on one thread).
    var scratch = [UInt8](repeating: 0, count: 64 * 1024)
    private var connections: [UInt64: Connection] = [:]
    private var perProcess: [Int32: Int] = [:]
    private var largeFramesHeld = 0
    /// Replies written but not yet read, across all connections.
    private(set) var replies: ReplyBudget
    /// The calls running on the broker (reactor's thread).
    var calls: CallBudget
    private var shedding = false
    private var listenerToken: UInt64 = 0
    private var acceptingAgainAt: UInt64 = 0
    /// Kept open to be given up when descriptors run out, so a refused peer can still be told why.
    private var reserve: Int32 = -1
    private let watcher: RegistrationWatcher?
    /// The sockets made for SSH forwards (`forward`), in `forwards/` beside the broker's socket.
    private(set) lazy var forwards = Forwards(server: self, directory: AdminFiles.parent(of: socketPath) + "/forwards")
    /// True while the registrations are being read again: calls wait, so that a registration
    /// written before a call was sent is in force for it.
    private(set) var reloading = false
    private var ticks = 0

    private init(socketPath: String, listener: Int32, ownsSocketFile: Bool, reactor: Reactor, policy: AccessPolicy,
                 rules: Rules, watcher: RegistrationWatcher?, dispatcher: Dispatcher, limits: ServerLimits, logger: Logger,
                 pidfds: Bool) {
        self.socketPath = socketPath
        self.watcher = watcher
        self.listener = listener
        self.ownsSocketFile = ownsSocketFile
        self.reactor = reactor
        self.policy = policy
        self.rules = rules
        self.dispatcher = dispatcher
        self.callers = Callers(reactor: reactor, rules: rules, ownTools: policy.ownTools, pidfds: pidfds)
        self.limits = limits
        self.logger = logger
        self.replies = ReplyBudget(total: limits.outputBudget, perConnection: limits.outputHighWater)
        self.calls = CallBudget(total: limits.callBudget)
    }

    /// Starts serving `broker`: on `inheritedSocket` (a listening descriptor passed by systemd
    /// socket activation) when given, else on a socket it binds at `socketPath`.
    public static func start(socketPath: String, inheritedSocket: CInt? = nil, broker: Broker, audit: (any AuditTrail)?,
                             ownTools: Set<String> = [], logger: Logger, limits: ServerLimits = ServerLimits()) throws -> BrokerServer {
        let owner = getuid()
        // Watch apps.d, then read it again before anything can call: the registrations were
        // first read before this watch began, and a file written in between has no event.
        let watcher = RegistrationWatcher(rules: broker.rules, logger: logger)
        if watcher != nil { broker.rules.reloadRegistrations() }
        let listener: Int32
        if let inheritedSocket {
            guard cmsso_prepare_listener(inheritedSocket) == 0 else { throw BrokerError(.internal, "the socket systemd passed is unusable") }
            listener = inheritedSocket
        } else {
            try prepare(socketPath: socketPath, owner: owner)
            // Made under the daemon's umask (0077); chmod makes the mode explicit.
            listener = cmsso_unix_listen(socketPath, 256)
            guard listener >= 0 else {
                throw BrokerError(.internal, "cannot listen on \(socketPath): \(String(cString: strerror(-listener)))")
            }
            guard chmod(socketPath, 0o600) == 0 else {
                Glibc.close(listener)
                throw BrokerError(.internal, "cannot set the mode of \(socketPath)")
            }
        }
        // On the listener, so that connections inherit it from their first byte: bytes a client
        // writes before the daemon accepts would otherwise arrive without their sender.
        let passing = cmsso_pass_credentials(listener)
        guard passing >= 0 else {
            Glibc.close(listener)
            throw BrokerError(.internal, "the kernel will not attach senders' credentials to messages (SO_PASSCRED)")
        }
        refuseDescriptors(listener)
        let reactor = try Reactor()
        let policy = AccessPolicy(owner: owner, ownTools: ownTools)
        let dispatcher = Dispatcher(broker: broker, policy: policy, rules: broker.rules, audit: audit, logger: logger)
        let server = BrokerServer(socketPath: socketPath, listener: listener, ownsSocketFile: inheritedSocket == nil, reactor: reactor,
                                  policy: policy, rules: broker.rules, watcher: watcher, dispatcher: dispatcher, limits: limits, logger: logger,
                                  pidfds: cmsso_peer_pidfds() == 1)
        reactor.execute { server.begin() }
        try reactor.start()
        logger.info(inheritedSocket == nil ? "listening" : "listening on the socket systemd passed", metadata: ["socket": "\(socketPath)"])
        return server
    }

    private func begin() {
        reserve = open("/dev/null", O_RDONLY | O_CLOEXEC)
        if let watcher {
            _ = try? reactor.add(watcher.fd, events: CMSSO_READABLE, handler: watcher, urgent: true)
            watcher.onChange = { [unowned self] in reloadRegistrations() }
        }
        listenerToken = (try? reactor.add(listener, events: CMSSO_READABLE, handler: Accepting(self))) ?? 0
        reactor.everyTick { [unowned self] in tick() }
        forwards.removeStale()
    }

    /// Stops accepting, closes every connection and the listener, removes the socket file it made.
    public func close() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            reactor.execute { [self] in
                reactor.remove(listener, token: listenerToken)
                Glibc.close(listener)
                forwards.closeAll()
                for connection in Array(connections.values) { connection.close() }
                done.resume()
            }
        }
        reactor.stop()
        if ownsSocketFile { unlink(socketPath) }
    }

    // MARK: Accepting (on the reactor's thread)

    private final class Accepting: ReactorHandler {
        unowned let server: BrokerServer
        init(_ server: BrokerServer) { self.server = server }
        func ready(_ events: UInt32) { server.acceptSome() }
    }

    fileprivate func acceptSome() {
        for _ in 0..<64 {
            let fd = cmsso_accept(listener)
            if fd == -EAGAIN || fd == -EINTR { return }
            if fd == -EMFILE || fd == -ENFILE {
                // Out of descriptors: tell one waiting peer why with the one kept in reserve, and
                // stop accepting for a moment rather than spin on a listener that stays ready.
                Glibc.close(reserve)
                let refused = cmsso_accept(listener)
                if refused >= 0 { refuse(refused, BrokerError(.busy, "the broker is out of file descriptors; try again in a moment")) }
                reserve = open("/dev/null", O_RDONLY | O_CLOEXEC)
                pauseAccepting()
                logger.warning("out of file descriptors; accepting paused for 100 ms")
                return
            }
            guard fd >= 0 else { return }
            admit(fd)
        }
    }

    /// Takes a connection accepted on the broker's socket, or on a `forward`'s.
    func admit(_ fd: Int32, forward: Forwards.Forward? = nil) {
        var peer = cmsso_credentials()
        guard cmsso_peer_credentials(fd, &peer) == 0 else { return refuse(fd, nil) }
        var kept = false // the pidfd goes to the connection, or is closed here
        defer { if !kept, peer.pidfd >= 0 { Glibc.close(peer.pidfd) } }
        if let forward, let refusal = forwards.refusal(of: peer, on: forward) {
            logger.notice("refused a connection to a forward", metadata: ["host": "\(forward.host)", "uid": "\(peer.uid)", "pid": "\(peer.pid)"])
            return refuse(fd, refusal)
        }
        guard policy.admits(uid: peer.uid) else {
            logger.notice("refused connection", metadata: ["uid": "\(peer.uid)", "pid": "\(peer.pid)"])
            return refuse(fd, policy.refusal(uid: peer.uid))
        }
        guard connections.count < limits.connections else {
            return refuse(fd, BrokerError(.busy, "the broker has \(limits.connections) connections open, its limit; close some and try again"))
        }
        guard perProcess[peer.pid, default: 0] < limits.connectionsPerProcess else {
            return refuse(fd, BrokerError(.busy, "this process has \(limits.connectionsPerProcess) connections to the broker open, the limit for one process"))
        }
        guard cmsso_pass_credentials(fd) >= 0 else { return refuse(fd, nil) }
        Self.refuseDescriptors(fd) // inherited from the listener, unless systemd made this connection before we set it
        // Its /proc directory, checked to be opened while it lived: no later process of its pid's.
        var directory: Int32 = -1
        if peer.pidfd >= 0 {
            directory = cmsso_process_directory(peer.pid)
            if directory >= 0, cmsso_pidfd_alive(peer.pidfd) != 1 {
                Glibc.close(directory)
                directory = -1
            }
        }
        // Its address space, then what it runs: a call it writes after an exec is refused, even its
        // first. (In this order, an exec between the two shows as one since the accept.)
        var image = directory >= 0 && forward == nil ? cmsso_process_image(directory) : -1
        if image < 0 { image = -1 } // not dumpable: its executable alone shows an exec (`remember`)
        let running = directory >= 0 ? ProcessFacts.executable(directory: directory) : nil
        kept = true
        let connection = Connection(fd: fd, connectedPid: peer.pid, connectedPidfd: peer.pidfd, connectedDirectory: directory,
                                    connectedImage: image, running: running, server: self, forward: forward)
        guard let token = try? reactor.add(fd, events: CMSSO_READABLE, handler: connection) else {
            for held in [peer.pidfd, directory, image] where held >= 0 { Glibc.close(held) }
            return refuse(fd, nil)
        }
        connection.token = token
        connections[token] = connection
        perProcess[peer.pid, default: 0] += 1
        if let forward { forwards.accepted(connection, on: forward) }
    }

    /// Tells a refused peer why, in one framed error with serial 0, and hangs up.
    private func refuse(_ fd: Int32, _ error: BrokerError?) {
        if let error {
            let frame = ReplyWriter.error(serial: 0, error)
            _ = frame.withUnsafeBytes { cmsso_send(fd, $0.baseAddress, $0.count) }
        }
        Glibc.close(fd)
    }

    private func pauseAccepting() {
        reactor.modify(listener, token: listenerToken, events: 0)
        acceptingAgainAt = cmsso_monotonic_ns() + 100_000_000
    }

    // MARK: Connections (on the reactor's thread)

    func closed(_ connection: Connection) {
        connections[connection.token] = nil
        if let count = perProcess[connection.connectedPid] {
            perProcess[connection.connectedPid] = count > 1 ? count - 1 : nil
        }
        if connection.subscribed {
            let broker = dispatcher.broker
            Task { await broker.unsubscribe(connection) }
        }
        forwards.closed(connection)
    }

    /// A connection queued `bytes` of replies its peer has not read: past the budget, the
    /// connections holding the most are closed (the caller may be one of them).
    func holdReplies(_ bytes: Int) {
        replies.add(bytes)
        guard replies.exceeded, !shedding else { return }
        shedding = true
        defer { shedding = false }
        let holders = connections.values.map { (holder: $0, bytes: $0.pendingOutput) }
        let victims = replies.victims(holders)
        logger.notice("replies waiting to be read passed the budget; closing the connections holding the most",
                      metadata: ["held": "\(replies.held)", "budget": "\(replies.total)", "closing": "\(victims.count)"])
        for victim in victims { victim.close() }
    }

    /// A connection's peer read `bytes` of its replies, or the connection closed with them.
    func releaseReplies(_ bytes: Int) {
        replies.remove(bytes)
    }

    func claimLargeFrame() -> Bool {
        guard largeFramesHeld < limits.largeFrames else { return false }
        largeFramesHeld += 1
        return true
    }

    func releaseLargeFrame() {
        largeFramesHeld -= 1
        // A connection waiting for a slot gets its chance at the next tick.
    }

    private func tick() {
        let now = cmsso_monotonic_ns()
        if acceptingAgainAt != 0, now >= acceptingAgainAt {
            acceptingAgainAt = 0
            reactor.modify(listener, token: listenerToken, events: CMSSO_READABLE)
        }
        for connection in Array(connections.values) {
            connection.checkDeadlines(now: now)
            connection.updateInterest()
        }
        forwards.tick(now: now)
        ticks += 1
        if ticks % 50 == 0 { // every 5 s
            callers.sweep()
            if watcher?.watchNewDirectories() == true { reloadRegistrations() }
            cmsso_trim_memory()
        }
    }

    // MARK: Registrations

    private func reloadRegistrations() {
        if reloading {
            watcher?.changedAgain = true
            return
        }
        reloading = true
        let (rules, reactor) = (self.rules, self.reactor)
        let started = Workers.shared.run { [self] in
            rules.reloadRegistrations()
            reactor.execute { [self] in reloaded() }
        }
        if !started { reloaded() }
    }

    private func reloaded() {
        reloading = false
        // A directory watched only now may have got files before its watch: read once more.
        if watcher?.watchNewDirectories() == true || watcher?.changedAgain == true {
            watcher?.changedAgain = false
            return reloadRegistrations()
        }
        for connection in Array(connections.values) { connection.rulesReloaded() }
    }

    /// Makes the kernel refuse descriptors sent to `fd` (SO_PASSRIGHTS off, Linux ≥ 6.16): the
    /// sender's sendmsg fails with EPERM. The broker has no use for descriptors; on older
    /// kernels each one passed is closed as it is read (`cmsso_receive`).
    @discardableResult
    static func refuseDescriptors(_ fd: Int32) -> Bool {
        var off: Int32 = 0
        return setsockopt(fd, SOL_SOCKET, 83 /* SO_PASSRIGHTS */, &off, socklen_t(MemoryLayout<Int32>.size)) == 0
    }

    // MARK: The socket file

    /// Makes the socket's directory (0700, the user's), and clears a stale socket left by a crash,
    /// refusing if another daemon still answers there.
    static func prepare(socketPath: String, owner: uid_t) throws {
        let directory = AdminFiles.parent(of: socketPath)
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw BrokerError(.internal, "cannot create \(directory): \(String(cString: strerror(errno)))")
        }
        var info = stat()
        guard lstat(directory, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
            throw BrokerError(.internal, "\(directory) is not a directory")
        }
        guard info.st_uid == owner, info.st_mode & 0o077 == 0 else {
            throw BrokerError(.internal, "\(directory) must belong to uid \(owner) with mode 0700; refusing to listen there")
        }
        guard access(socketPath, F_OK) == 0 else { return }
        let probe = cmsso_unix_connect(socketPath, 1000)
        if probe >= 0 {
            Glibc.close(probe)
            throw BrokerError(.internal, "another mssod already listens on \(socketPath)")
        }
        unlink(socketPath)
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
}
