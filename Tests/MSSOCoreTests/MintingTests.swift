import Foundation
import Logging
@testable import MSSOCore
import MSSOProtocol
import XCTest

/// Tokens per server and per app (`tokens = "per-resource"`, a registration's `scopes`): minted
/// from the session, stored with it before use, single-flight per target, and every request that
/// may spend the refresh token one after the other (a one-use provider ends the session on reuse).
final class MintingTests: XCTestCase {
    let clock = TestClock()
    let store = MemoryStore()
    let idp = FakeIdP()
    let group = "com.example.suite"
    let git = TokenTarget(resource: "https://git.example.com/")
    let kube = TokenTarget(resource: "https://k8s.example.com/")

    func makeBroker() throws -> Broker {
        var config = GroupConfig(name: group, issuer: "https://idp.example", clientID: "msso")
        config.resources = try Resources(["https://git.example.com/", "https://k8s.example.com/"])
        config.tokens = .perResource
        return Broker(configuration: Configuration(groups: [config]), store: store, identity: idp,
                      logger: Logger(label: "test"), clock: clock)
    }

    func login(_ broker: Broker) async throws {
        _ = try await broker.login(LoginArguments(flow: .password, username: "alice", password: "right")) { _, _ in }
    }

    static func sign(_ broker: Broker, _ target: TokenTarget, url: String = "https://git.example.com/x") async throws -> String {
        let request = SignRequest(method: "GET", url: url)
        return try await broker.sign(request, target: target).headers[0].value
    }

    func testConcurrentSignsForTwoServersMintOncePerServerOneAfterTheOther() async throws {
        let broker = try makeBroker()
        try await login(broker) // rt-1
        idp.mintDelay = 20_000_000
        let (git, kube) = (self.git, self.kube)
        let signed = try await withThrowingTaskGroup(of: String.self) { tasks in
            for index in 0..<20 {
                tasks.addTask { try await Self.sign(broker, index % 2 == 0 ? git : kube) }
            }
            return try await tasks.reduce(into: Set<String>()) { $0.insert($1) }
        }
        let log = idp.mintLog
        XCTAssertEqual(log.mints.count, 2, "one mint per server, shared by its ten signs")
        XCTAssertEqual(Set(log.mints.map(\.target)), [git, kube])
        XCTAssertEqual(log.mints.map(\.spent), ["rt-1", "rt-2"], "the second spends the token the first stored")
        XCTAssertEqual(log.reused, [])
        XCTAssertEqual(signed.count, 2)
        let stored = try XCTUnwrap(store.item(group))
        XCTAssertEqual(stored.refreshToken, "rt-3")
        XCTAssertEqual(Set(stored.minted.map(\.target)), [git, kube])
        XCTAssertEqual(stored.accessToken, "at-1", "the session's own token is not replaced")
        XCTAssertTrue(signed.allSatisfy { $0.hasPrefix("Bearer minted-") })
    }

    /// Found by an outside test: a logout revoked the session's tokens and left those minted for
    /// each server usable until they expired, while it answered "revoked".
    func testLogoutRevokesTheTokensMintedForEachServerToo() async throws {
        let broker = try makeBroker()
        try await login(broker)
        let forGit = try await Self.sign(broker, git).replacingOccurrences(of: "Bearer ", with: "")
        let forKube = try await Self.sign(broker, kube, url: "https://k8s.example.com/x").replacingOccurrences(of: "Bearer ", with: "")
        let ended = try await broker.logout(nil, all: false)
        XCTAssertEqual(ended.revoked, true)
        let revoked = Set(idp.counts.revoked)
        XCTAssertTrue(revoked.isSuperset(of: [forGit, forKube]), "\(revoked)")
    }

    /// Tokens per server are kept per account: each account's minted in its own item, from its own
    /// refresh token, never handed to the other.
    func testEachAccountMintsItsOwnTokensPerServer() async throws {
        let broker = try makeBroker()
        try await login(broker) // the default account: rt-1
        idp.logInAs("bob", subject: "bob-sub")
        _ = try await broker.login(LoginArguments(account: "admin", flow: .password, username: "bob", password: "right")) { _, _ in }
        idp.logInAs("alice", subject: "alice-sub") // the provider answers each as the user its token is
        let mine = try await Self.sign(broker, git)
        idp.logInAs("bob", subject: "bob-sub")
        let request = SignRequest(account: "admin", method: "GET", url: "https://git.example.com/x")
        let bobs = try await broker.sign(request, target: git).headers[0].value
        XCTAssertNotEqual(mine, bobs)
        let admin = AccountName(group: group, account: "admin").storeName
        XCTAssertEqual(store.item(group)?.minted.map(\.accessToken), [mine.replacingOccurrences(of: "Bearer ", with: "")])
        XCTAssertEqual(store.item(admin)?.minted.map(\.accessToken), [bobs.replacingOccurrences(of: "Bearer ", with: "")])
        XCTAssertEqual(Set(idp.mintLog.mints.compactMap(\.spent)), ["rt-1", "rt-2"], "each spent its own account's refresh token")
    }

