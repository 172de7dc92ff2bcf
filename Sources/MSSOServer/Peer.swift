import CMSSOSystem
import Crypto
import Foundation
import MSSOCore
import MSSOProtocol
import NIOConcurrencyHelpers
import NIOCore

/// The process at the other end of a connection, as the kernel reports it. Nothing a client says
/// about itself is ever used for identity.
public struct Peer: Sendable {
    public var uid: UInt32
    public var gid: UInt32
    public var pid: Int32
    /// The app behind the pid, resolved at connect time.
    public var app: AppIdentity

    public var executable: String? { app.executable }
    public var description: PeerDescription { PeerDescription(uid: uid, pid: pid, executable: executable) }

    /// Mirrors `struct ucred`, which Glibc's Swift module does not export.
    struct UCred: Sendable {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
    }

    /// Reads the peer of a connected Unix-domain socket.
    static func of(_ channel: Channel) -> EventLoopFuture<Peer> {
        guard let provider = channel as? SocketOptionProvider else {
            return channel.eventLoop.makeFailedFuture(BrokerError(.internal, "socket does not expose its peer"))
        }
        let credentials: EventLoopFuture<UCred> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
        // A pidfd pins the process: if the pid is reused after we read /proc, the pidfd says so.
        let pidfd: EventLoopFuture<Int32?> = provider.unsafeGetSocketOption(
            level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(CMSSO_SO_PEERPIDFD)).map { Optional($0) }
            .recover { _ in nil } // kernels before 6.5
        return credentials.and(pidfd).map { ucred, pidfd in
            let process = ProcessHandle(pid: ucred.pid, pidfd: pidfd)
            return Peer(uid: ucred.uid, gid: ucred.gid, pid: ucred.pid, app: process.identity())
        }
    }
}

/// A peer process, pinned by its pidfd where the kernel offers one, closed when the last
/// reference (the connection's identity) goes away.
final class ProcessHandle: Sendable {
    let pid: Int32
    private let pidfd: Int32?

    init(pid: Int32, pidfd: Int32?) {
        self.pid = pid
        self.pidfd = pidfd
    }

    deinit {
        if let pidfd { close(pidfd) }
    }

    /// True while the process we connected to still runs (without a pidfd: unknowable, assumed).
    var alive: Bool { pidfd.map { cmsso_pidfd_alive($0) == 1 } ?? true }

    func identity() -> AppIdentity {
        let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe")
        let unit = Self.unit(pid: pid)
        let flatpak = Self.flatpakID(pid: pid) ?? unit.flatMap(Self.flatpakID(unit:))
        // Read after the facts: had the pid been reused meanwhile, they describe another process.
        guard alive else { return AppIdentity(executable: nil) }
        return AppIdentity(executable: executable, flatpak: flatpak, unit: unit, digest: { [self] in self.digest() })
    }

    /// SHA-256 of the running executable (`/proc/PID/exe` opens the very file the process runs).
    func digest() -> String? {
        guard let handle = FileHandle(forReadingAtPath: "/proc/\(pid)/exe") else { return nil }
        defer { try? handle.close() }
        var info = stat()
        guard fstat(handle.fileDescriptor, &info) == 0 else { return nil }
        let key = DigestCache.Key(device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size),
                                  modified: info.st_mtim.tv_sec * 1_000_000_000 + info.st_mtim.tv_nsec)
        if let known = DigestCache.shared.get(key) { return alive ? known : nil }
        var hasher = SHA256()
        while let chunk = try? handle.read(upToCount: 1 << 20), !chunk.isEmpty { hasher.update(data: chunk) }
        let hex = hasher.finalize().map { String(format: "%02x", $0) }.joined()
        DigestCache.shared.set(key, hex)
        return alive ? hex : nil
    }

    /// The systemd unit from the process's cgroup (`0::/user.slice/…/app-foo.scope` → `app-foo.scope`).
    static func unit(pid: Int32) -> String? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/cgroup", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("0::") }) else { return nil }
        let last = line.split(separator: "/").last.map(String.init)
        return last.flatMap { $0.hasSuffix(".scope") || $0.hasSuffix(".service") ? $0 : nil }
    }

    /// The app id in a Flatpak sandbox's `/.flatpak-info` (written by flatpak, read-only inside).
    static func flatpakID(pid: Int32) -> String? {
        (try? String(contentsOfFile: "/proc/\(pid)/root/.flatpak-info", encoding: .utf8)).flatMap(flatpakID(info:))
    }

    /// The `name` of the `[Application]` section of a `.flatpak-info` file.
    static func flatpakID(info text: String) -> String? {
        var inApplication = false
        for line in text.split(separator: "\n") {
            if line.hasPrefix("[") { inApplication = line == "[Application]" }
            if inApplication, line.hasPrefix("name=") { return String(line.dropFirst(5)) }
        }
        return nil
    }

    /// `app-flatpak-com.example.App-12345.scope` → `com.example.App`.
    static func flatpakID(unit: String) -> String? {
        guard unit.hasPrefix("app-flatpak-"), unit.hasSuffix(".scope") else { return nil }
        let middle = unit.dropFirst("app-flatpak-".count).dropLast(".scope".count)
        guard let dash = middle.lastIndex(of: "-") else { return nil }
        return String(middle[..<dash])
    }
}

/// Digests of executables already hashed, by file identity, so each binary is read once.
final class DigestCache: Sendable {
    struct Key: Hashable, Sendable {
        var device: UInt64
        var inode: UInt64
        var size: Int64
        var modified: Int
    }
    static let shared = DigestCache()
    private let entries = NIOLockedValueBox([Key: String]())
    func get(_ key: Key) -> String? { entries.withLockedValue { $0[key] } }
    func set(_ key: Key, _ digest: String) { entries.withLockedValue { $0[key] = digest } }
}
