import CMSSOSystem
import FoundationEssentials
import Glibc
import MSSOCore
import MSSOProtocol

/// The sockets made for SSH forwards (`forward`, which `msso ssh HOST` calls and hands to
/// `ssh -R`): through one, a remote host reaches the broker for the length of one SSH session.
///
/// - A call that arrives on a forward's socket is judged as "host H", within its
///   `[forward."H"]` table (``ForwardRule``), never as the local ssh process that writes its
///   bytes: that process speaks for whatever runs on the remote host.
/// - A forward lives while the connection that asked for it stays open (`msso ssh` holds it while
///   ssh runs): then its socket is closed and unlinked, and every connection it accepted closed.
/// - Its socket is 0600 in a 0700 directory of the user beside the broker's socket, with a random
///   name; it accepts only the process that asked for the forward or a descendant of it (the ssh
///   that `msso ssh` started), of the user's uid: another program of the user, which the broker
///   would judge as itself on the main socket, cannot pass itself off as the remote host there.
/// - Bounded: ``maximumForwards`` at once, ``maximumConnections`` connections each (counted in
///   the server's caps too).
///
/// Lives on the reactor's thread, like the server's connections.
final class Forwards {
    static let maximumForwards = 16
    static let maximumConnections = 64
    /// How many parents up the process that asked for a forward may be from the one that connects.
    static let ancestry = 8

    /// One forward: its host, its listening socket, and the connections it accepted.
    final class Forward: ReactorHandler {
        let host: String
        let path: String
        fileprivate let listener: Int32
        fileprivate var token: UInt64 = 0
        /// The connection that asked for it: the forward ends with it.
        fileprivate unowned let holder: Connection
        /// The process that asked (its pid, and a pidfd that tells it from a later one of that pid).
        fileprivate let requester: Int32
        fileprivate var requesterPidfd: Int32
        fileprivate var accepted: [UInt64: Connection] = [:]
        fileprivate var pausedUntil: UInt64 = 0
        fileprivate unowned let forwards: Forwards

        fileprivate init(host: String, path: String, listener: Int32, holder: Connection, requester: Int32, requesterPidfd: Int32,
                         forwards: Forwards) {
            (self.host, self.path, self.listener, self.holder) = (host, path, listener, holder)
            (self.requester, self.requesterPidfd, self.forwards) = (requester, requesterPidfd, forwards)
        }

        func ready(_ events: UInt32) { forwards.acceptSome(on: self) }
    }

    private unowned let server: BrokerServer
    /// Where the forwards' sockets are made: `forwards/` beside the broker's socket.
    let directory: String
    private var open: [ObjectIdentifier: Forward] = [:]

    init(server: BrokerServer, directory: String) {
        self.server = server
        self.directory = directory
    }

    var count: Int { open.count }

    // MARK: Opening (the `forward` call, on the reactor's thread)

    /// Makes a socket for `host`, held by `connection`, for the process `requester` and its
    /// descendants; returns its path. Refuses when the administrator turned forwarding off, when
    /// no `[forward."HOST"]` table names the host, and at the cap.
    func open(host name: String, for connection: Connection, requester: Sender) throws(BrokerError) -> String {
        guard let host = ForwardHost.normalized(name) else {
            throw BrokerError(.badRequest, "\"\(name.prefix(64))\" is not a host name: give the host as you give it to ssh, without a user name (letters, digits, `.`, `-`, `_`, `:`)")
        }
        let configuration = server.rules.configuration
        guard configuration.policy.forwarding else {
            throw BrokerError(.forbidden, "your administrator has turned SSH forwarding off ([policy] forwarding = false in \(configuration.systemDirectory)/config.toml), so msso forwards the broker to no host")
        }
        guard let rule = configuration.forwards[host] else {
            let example = configuration.groups.keys.sorted().first ?? "GROUP"
            throw BrokerError(.forbidden, "no [forward.\"\(host)\"] table names host \(host), so msso does not forward the broker to it; add one to \(configuration.userDirectory)/config.toml, e.g. [forward.\"\(host)\"] with groups = [\"\(example)\"] (see msso.toml(5)), then reload mssod (`systemctl --user reload msso`)")
        }
        // A forward whose table gives no group would answer every call of the host with a refusal
        // (found by an outside test: a user's table naming only the administrator's groups, which
        // it may not, opened one).
        guard rule.groups.contains(where: { configuration.groups[$0] != nil }) else {
            throw BrokerError(.forbidden, "the [forward.\"\(host)\"] table (\(rule.source)) gives host \(host) no access group this broker has (a user's table may not name the administrator's groups: `msso doctor` says which it dropped), so msso does not forward the broker to it; name a group of yours in its `groups`, then reload mssod")
        }
        guard open.count < Self.maximumForwards else {
            throw BrokerError(.busy, "\(Self.maximumForwards) SSH forwards are open already, the limit; end an msso ssh session and try again")
        }
        try prepareDirectory()
        let path = directory + "/" + Self.randomName() + ".sock"
        let listener = cmsso_unix_listen(path, 16)
        guard listener >= 0 else {
            throw BrokerError(.internal, "cannot listen on \(path) for the forward: \(String(cString: strerror(-listener)))")
        }
        // The file is the user's (the daemon's umask is 0077); chmod says so whatever the umask.
        guard chmod(path, 0o600) == 0, cmsso_pass_credentials(listener) >= 0 else {
            Glibc.close(listener)
            unlink(path)
            throw BrokerError(.internal, "cannot prepare the forward's socket \(path)")
        }
        BrokerServer.refuseDescriptors(listener)
        let pidfd = requester.pidfd >= 0 ? dup(requester.pidfd) : -1
        let forward = Forward(host: host, path: path, listener: listener, holder: connection, requester: requester.pid,
                              requesterPidfd: pidfd, forwards: self)
        do {
            forward.token = try server.reactor.add(listener, events: CMSSO_READABLE, handler: forward)
        } catch {
            if pidfd >= 0 { Glibc.close(pidfd) }
            Glibc.close(listener)
            unlink(path)
            throw BrokerError(.internal, "cannot watch the forward's socket: \(error)")
        }
        open[ObjectIdentifier(forward)] = forward
        connection.holdsForward = true
        server.logger.info("forward opened", metadata: ["host": "\(host)", "socket": "\(path)"])
        return path
    }

