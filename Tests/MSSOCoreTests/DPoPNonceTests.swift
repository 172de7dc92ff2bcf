import Foundation
import Logging
@testable import MSSOCore
import MSSOProtocol
import XCTest

/// The DPoP nonces a `dpop` group's apps hand the broker: a few origins per group, each nonce
/// short, none kept from a sign that failed (what any registered app could make the daemon hold).
final class DPoPNonceTests: XCTestCase {
    let clock = TestClock()
    let store = MemoryStore()
    let idp = FakeIdP()
    let group = "com.example.suite"

    final class MemoryKeys: KeyStore, @unchecked Sendable {
        private let lock = NSLock()
        private var keys: [String: StoredKey] = [:]
        func loadKey(group: String) async throws -> StoredKey? { lock.withLock { keys[group] } }
        func saveKey(_ key: StoredKey, group: String) async throws { lock.withLock { keys[group] = key } }
    }

    func makeBroker(_ profile: String = "dpop", groups: [String]? = nil) -> Broker {
        let configs = (groups ?? [group]).map { name in
            var config = GroupConfig(name: name, issuer: "https://idp.example", clientID: "msso")
            config.signing = SigningProfile(configValue: profile)!
            return config
        }
        return Broker(configuration: Configuration(groups: configs), store: store, keys: MemoryKeys(), identity: idp,
                      logger: Logger(label: "test"), clock: clock)
    }

    func login(_ broker: Broker, _ name: String? = nil) async throws {
        _ = try await broker.login(LoginArguments(group: name, flow: .password, username: "alice", password: "right")) { _, _ in }
    }

    /// The `nonce` claim of the DPoP proof among `headers`.
    func proofNonce(_ headers: [Header]) throws -> String? {
        let proof = try XCTUnwrap(headers.first { $0.name == "DPoP" }?.value)
        var payload = String(proof.split(separator: ".")[1]).replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while payload.count % 4 != 0 { payload += "=" }
        let claims = try JSONSerialization.jsonObject(with: try XCTUnwrap(Data(base64Encoded: payload))) as? [String: Any]
        return claims?["nonce"] as? String
    }

    func sign(_ broker: Broker, _ url: String, nonce: String? = nil, group name: String? = nil, body: String? = nil) async throws -> [Header] {
        try await broker.sign(SignRequest(group: name, method: "GET", url: url, bodySHA256: body, dpopNonce: nonce)).headers
    }

    func testAFewOriginsAreKeptTheLeastRecentlyUsedDroppedFirst() throws {
        var nonces = DPoPNonces()
        for index in 0..<DPoPNonces.maximumOrigins { nonces.remember("n\(index)", for: "https://o\(index)") }
        XCTAssertEqual(nonces.entries.count, DPoPNonces.maximumOrigins)
        nonces.touch("https://o0") // used: now the most recent
        nonces.remember("n0b", for: "https://o1") // a newer nonce for o1 replaces its entry
        nonces.remember("new", for: "https://new") // full: o2, the least recently used, goes
        XCTAssertEqual(nonces.entries.count, DPoPNonces.maximumOrigins)
        XCTAssertNil(nonces.nonce(for: "https://o2"))
        XCTAssertEqual(nonces.nonce(for: "https://o0"), "n0")
        XCTAssertEqual(nonces.nonce(for: "https://o1"), "n0b")
        XCTAssertEqual(nonces.nonce(for: "https://new"), "new")
        for index in 0..<1000 { nonces.remember(String(repeating: "x", count: 512), for: "https://flood\(index)") }
        XCTAssertEqual(nonces.entries.count, DPoPNonces.maximumOrigins)
        XCTAssertThrowsError(try DPoPNonces.check(String(repeating: "x", count: 513), origin: "https://a"))
        XCTAssertThrowsError(try DPoPNonces.check("", origin: "https://a"))
        XCTAssertThrowsError(try DPoPNonces.check("n", origin: "https://" + String(repeating: "h", count: 600)))
        XCTAssertNoThrow(try DPoPNonces.check(String(repeating: "x", count: 512), origin: "https://a"))
    }

    func testANonceIsKeptPerGroupAndUsedInLaterProofs() async throws {
        let other = "com.example.other"
        let broker = makeBroker(groups: [group, other])
        try await login(broker, group)
        try await login(broker, other)
        var nonce = try proofNonce(try await sign(broker, "https://api.example/a", group: group))
        XCTAssertNil(nonce)
        nonce = try proofNonce(try await sign(broker, "https://api.example/a", nonce: "n-1", group: group))
        XCTAssertEqual(nonce, "n-1")
        nonce = try proofNonce(try await sign(broker, "https://api.example/b?q", group: group))
        XCTAssertEqual(nonce, "n-1", "same origin")
        nonce = try proofNonce(try await sign(broker, "https://api.example:8443/a", group: group))
        XCTAssertNil(nonce, "another origin")
        nonce = try proofNonce(try await sign(broker, "https://api.example/a", group: other))
        XCTAssertNil(nonce, "another group's")
        // The hot path reads what was published.
        let config = broker.configuration.groups[group]!
        let fast = try XCTUnwrap(try broker.signWithoutWaiting(SignRequest(group: group, method: "GET", url: "https://api.example/c"), group: config))
        XCTAssertEqual(try proofNonce(fast.headers), "n-1")
    }

    func testAFloodOfOriginsAndLongNoncesHoldsAFewShortOnes() async throws {
        let broker = makeBroker()
        try await login(broker)
        let long = String(repeating: "n", count: 60_000)
        for index in 0..<200 {
            do {
                _ = try await sign(broker, "https://o\(index).example/", nonce: long)
                XCTFail("a 60 KB nonce was accepted")
            } catch let error as BrokerError {
                XCTAssertEqual(error.name, .badRequest)
                XCTAssertTrue(error.message.contains("at most 512 bytes") && error.message.contains("DPoP nonce"), error.message)
            }
            let short = String(repeating: "s", count: 500) + "\(index)"
            _ = try await sign(broker, "https://o\(index).example/", nonce: String(short.suffix(512)))
        }
        let kept = await broker.dpopNonces[group]
        XCTAssertEqual(kept?.entries.count, DPoPNonces.maximumOrigins)
        XCTAssertLessThanOrEqual(kept?.entries.map { $0.nonce.utf8.count }.max() ?? 0, DPoPNonces.maximumNonceBytes)
        XCTAssertEqual(kept?.entries.last?.origin, "https://o199.example")
        let published = broker.published.withLock { $0.nonces[group] }
        XCTAssertEqual(published, kept)
    }

    func testASignThatFailsKeepsNoNonce() async throws {
        let broker = makeBroker("dpop+http-signature")
        try await login(broker)
        do {
            _ = try await sign(broker, "https://api.example/", nonce: "would-be-kept", body: "not a digest")
            XCTFail("a malformed bodySHA256 was accepted")
        } catch let error as BrokerError {
            XCTAssertEqual(error.name, .badRequest)
        }
        let kept = await broker.dpopNonces[group]
        XCTAssertNil(kept?.nonce(for: "https://api.example"))
        let nonce = try proofNonce(try await sign(broker, "https://api.example/"))
        XCTAssertNil(nonce)
    }
}
