import CMSSOSystem
import Foundation
@testable import MSSOIdentity
import MSSOProtocol
import XCTest

/// The browser login's loopback listener: what the user's own connections can make it hold, and
/// that it holds nothing once the login has ended. (Another user's connections: e2e,
/// test_loopback_bounds.py, which can run a process as another uid.)
final class LoopbackRedirectTests: XCTestCase {
    /// A blocking TCP connection to 127.0.0.1:`port`.
    func connect(_ port: Int) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        let status = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        XCTAssertEqual(status, 0)
        return fd
    }

    /// Whether the daemon's end closed `fd` (end of stream), waiting up to `seconds`.
    func closedByListener(_ fd: Int32, within seconds: Double = 2) -> Bool {
        var poll = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard Glibc.poll(&poll, 1, Int32(seconds * 1000)) == 1 else { return false }
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, Int32(MSG_PEEK)) <= 0
    }

    func waitFor(_ what: String, _ condition: () -> Bool) {
        let deadline = Date().addingTimeInterval(5)
        while !condition(), Date() < deadline { usleep(10_000) }
        XCTAssertTrue(condition(), what)
    }

    func testTheUsersOwnConnectionsAreCappedAndAllClosedWhenTheLoginEnds() async throws {
        let listener = try await LoopbackRedirect.start(port: 0, path: "/callback", state: "s")
        let waiting = Task { await listener.wait(timeout: 60) }
        var fds: [Int32] = []
        for _ in 0..<(LoopbackRedirect.maximumConnections + 4) { fds.append(try connect(listener.port)) }
        defer { for fd in fds { close(fd) } }
        waitFor("the cap's worth kept") { listener.openConnections == LoopbackRedirect.maximumConnections }
        let refused = fds.filter { closedByListener($0, within: 0.2) }.count
        XCTAssertEqual(refused, 4, "those over the cap are closed at once")
        waiting.cancel() // the login's caller has gone
        _ = await waiting.value
        waitFor("every connection closed with the login") { listener.openConnections == 0 }
        XCTAssertEqual(fds.filter { closedByListener($0) }.count, fds.count)
        XCTAssertThrowsError(try { () throws in
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = UInt16(listener.port).bigEndian
            address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
            let status = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            if status != 0 { throw BrokerError(.internal, "refused") }
        }(), "nothing listens once the login has ended")
    }

    func testTheUidOfALoopbackPeerIsOurs() throws {
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(server) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7f00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(server, $0, length); return getsockname(server, $0, &length) }
        }
        listen(server, 4)
        let client = try connect(Int(UInt16(bigEndian: address.sin_port)))
        defer { close(client) }
        var peer = sockaddr_in()
        var peerLength = socklen_t(MemoryLayout<sockaddr_in>.size)
        let accepted = withUnsafeMutablePointer(to: &peer) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { accept(server, $0, &peerLength) } }
        defer { close(accepted) }
        var uid: UInt32 = 12345
        let found = cmsso_loopback_peer_uid(UInt32(bigEndian: peer.sin_addr.s_addr), UInt16(bigEndian: peer.sin_port),
                                            UInt32(bigEndian: address.sin_addr.s_addr), UInt16(bigEndian: address.sin_port), &uid)
        XCTAssertEqual(found, 0)
        XCTAssertEqual(uid, getuid())
        let missing = cmsso_loopback_peer_uid(0x7f00_0001, 1, 0x7f00_0001, UInt16(bigEndian: address.sin_port), &uid)
        XCTAssertEqual(missing, -ENOENT)
    }
}
