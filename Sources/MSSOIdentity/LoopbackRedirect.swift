import CMSSOSystem
import FoundationEssentials
import Glibc
import MSSOCore
import MSSOProtocol
import Synchronization

/// The browser login's redirect target (RFC 8252 §7.3): an HTTP listener on 127.0.0.1 that waits
/// for the one request to its path carrying this login's `state`, and hands over its query (`code`
/// or `error`). A request with another state (another login's, or a local process's trying to
/// abort this one) gets an error page and changes nothing: the login keeps waiting.
///
/// Every user of the machine can reach 127.0.0.1, so what the listener holds is bounded: a
/// connection from a process of another user is closed at once (the kernel's socket table says
/// whose it is: ``peerIsThisUser(remote:local:)``); at most ``maximumConnections`` of the user's
/// own are open at once, each for at most ``connectionTimeout`` and ``maximumRequest`` bytes; and
/// when the login ends (its answer, a refusal, its timeout, its caller gone) the listener and
/// every connection it accepted close.
///
/// One pool thread polls the listener and its connections: it accepts one connection at a
/// time and judges it before the next, so another user's flood holds a handful of descriptors,
/// not as many as the accept outruns.
final class LoopbackRedirect: Sendable {
    /// Connections open at once: a browser opens one or two for the redirect (and its favicon).
    static let maximumConnections = 16
    /// How long a connection may stay open: a browser sends its request as soon as it connects.
    static let connectionTimeout = 10.0
    /// The most a request's head may hold: a browser's redirect, its query and headers, a few KB.
    static let maximumRequest = 16 * 1024

    let port: Int
    private let listener: Int32
    /// Written to end the listening thread's poll.
    private let wake: Int32
    private let shared = Mutex(Shared())

    private struct Shared {
        var answer: [String: String]?
        var waiter: CheckedContinuation<[String: String]?, Never>?
        var ended = false
        var exited = false
        var exitWaiters: [CheckedContinuation<Void, Never>] = []
        var open = 0
    }

    private init(port: Int, listener: Int32, wake: Int32) {
        self.port = port
        self.listener = listener
        self.wake = wake
    }