    func testAHeldTokenIsServedWithoutTheIdPAndRenewedWithinTheLead() async throws {
        let broker = try makeBroker()
        try await login(broker)
        let first = try await Self.sign(broker, git)
        let again = try await Self.sign(broker, git)
        XCTAssertEqual(first, again)
        XCTAssertEqual(idp.mintLog.mints.count, 1)
        clock.advance(300 - 29) // within refresh_lead (30 s) of the minted token's end
        let renewed = try await Self.sign(broker, git)
        XCTAssertNotEqual(renewed, first)
        XCTAssertEqual(idp.mintLog.mints.count, 2)
    }

    func testAMintedTokenIsStoredBeforeItIsUsedAndTheRotatedTokenKept() async throws {
        let broker = try makeBroker()
        try await login(broker)
        store.locked = true
        do {
            _ = try await Self.sign(broker, git)
            XCTFail("the store refused the write: nothing is handed out")
        } catch let error as BrokerError {
            XCTAssertEqual(error.name, .keyringLocked)
        }
        store.locked = false
        let signed = try await Self.sign(broker, git)
        XCTAssertEqual(store.item(group)?.refreshToken, "rt-2", "the rotated token, kept in memory, stored now")
        XCTAssertEqual(store.item(group)?.minted(for: git).map { "Bearer " + $0.accessToken }, signed)
        XCTAssertEqual(idp.mintLog.reused, [])
    }

    func testARestartReadsTheMintedTokensAndALogoutEndsThem() async throws {
        let broker = try makeBroker()
        try await login(broker)
        let first = try await Self.sign(broker, git)
        let restarted = try makeBroker()
        let again = try await Self.sign(restarted, git)
        XCTAssertEqual(again, first)
        XCTAssertEqual(idp.mintLog.mints.count, 1)
        _ = try await restarted.logout(nil, all: false)
        do {
            _ = try await Self.sign(restarted, git)
            XCTFail("logged out")
        } catch let error as BrokerError {
            XCTAssertEqual(error.name, .notLoggedIn)
        }
    }

    func testARefusedMintKeepsTheSessionAndTheTokenItSpentNothingOf() async throws {
        let broker = try makeBroker()
        try await login(broker)
        idp.mintError = BrokerError(.resourceRefused, "refused")
        do {
            _ = try await Self.sign(broker, kube)
            XCTFail("refused")
        } catch let error as BrokerError {
            XCTAssertEqual(error.name, .resourceRefused)
        }
        XCTAssertEqual(store.item(group)?.refreshToken, "rt-1")
        let status = try await broker.check(group)
        XCTAssertEqual(status.state, .valid)
    }

    func testAnUnavailableIdPIsAskedAgainOnlyAfterItsBackoffAndAHeldTokenServedMeanwhile() async throws {
        let broker = try makeBroker()
        try await login(broker)
        let held = try await Self.sign(broker, git)
        idp.mintError = BrokerError(.idpUnavailable, "down")
        clock.advance(300 - 29)
        let served = try await Self.sign(broker, git)
        XCTAssertEqual(served, held, "the token held still works: served")
        let asked = idp.mintLog.mints.count
        do {
            _ = try await Self.sign(broker, kube)
            XCTFail("nothing held for that server, and the IdP is backing off")
        } catch let error as BrokerError {
            XCTAssertEqual(error.name, .idpUnavailable)
            XCTAssertTrue(error.message.contains("asks again in"), error.message)
        }
        XCTAssertEqual(idp.mintLog.mints.count, asked, "not asked during the backoff")
    }