    /// The directory of the forwards' sockets: made 0700, and it must be the user's alone.
    private func prepareDirectory() throws(BrokerError) {
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw BrokerError(.internal, "cannot create \(directory): \(String(cString: strerror(errno)))")
        }
        var info = stat()
        guard lstat(directory, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR, info.st_uid == server.policy.owner,
              info.st_mode & 0o077 == 0 else {
            throw BrokerError(.internal, "\(directory) must be a directory of uid \(server.policy.owner) with mode 0700; remove it, and mssod makes it again")
        }
    }

    /// 24 hex digits from the system's random source: a name nobody can guess in advance.
    private static func randomName() -> String { Hex.random(digits: 24) }

    /// Removes sockets a daemon that did not shut down cleanly left (nothing listens on them).
    func removeStale() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for name in names where name.hasSuffix(".sock") { unlink(directory + "/" + name) }
    }

    // MARK: Accepting

    fileprivate func acceptSome(on forward: Forward) {
        for _ in 0..<16 {
            let fd = cmsso_accept(forward.listener)
            if fd == -EAGAIN || fd == -EINTR { return }
            guard fd >= 0 else {
                // Out of descriptors, most likely: wait a moment rather than spin on a ready listener.
                server.reactor.modify(forward.listener, token: forward.token, events: 0)
                forward.pausedUntil = cmsso_monotonic_ns() + 100_000_000
                return
            }
            server.admit(fd, forward: forward)
        }
    }

    /// Why a peer that connected to `forward`'s socket is refused, if it is: it must run as the
    /// user, and be the process that asked for the forward or a descendant of it.
    func refusal(of peer: cmsso_credentials, on forward: Forward) -> BrokerError? {
        guard peer.uid == server.policy.owner else {
            return BrokerError(.forbidden, "this socket carries an SSH forward of uid \(server.policy.owner); uid \(peer.uid) may not use it")
        }
        guard forward.accepted.count < Self.maximumConnections else {
            return BrokerError(.busy, "the forward to \(forward.host) has \(Self.maximumConnections) connections open, its limit")
        }
        // The parents are read, then both ends checked alive: neither pid named another process meanwhile.
        var current = peer.pid
        var found = current == forward.requester
        for _ in 0..<Self.ancestry where !found {
            guard let parent = Callers.parent(of: current), parent > 1 else { break }
            current = parent
            found = current == forward.requester
        }
        let alive = (forward.requesterPidfd < 0 || cmsso_pidfd_alive(forward.requesterPidfd) == 1)
            && (peer.pidfd < 0 || cmsso_pidfd_alive(peer.pidfd) == 1)
        guard found, alive else {
            return BrokerError(.forbidden, "this socket carries the SSH forward to \(forward.host) for the msso ssh that asked for it and the ssh it runs; connect to the broker's own socket instead")
        }
        return nil
    }

    func accepted(_ connection: Connection, on forward: Forward) {
        forward.accepted[connection.token] = connection
    }

    // MARK: Closing

    /// A connection closed: if it held forwards, they end (their sockets closed and unlinked,
    /// their connections closed); if a forward accepted it, it no longer counts there.
    func closed(_ connection: Connection) {
        if let forward = connection.forward { forward.accepted[connection.token] = nil }
        guard connection.holdsForward else { return }
        for forward in open.values where forward.holder === connection { close(forward) }
    }

    private func close(_ forward: Forward) {
        guard open.removeValue(forKey: ObjectIdentifier(forward)) != nil else { return }
        server.reactor.remove(forward.listener, token: forward.token)
        Glibc.close(forward.listener)
        unlink(forward.path)
        if forward.requesterPidfd >= 0 { Glibc.close(forward.requesterPidfd) }
        forward.requesterPidfd = -1
        for connection in Array(forward.accepted.values) { connection.close() }
        forward.accepted = [:]
        server.logger.info("forward closed", metadata: ["host": "\(forward.host)"])
    }

    /// Every forward ends (the daemon shuts down).
    func closeAll() {
        for forward in Array(open.values) { close(forward) }
    }

    /// Listeners paused for want of descriptors accept again.
    func tick(now: UInt64) {
        for forward in open.values where forward.pausedUntil != 0 && now >= forward.pausedUntil {
            forward.pausedUntil = 0
            server.reactor.modify(forward.listener, token: forward.token, events: CMSSO_READABLE)
        }
    }
}