    /// Listens on 127.0.0.1:`port` (0: any free port) for a request to `path` with `state`.
    static func start(port: Int, path: String, state: String) async throws(BrokerError) -> LoopbackRedirect {
        let refused = BrokerError(.idpUnavailable, "cannot listen on 127.0.0.1:\(port) for the browser's redirect: another program holds the port (another browser login, or any program of any user of this machine); close it, or register a redirect_uri with another port at the identity provider")
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        guard listener >= 0 else { throw refused }
        var one: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(clamping: port).bigEndian)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        var local = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        let wake = cmsso_eventfd()
        guard bound == 0, named == 0, listen(listener, 256) == 0, wake >= 0 else {
            Glibc.close(listener)
            if wake >= 0 { Glibc.close(wake) }
            throw refused
        }
        let redirect = LoopbackRedirect(port: Int(UInt16(bigEndian: local.sin_port)), listener: listener, wake: wake)
        guard Workers.shared.run({ redirect.serve(path: path, state: state) }) else {
            Glibc.close(listener) // and `wake` with `redirect`
            throw BrokerError(.idpUnavailable, "cannot start a thread to wait for the browser's redirect: the system is out of threads; try again")
        }
        return redirect
    }

    /// Connections open now (tests).
    var openConnections: Int { shared.withLock { $0.open } }

    /// The redirect's query, or nil when the browser did not come back in time or the waiting
    /// task was cancelled (its caller has gone). Either way the listener and its connections are
    /// closed when it returns: the login has its answer, or will have none. One waiter only; a
    /// listener started is ended by this or by ``close()`` (its thread holds it until then).
    func wait(timeout: Double) async -> [String: String]? {
        let timer = Task { [self] in
            try? await Task.sleep(nanoseconds: UInt64(min(max(timeout, 0), 86400) * 1_000_000_000))
            if !Task.isCancelled { end(with: nil) }
        }
        let answer = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<[String: String]?, Never>) in
                let now: [String: String]?? = shared.withLock { shared in
                    guard !shared.ended else { return .some(shared.answer) }
                    shared.waiter = continuation
                    return .none
                }
                if let now { continuation.resume(returning: now) }
            }
        } onCancel: {
            end(with: nil)
        }
        timer.cancel()
        await close()
        return answer
    }

    /// Stops listening and closes every connection (again is harmless); returns once they are closed.
    func close() async {
        end(with: nil)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let exited = shared.withLock { shared in
                if !shared.exited { shared.exitWaiters.append(continuation) }
                return shared.exited
            }
            if exited { continuation.resume() }
        }
    }

    /// Ends the login's wait, with `answer` when it is the first: the waiter is resumed and the
    /// listening thread told to close everything.
    private func end(with answer: [String: String]?) {
        let ending: (waiter: CheckedContinuation<[String: String]?, Never>?, answer: [String: String]?)? = shared.withLock { shared in
            guard !shared.ended else { return nil }
            shared.ended = true
            shared.answer = answer
            defer { shared.waiter = nil }
            return (shared.waiter, answer)
        }
        guard let ending else { return }
        cmsso_eventfd_signal(wake) // the descriptor is closed with this object, never before
        ending.waiter?.resume(returning: ending.answer)
    }

    deinit {
        Glibc.close(wake)
    }

    /// A connection the listener accepted, until it is answered or its time is up.
    private struct Connection {
        var descriptor: Int32
        /// When it is closed (monotonic seconds); -1 once answered, or gone.
        var deadline: Double
        var request: [UInt8] = []
    }

    /// The listening thread: accepts, reads and answers until the login ends, then closes all.
    private func serve(path: String, state: String) {
        var connections: [Connection] = []
        /// Out of descriptors: the listener is left out of the poll until then (it would stay readable).
        var acceptAgain = 0.0
        while !shared.withLock({ $0.ended }) {
            let now = Self.monotonic()
            let listening: Int16 = now >= acceptAgain ? Int16(POLLIN) : 0
            var descriptors = [pollfd(fd: listener, events: listening, revents: 0), pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
            descriptors += connections.map { pollfd(fd: $0.descriptor, events: Int16(POLLIN), revents: 0) }
            let soonest = (connections.map(\.deadline) + (listening == 0 ? [acceptAgain] : [])).min()
                .map { max(0, Int32(($0 - now) * 1000) + 1) } ?? -1
            guard poll(&descriptors, nfds_t(descriptors.count), soonest) >= 0 || errno == EINTR else { break }
            for index in connections.indices.reversed() {
                if descriptors[index + 2].revents != 0, !read(&connections[index], path: path, state: state) {
                    connections[index].deadline = -1
                }
                if Self.monotonic() >= connections[index].deadline {
                    Glibc.close(connections[index].descriptor)
                    connections.remove(at: index)
                }
            }
            // Each judged before the next is accepted; a few a round, so that reads are not starved.
            var round = 0
            while descriptors[0].revents != 0, round < 64, let accepted = accept(open: connections.count, pause: &acceptAgain) {
                round += 1
                guard accepted >= 0 else { continue }
                connections.append(Connection(descriptor: accepted, deadline: Self.monotonic() + Self.connectionTimeout))
            }
            shared.withLock { $0.open = connections.count }
        }
        end(with: nil) // when poll itself failed: the login is told, rather than left to its timeout
        for connection in connections { Glibc.close(connection.descriptor) }
        Glibc.close(listener)
        let waiters = shared.withLock { shared in
            shared.open = 0
            shared.exited = true
            defer { shared.exitWaiters = [] }
            return shared.exitWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// One connection accepted; -1 when it was closed at once (another user's, or over the cap);
    /// nil when none was waiting.
    private func accept(open: Int, pause: inout Double) -> Int32? {
        let accepted = cmsso_accept(listener)
        guard accepted >= 0 else {
            if errno == EMFILE || errno == ENFILE { pause = Self.monotonic() + 0.1 }
            return nil
        }
        var remote = sockaddr_in(), local = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let peer = withUnsafeMutablePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getpeername(accepted, $0, &length) }
        }
        length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(accepted, $0, &length) }
        }
        guard peer == 0, named == 0, open < Self.maximumConnections, Self.peerIsThisUser(remote: remote, local: local) else {
            Glibc.close(accepted)
            return -1
        }
        return accepted
    }

    /// Whether the process at the other end of a connection runs as this process's user. TCP says
    /// nothing of its peer, but both ends of a loopback connection are this machine's sockets, and
    /// the kernel's socket table names the owner of each (sock_diag, else /proc/net/tcp). When
    /// neither can be read, the connection is let in: the cap and the deadline still bound it.
    static func peerIsThisUser(remote: sockaddr_in, local: sockaddr_in) -> Bool {
        var uid: UInt32 = 0
        let found = cmsso_loopback_peer_uid(UInt32(bigEndian: remote.sin_addr.s_addr), UInt16(bigEndian: remote.sin_port),
                                            UInt32(bigEndian: local.sin_addr.s_addr), UInt16(bigEndian: local.sin_port), &uid)
        if found == 0 { return uid == getuid() }
        return found != -ENOENT // gone (or closing): nothing to answer
    }

    /// Reads what `connection` sent; false when it is to be closed (gone, or over the cap). Once
    /// the request's head is in, answers it and marks it done (deadline -1).
    private func read(_ connection: inout Connection, path: String, state: String) -> Bool {
        var chunk = [UInt8](repeating: 0, count: 4096)
        let count = Glibc.read(connection.descriptor, &chunk, min(chunk.count, Self.maximumRequest - connection.request.count))
        if count < 0, errno == EAGAIN || errno == EINTR { return true }
        guard count > 0 else { return false }
        let scanned = max(0, connection.request.count - 3) // a blank line may straddle two reads
        connection.request += chunk[..<count]
        guard let end = Self.headEnd(connection.request, from: scanned) else {
            if connection.request.count >= Self.maximumRequest {
                respond(connection.descriptor, "431 Request Header Fields Too Large", "The request was too large.")
                return false
            }
            return true
        }
        answer(String(decoding: connection.request[..<end], as: UTF8.self), on: connection.descriptor, path: path, state: state)
        connection.deadline = -1
        return true
    }

    /// Where the blank line that ends a request's head starts, once it is in (searched from `start`).
    static func headEnd(_ bytes: [UInt8], from start: Int = 0) -> Int? {
        guard bytes.count >= start + 4 else { return nil }
        for index in start...(bytes.count - 4) where bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
            return index
        }
        return nil
    }

    /// Answers this login's redirect with a page the user can read; another state with an error
    /// page that changes nothing; anything else with 404.
    private func answer(_ head: String, on descriptor: Int32, path: String, state: String) {
        let requestLine = head.split(separator: "\r\n", maxSplits: 1).first ?? ""
        let parts = requestLine.split(separator: " ")
        let components = parts.count == 3 ? URLComponents(string: String(parts[1])) : nil
        guard let components, components.path == path else { return respond(descriptor, "404 Not Found", "Not found.") }
        var query: [String: String] = [:]
        for item in (components.queryItems ?? []).prefix(32) { query[item.name] = item.value ?? "" }
        guard query["state"] == state else {
            return respond(descriptor, "400 Bad Request", "This answer belongs to another login attempt, so it was ignored. If you are logging in, use the link msso showed you.")
        }
        respond(descriptor, "200 OK", query["error"] == nil ? "Login complete: you can close this window." : "Login refused: you can close this window.")
        end(with: query)
    }

    /// A whole small response (the socket's buffer takes it at once; what it does not is dropped).
    private func respond(_ descriptor: Int32, _ status: String, _ text: String) {
        let body = "<!doctype html><meta charset=utf-8><title>msso</title><p>\(text)</p>\n"
        let response = "HTTP/1.1 \(status)\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\n" +
            "Connection: close\r\nCache-Control: no-store\r\nReferrer-Policy: no-referrer\r\n\r\n" + body
        let bytes = Array(response.utf8)
        _ = cmsso_send(descriptor, bytes, bytes.count)
    }

    private static func monotonic() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }
}