    func testALogoutDuringAMintRevokesTheRefreshTokenTheMintRotated() async throws {
        // Found by an outside test: the logout revoked the spent token, and the mint's new one lived on.
        let broker = try makeBroker()
        try await login(broker) // rt-1
        idp.mintDelay = 50_000_000
        let (git, idp) = (self.git, self.idp)
        let outcome = try await withThrowingTaskGroup(of: ErrorName?.self) { tasks in
            tasks.addTask {
                do { _ = try await Self.sign(broker, git); return nil } catch let error as BrokerError { return error.name }
            }
            tasks.addTask {
                while idp.mintLog.mints.isEmpty { await Task.yield() }
                _ = try await broker.logout(nil, all: false)
                return .internal // (not the sign's)
            }
            return try await tasks.reduce(into: [ErrorName?]()) { $0.append($1) }
        }
        XCTAssertTrue(outcome.contains(.notLoggedIn), "logged out while it was minted: \(outcome)")
        while !idp.counts.revoked.contains("rt-2") { await Task.yield() }
        XCTAssertTrue(Set(idp.counts.revoked).isSuperset(of: ["rt-1", "rt-2"]), "the session's and the one the mint rotated")
        // Found by a later outside test: the access token the mint was answered with lived an hour.
        while !idp.counts.revoked.contains(where: { $0.hasPrefix("minted-") }) { await Task.yield() }
        XCTAssertNil(store.item(group))
    }

    func testASmallStoreGoesOnMintingForManyServersDroppingThoseThatEndFirst() async throws {
        // Found by an outside test: the kernel keyring's quota took about ten, then every mint was refused for good.
        var config = GroupConfig(name: group, issuer: "https://idp.example", clientID: "msso")
        let servers = (1...40).map { "https://srv\($0).example.com/" }
        config.resources = try Resources(servers)
        config.tokens = .perResource
        let broker = Broker(configuration: Configuration(groups: [config]), store: store, identity: idp, logger: Logger(label: "test"), clock: clock)
        try await login(broker)
        store.room = 6000
        for server in servers {
            clock.advance(1)
            _ = try await Self.sign(broker, TokenTarget(resource: server), url: server + "x")
        }
        let stored = try XCTUnwrap(store.item(group))
        XCTAssertNotNil(stored.minted(for: TokenTarget(resource: servers.last!)), "the newest is held")
        XCTAssertLessThan(stored.minted.count, servers.count, "the first ones gave their place")
        XCTAssertEqual(idp.mintLog.reused, [])
        // Ended ones give theirs first.
        clock.advance(400)
        _ = try await Self.sign(broker, TokenTarget(resource: servers[0]), url: servers[0] + "x")
        XCTAssertEqual(store.item(group)?.minted.count, 1)
    }

    func testStatusListsTheMintedTokensNeverATokenAndTheyAreBounded() async throws {
        let broker = try makeBroker()
        try await login(broker)
        _ = try await Self.sign(broker, git)
        let status = try await broker.status(group)
        XCTAssertEqual(status.first?.tokens?.map(\.resource), ["https://git.example.com/"])
        let encoded = String(decoding: try JSONEncoder().encode(status), as: UTF8.self)
        XCTAssertFalse(encoded.contains("minted-"), "no token in status")

        var credential = try XCTUnwrap(store.item(group))
        for index in 0..<(MintedToken.maximum + 10) {
            credential.keep(MintedToken(TokenTarget(resource: nil, scopes: ["s\(index)"]), accessToken: "t", expiresAt: clock.now() + Double(index)))
        }
        XCTAssertEqual(credential.minted.count, MintedToken.maximum)
        XCTAssertNil(credential.minted(for: TokenTarget(resource: nil, scopes: ["s0"])), "the one that ends first gave its place")
    }

