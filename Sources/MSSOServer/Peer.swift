import Foundation
import MSSOProtocol
import NIOCore

/// The process at the other end of a connection, as the kernel reports it (SO_PEERCRED).
/// Nothing a client says about itself is ever used for identity.
public struct Peer: Sendable, Equatable {
    public var uid: UInt32
    public var gid: UInt32
    public var pid: Int32
    /// The executable behind the pid, resolved at connect time (readable for same-uid peers only).
    public var executable: String?

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
        return credentials.map { ucred in
            let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(ucred.pid)/exe")
            return Peer(uid: ucred.uid, gid: ucred.gid, pid: ucred.pid, executable: executable)
        }
    }
}
