import CMSSOSystem
import Glibc
import MSSOProtocol

/// A connected socket to the broker that reads and writes whole frames, each operation bounded by
/// a deadline. Blocking: it is what a command-line tool needs (one call, one answer) and what the
/// async client's reader thread runs on. No event loop, no Foundation beyond its Essentials.
final class BrokerSocket: @unchecked Sendable {
    let fd: Int32
    let path: String
    /// Bytes read past the last frame (touched by one reader at a time).
    private var pending: [UInt8] = []

    private init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    deinit { close(fd) }

    /// Connects to the broker at `path` within `timeout` seconds.
    static func connect(path: String, timeout: Double) throws(BrokerError) -> BrokerSocket {
        let fd = cmsso_unix_connect(path, Int32(min(max(timeout, 0.001), 3600) * 1000))
        guard fd >= 0 else {
            if fd == -EAGAIN || fd == -ETIMEDOUT || fd == -EINPROGRESS {
                throw BrokerError(.brokerUnreachable, "the msso broker did not accept the connection in \(Self.seconds(timeout)) s (\(path)); is mssod stuck? `systemctl --user restart msso.service`")
            }
            if fd == -EACCES {
                throw BrokerError(.brokerUnreachable, "no permission to talk to the msso broker at \(path): it is another user's")
            }
            throw BrokerError(.brokerUnreachable, "the msso broker is not running (nothing answers on \(path)); start it with `systemctl --user start msso.socket` or `mssod`")
        }
        // The process listening must be this user's (or the caller is root, who may address any
        // user's broker): a socket another user planted would read the calls, a login's password
        // and a lock's passphrase among them (PROTOCOL.md, "Connecting").
        var peer = cmsso_credentials()
        let known = cmsso_peer_credentials(fd, &peer) == 0
        if known, peer.pidfd >= 0 { close(peer.pidfd) }
        guard known, peer.uid == geteuid() || (geteuid() == 0 && Self.initialUserNamespace) else {
            close(fd)
            throw BrokerError(.brokerUnreachable, "the msso broker at \(path) runs as another user (uid \(known ? String(peer.uid) : "unknown")): not talking to it; check MSSO_SOCKET and XDG_RUNTIME_DIR")
        }
        return BrokerSocket(fd: fd, path: path)
    }

    /// Whether this process is in the machine's own user namespace (its uid map the identity of
    /// every uid): root's exemption above is the real root's, not that of a user who made a
    /// namespace of their own (`unshare -r`), where every other user is 65534.
    static var initialUserNamespace: Bool {
        var buffer = [CChar](repeating: 0, count: 256)
        let count = cmsso_read_small_file("/proc/self/uid_map", &buffer, buffer.count)
        guard count > 0 else { return false }
        let map = String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return map.split(whereSeparator: { $0 == " " || $0 == "\n" }) == ["0", "0", "4294967295"]
    }

    /// Writes a whole frame before `deadline` (monotonic nanoseconds; nil: no deadline).
    func write(_ frame: [UInt8], deadline: UInt64?) throws(BrokerError) {
        var sent = 0
        while sent < frame.count {
            try wait(for: Int16(POLLOUT), until: deadline, tick: nil)
            let count = frame.withUnsafeBytes { cmsso_send(fd, $0.baseAddress! + sent, $0.count - sent) }
            if count == -Int(EAGAIN) || count == -Int(EINTR) { continue }
            guard count > 0 else { throw Self.lost }
            sent += count
        }
    }

    /// The next frame's payload, read before `deadline`; `tick` runs about once a second while
    /// waiting (a countdown on the terminal).
    func readFrame(deadline: UInt64?, tick: (() -> Void)? = nil) throws(BrokerError) -> [UInt8] {
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let parsed = pending.withUnsafeBytes { Framing.parse($0) }
            switch parsed {
            case .frame(let payload):
                defer { pending.removeFirst(payload.upperBound) }
                return Array(pending[payload])
            case .tooLarge(let announced):
                throw BrokerError(.internal, "the broker sent a frame of \(announced) bytes, over the protocol's limit")
            case .incomplete:
                try wait(for: Int16(POLLIN), until: deadline, tick: tick)
                let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if count < 0 && (errno == EINTR || errno == EAGAIN) { continue }
                guard count > 0 else { throw Self.lost }
                pending.append(contentsOf: chunk[..<count])
            }
        }
    }

    /// Wakes a reader blocked on this socket (it then sees the end of the stream).
    func shutDown() {
        Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }

    private func wait(for events: Int16, until deadline: UInt64?, tick: (() -> Void)?) throws(BrokerError) {
        while true {
            var left = Int32(1000)
            if let deadline {
                let now = cmsso_monotonic_ns()
                guard now < deadline else { throw Self.timedOut(path: path) }
                left = Int32(min((deadline - now) / 1_000_000 + 1, tick == nil ? 60_000 : 1000))
            } else if tick == nil {
                left = -1
            }
            var poller = pollfd(fd: fd, events: events, revents: 0)
            let ready = poll(&poller, 1, left)
            if ready > 0 { return }
            if ready < 0 && errno != EINTR { throw Self.lost }
            if ready == 0 { tick?() }
        }
    }

    static let lost = BrokerError(.brokerUnreachable, "the connection to the msso broker was lost; is mssod still running?")

    static func timedOut(path: String) -> BrokerError {
        BrokerError(.brokerUnreachable, "the msso broker did not answer in time (\(path)); is mssod stuck? `systemctl --user restart msso.service`")
    }

    static func seconds(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }
}

/// A point in time `seconds` from now, on the monotonic clock (nil stays nil: no deadline).
func deadline(in seconds: Double?) -> UInt64? {
    seconds.map { cmsso_monotonic_ns() + UInt64(min(max($0, 0), 86400 * 365) * 1_000_000_000) }
}