    func testAStoredItemWithHostileMintedTokensIsCorrupt() throws {
        func decode(_ minted: String) throws -> Credential {
            let json = #"{"issuer":"https://idp.example","accessToken":"a","refreshToken":"r","accessTokenExpiresAt":1800000000,"loggedInAt":1800000000,"sessionExpiresAt":1800000600,"sessionMaxAt":1800003600,"minted":\#(minted)}"#
            return try JSONDecoder().decode(Credential.self, from: Data(json.utf8))
        }
        XCTAssertEqual(try decode(#"[{"resource":"https://git.example.com/","accessToken":"t","expiresAt":1800000300}]"#).minted.count, 1)
        let one = #"{"resource":"https://git.example.com/","accessToken":"t","expiresAt":1800000300}"#
        XCTAssertThrowsError(try decode("[\(one),\(one)]"), "a target twice")
        XCTAssertThrowsError(try decode(#"[{"resource":"https://git.example.com/","accessToken":"t","expiresAt":1e300}]"#), "no time msso wrote")
        XCTAssertThrowsError(try decode(#"[{"accessToken":"t","expiresAt":1800000300}]"#), "for nothing")
        XCTAssertThrowsError(try decode(#"[{"resource":"https://git.example.com/","accessToken":"","expiresAt":1800000300}]"#), "no token")
        let many = (0...MintedToken.maximum).map { #"{"scopes":["s\#($0)"],"accessToken":"t","expiresAt":1800000300}"# }
        XCTAssertThrowsError(try decode("[\(many.joined(separator: ","))]"), "more than msso keeps")
        // A shared group's item is written as before: no `minted` key.
        let plain = Credential(issuer: "i", username: nil, accessToken: "a", refreshToken: nil, accessTokenExpiresAt: 1800000000,
                               loggedInAt: 1800000000, sessionExpiresAt: 1800000600, sessionMaxAt: 1800003600)
        XCTAssertFalse(String(decoding: try JSONEncoder().encode(plain), as: UTF8.self).contains("minted"))
    }

    func testAPathAServerResolvesIntoAnotherEntryIsFound() throws {
        // Found by an outside test: each of these got the token of `/` for a request that `/admin/` serves.
        let resources = try Resources(["https://a.example.com/", "https://a.example.com/admin/"])
        for url in ["https://a.example.com/x/../admin/users", "https://a.example.com/admin;v=1/users", "https://a.example.com//admin/users",
                    "https://a.example.com/%61dmin/users", "https://a.example.com/%2561dmin/users", "https://a.example.com/x%2f..%2fadmin/u",
                    "https://a.example.com/./admin/u"] {
            XCTAssertEqual(resources.otherEntryOnceResolved(url), "https://a.example.com/admin/", url)
        }
        // A second outside test: encoded `?`/`#` ending a dot segment, IIS's case, trailing dots and
        // %u, and the entry's path without its slash.
        for url in ["https://a.example.com/x/..%3f/admin/s", "https://a.example.com/admin%3F/x", "https://a.example.com/admin",
                    "https://a.example.com/ADMIN/s", "https://a.example.com/Admin/s", "https://a.example.com/admin./s",
                    "https://a.example.com/admin%2e/s", "https://a.example.com/x/%u002e%u002e/admin/s"] {
            XCTAssertEqual(resources.otherEntryOnceResolved(url), "https://a.example.com/admin/", url)
        }
        // And the other way: under /admin/ by its bytes (a strict server's reading), outside it once
        // resolved: neither token.
        for url in ["https://a.example.com/admin/../x", "https://a.example.com/admin/..%3F/s", "https://a.example.com/admin/..%23/s",
                    "https://a.example.com/admin/..%253f/s", "https://a.example.com/admin/%2e%2e%3fx/s", "https://a.example.com/admin/.%3f/../s"] {
            XCTAssertEqual(resources.entry(for: url), "https://a.example.com/", url)
            XCTAssertEqual(resources.otherEntryOnceResolved(url), "https://a.example.com/admin/", url)
        }
        for url in ["https://a.example.com/admin/users", "https://a.example.com/x", "https://a.example.com/adminx/y",
                    "https://a.example.com/admin/users?next=/../x", "https://a.example.com/"] {
            XCTAssertNil(resources.otherEntryOnceResolved(url), url)
        }
        // One entry per origin: nothing to confuse (and no work on the hot path).
        XCTAssertNil(try Resources(["https://a.example.com/", "https://b.example.com/"]).otherEntryOnceResolved("https://a.example.com/x/../y"))
        let path = Array("/a/./b/../c//d;p/%2e%2e/e/".utf8)
        XCTAssertEqual(path.withUnsafeBufferPointer { Resources.resolvedPath($0) }, Array("/a/c/e/".utf8))
    }

    func testTheMostSpecificEntryIsTheTarget() throws {
        let resources = try Resources(["https://h.example/", "https://h.example/git/", "https://other.example/"])
        XCTAssertEqual(resources.entry(for: "https://h.example/git/x.git"), "https://h.example/git/")
        XCTAssertEqual(resources.entry(for: "https://H.example/api"), "https://h.example/")
        XCTAssertEqual(resources.entry(for: "https://h.example/gitx"), "https://h.example/")
        XCTAssertEqual(resources.entry(for: "https://other.example"), "https://other.example/")
        XCTAssertNil(resources.entry(for: "https://third.example/"))
    }
}
