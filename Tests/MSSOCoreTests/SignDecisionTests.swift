@testable import MSSOCore
import MSSOProtocol
import XCTest

/// The one sign decision (``SignDecision``) both paths take, alone.
final class SignDecisionTests: XCTestCase {
    func config(_ profile: String = "bearer", resources: [String]? = nil) throws -> GroupConfig {
        var config = GroupConfig(name: "g", issuer: "https://idp.example", clientID: "msso")
        config.signing = SigningProfile(configValue: profile)!
        config.resources = try resources.map { try Resources($0) }
        return config
    }

    func credential(tokenLeft: Double, sessionLeft: Double, now: Double = 1000) -> Credential {
        Credential(issuer: "https://idp.example", username: "alice", accessToken: "at", refreshToken: "rt",
                   accessTokenExpiresAt: now + tokenLeft, loggedInAt: now - 10, sessionExpiresAt: now + sessionLeft, sessionMaxAt: now + 3600)
    }

    func testTheVerdictTable() throws {
        let bearer = try config(), dpop = try config("dpop")
        XCTAssertEqual(SignDecision.verdict(for: credential(tokenLeft: 300, sessionLeft: 600), unsaved: false, hasKey: false, config: bearer, now: 1000), .sign)
        XCTAssertEqual(SignDecision.verdict(for: credential(tokenLeft: 300, sessionLeft: 0), unsaved: false, hasKey: true, config: bearer, now: 1000), .expired)
        XCTAssertEqual(SignDecision.verdict(for: credential(tokenLeft: 29, sessionLeft: 600), unsaved: false, hasKey: true, config: bearer, now: 1000),
                       .refreshFirst, "within the 30 s refresh lead")
        XCTAssertEqual(SignDecision.verdict(for: credential(tokenLeft: 300, sessionLeft: 600), unsaved: true, hasKey: true, config: bearer, now: 1000),
                       .refreshFirst, "a token the store has not taken yet")
        XCTAssertEqual(SignDecision.verdict(for: credential(tokenLeft: 300, sessionLeft: 600), unsaved: false, hasKey: false, config: dpop, now: 1000), .keyFirst)
        XCTAssertEqual(SignDecision.verdict(for: credential(tokenLeft: 300, sessionLeft: 600), unsaved: false, hasKey: true, config: dpop, now: 1000), .sign)
    }

    func testTheNonceIsTheRequestsElseTheNewestOfItsOriginAndOnlyForDPoP() throws {
        let asked = SignRequest(method: "GET", url: "https://api.example.com:8443/x")
        var looked: [String] = []
        let known = try SignDecision(asked, config: config("dpop")) { looked.append($0); return "n-1" }
        XCTAssertEqual(known.nonce, "n-1")
        XCTAssertEqual(looked, ["https://api.example.com:8443"])
        let given = try SignDecision(SignRequest(method: "GET", url: asked.url, dpopNonce: "n-2"), config: config("dpop")) { _ in "n-1" }
        XCTAssertEqual(given.nonce, "n-2")
        let bearer = try SignDecision(SignRequest(method: "GET", url: asked.url, dpopNonce: "n-2"), config: config()) { _ in XCTFail(); return nil }
        XCTAssertNil(bearer.nonce)
        XCTAssertThrowsError(try SignDecision(SignRequest(method: "GET", url: asked.url, dpopNonce: String(repeating: "n", count: 513)),
                                              config: config("dpop")) { _ in nil })
    }

    func testTheURLMustBeOneTheGroupSignsFor() throws {
        let limited = try config(resources: ["https://api.example.com/"])
        XCTAssertNoThrow(try SignDecision(SignRequest(method: "GET", url: "https://api.example.com/items"), config: limited) { _ in nil })
        XCTAssertThrowsError(try SignDecision(SignRequest(method: "GET", url: "https://attacker.example/"), config: limited) { _ in nil }) { error in
            XCTAssertEqual((error as? BrokerError)?.name, .resourceForbidden)
        }
        XCTAssertThrowsError(try SignDecision(SignRequest(method: "GET", url: "not a url"), config: limited) { _ in nil })
    }
}
