import Foundation
import Glibc
import Logging
import MSSOCore
@testable import MSSOIdentity
import MSSOProtocol
import XCTest

/// The discovery cache and the way each group's requests take: an administrator's group never
/// uses what a user's group fetched, nor the environment's proxy.
final class DiscoveryCacheTests: XCTestCase {
    func testAUsersGroupNamingAnAdminsIssuerGetsADiscoveryDocumentOfItsOwn() async throws {
        // Each discovery answer names a token endpoint of its own (/token-1, /token-2, …): the
        // endpoint a login posts to tells which document it used.
        let idp = try RecordingIdP()
        defer { idp.stop() }
        let provider = OpenIDProvider(logger: Logger(label: "test"), requestTimeout: 5, environment: [:])
        defer { Task { await provider.shutdown() } }
        var user = GroupConfig(name: "mine", issuer: idp.issuer, clientID: "msso")
        user.admin = false
        var admin = GroupConfig(name: "corp", issuer: idp.issuer, clientID: "msso")
        admin.admin = true
        admin.clientSecret = .inline("admin-secret")

        _ = try await provider.passwordLogin(user, username: "mallory", password: "x", dpop: nil)
        XCTAssertEqual(idp.requests, ["GET /idp/.well-known/openid-configuration", "POST /token-1"])
        _ = try await provider.passwordLogin(admin, username: "alice", password: "alice-pass", dpop: nil)
        XCTAssertEqual(idp.requests.suffix(2), ["GET /idp/.well-known/openid-configuration", "POST /token-2"],
                       "the admin's group fetched its own document and used it, not the user's group's")
        _ = try await provider.passwordLogin(admin, username: "alice", password: "alice-pass", dpop: nil)
        _ = try await provider.passwordLogin(user, username: "mallory", password: "x", dpop: nil)
        XCTAssertEqual(idp.requests.suffix(2), ["POST /token-2", "POST /token-1"], "each kept its own, cached")
    }

    func testAnAdministratorsGroupTakesNoProxyFromTheEnvironment() {
        let http = IdPHTTP(environment: ["https_proxy": "http://127.0.0.1:3128", "all_proxy": "socks5://127.0.0.1:1080"])
        let url = URL(string: "https://login.corp/realms/x/protocol/openid-connect/token")!
        var admin = GroupConfig(name: "corp", issuer: "https://login.corp/realms/x", clientID: "msso")
        admin.admin = true
        var user = admin
        user.admin = false
        XCTAssertEqual(http.proxy(for: IdPRoute(admin), to: url), nil, "straight to its IdP")
        XCTAssertEqual(http.proxy(for: IdPRoute(user), to: url), "http://127.0.0.1:3128",
                       "a user's group takes https_proxy, as curl does")
        admin.proxy = "http://proxy.corp:3128"
        XCTAssertEqual(http.proxy(for: IdPRoute(admin), to: url), "http://proxy.corp:3128",
                       "the admin's own proxy")
        user.proxy = "http://proxy.corp:3128"
        XCTAssertEqual(http.proxy(for: IdPRoute(user), to: url), "http://proxy.corp:3128",
                       "the same proxy (no connection outlives its request, so none is shared with an admin's group)")
        XCTAssertEqual(http.proxy(for: IdPRoute(admin), to: URL(string: "http://127.0.0.1:4599/token")!), nil,
                       "loopback is never proxied")
        var forged = IdPRoute(admin)
        forged.proxy = .environment
        XCTAssertEqual(http.proxy(for: forged, to: url), nil, "never the environment's, for an admin")
    }

    func testTheHelperIsFoundWhereThePackageInstallsItElseBesideMssod() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("msso-helper-\(getpid())").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        let installed = root + "/usr/libexec/msso/mssod-idp", beside = root + "/usr/bin/mssod-idp"
        for path in [installed, beside] {
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data(), attributes: [.posixPermissions: 0o711]))
        }
        XCTAssertEqual(IdPHTTP.helper(beside: root + "/usr/bin/mssod"), installed)
        try FileManager.default.removeItem(atPath: installed)
        XCTAssertEqual(IdPHTTP.helper(beside: root + "/usr/bin/mssod"), beside, "a build tree: beside mssod")
        chmod(beside, 0o644)
        XCTAssertNil(IdPHTTP.helper(beside: root + "/usr/bin/mssod"), "a file that cannot be run is not the helper")
    }
}

/// An HTTP server on 127.0.0.1 that records each request's method and path and answers as an
/// OpenID provider would: discovery (a token endpoint numbered by the discovery count) and tokens.
final class RecordingIdP: @unchecked Sendable {
    let port: Int
    var issuer: String { "http://127.0.0.1:\(port)/idp" }
    private let listener: Int32
    private let lock = NSLock()
    private var recorded: [String] = []
    private var discoveries = 0

    var requests: [String] { lock.withLock { recorded } }

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 16) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else {
            close(fd)
            throw POSIXError(.EADDRNOTAVAIL)
        }
        listener = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [self] in
            while true {
                let connection = accept(fd, nil, nil)
                guard connection >= 0 else { return }
                serve(connection)
                close(connection)
            }
        }
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func serve(_ connection: Int32) {
        var data = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 4096)
        var head: String?
        var needed = Int.max
        while data.count < needed {
            let count = read(connection, &buffer, buffer.count)
            guard count > 0 else { return }
            data += buffer[..<count]
            if head == nil, let end = data.firstRange(of: Array("\r\n\r\n".utf8)) {
                head = String(decoding: data[..<end.lowerBound], as: UTF8.self)
                let length = head!.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                needed = end.upperBound + length
            }
        }
        let requestLine = head?.split(separator: "\r\n").first?.split(separator: " ") ?? []
        guard requestLine.count >= 2 else { return }
        let request = "\(requestLine[0]) \(requestLine[1])"
        let body: String
        let number: Int = lock.withLock {
            recorded.append(request)
            if request.hasSuffix("/.well-known/openid-configuration") { discoveries += 1 }
            return discoveries
        }
        if request.hasSuffix("/.well-known/openid-configuration") {
            body = #"{"issuer": "\#(issuer)", "token_endpoint": "http://127.0.0.1:\#(port)/token-\#(number)"}"#
        } else {
            body = #"{"access_token": "an-access-token", "token_type": "Bearer", "expires_in": 300}"#
        }
        let answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n" + body
        _ = answer.withCString { write(connection, $0, strlen($0)) }
    }
}
