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

    /// The verdict at wall-clock time 1000, the window measured then.
    func verdict(_ credential: Credential, unsaved: Bool = false, hasKey: Bool, config: GroupConfig) -> SignDecision.Verdict {
        let now = Moment(wall: 1000, elapsed: 50)
        return SignDecision.verdict(for: credential, window: SessionWindow(endingAt: credential.endsAt, measuredAt: now),
                                    token: SessionWindow(endingAt: credential.accessTokenExpiresAt, measuredAt: now), unsaved: unsaved,
                                    hasKey: hasKey, config: config, now: now)
    }

    func testTheVerdictTable() throws {
        let bearer = try config(), dpop = try config("dpop")
        XCTAssertEqual(verdict(credential(tokenLeft: 300, sessionLeft: 600), hasKey: false, config: bearer), .sign)
        XCTAssertEqual(verdict(credential(tokenLeft: 300, sessionLeft: 0), hasKey: true, config: bearer), .expired)
        XCTAssertEqual(verdict(credential(tokenLeft: 29, sessionLeft: 600), hasKey: true, config: bearer), .refreshFirst, "within the 30 s refresh lead")
        XCTAssertEqual(verdict(credential(tokenLeft: 300, sessionLeft: 600), unsaved: true, hasKey: true, config: bearer), .refreshFirst,
                       "a token the store has not taken yet")
        XCTAssertEqual(verdict(credential(tokenLeft: 300, sessionLeft: 600), hasKey: false, config: dpop), .keyFirst)
        XCTAssertEqual(verdict(credential(tokenLeft: 300, sessionLeft: 600), hasKey: true, config: dpop), .sign)
    }

    func testTheWindowDecidesWhetherItIsExpiredWhateverTheWallClockSays() throws {
        let bearer = try config(), fresh = credential(tokenLeft: 300, sessionLeft: 600)
        let window = SessionWindow(endingAt: fresh.endsAt, measuredAt: Moment(wall: 1000, elapsed: 50))
        let token = SessionWindow(endingAt: fresh.accessTokenExpiresAt, measuredAt: Moment(wall: 1000, elapsed: 50))
        let jumpedBack = Moment(wall: 400, elapsed: 651) // 601 s elapsed, the wall clock 600 s behind
        XCTAssertEqual(SignDecision.verdict(for: fresh, window: window, token: token, unsaved: false, hasKey: true, config: bearer, now: jumpedBack), .expired)
        let jumpedForward = Moment(wall: 1601, elapsed: 51)
        XCTAssertEqual(SignDecision.verdict(for: fresh, window: window, token: token, unsaved: false, hasKey: true, config: bearer, now: jumpedForward), .expired)
    }

    func testTheTokensLifeIsOnBothClocksToo() throws {
        let bearer = try config(), fresh = credential(tokenLeft: 300, sessionLeft: 3600)
        // Its expiry set while the wall clock was an hour ahead: the token ends 300 s of elapsed time later.
        let measured = Moment(wall: 1000, elapsed: 50)
        let window = SessionWindow(endingAt: fresh.endsAt, measuredAt: measured)
        let token = SessionWindow(endingAt: fresh.accessTokenExpiresAt, measuredAt: measured)
        let putRight = Moment(wall: 1000 - 3600 + 280, elapsed: 330) // 280 s on, the clock an hour back
        XCTAssertEqual(SignDecision.verdict(for: fresh, window: window, token: token, unsaved: false, hasKey: true, config: bearer, now: putRight),
                       .refreshFirst, "within the lead of the token's real end, whatever the wall clock says")
        let early = Moment(wall: 1000 - 3600 + 100, elapsed: 150)
        XCTAssertEqual(SignDecision.verdict(for: fresh, window: window, token: token, unsaved: false, hasKey: true, config: bearer, now: early), .sign)
    }

    func testTheNonceIsTheRequestsElseTheNewestOfItsOriginAndOnlyForDPoP() throws {
        let asked = SignRequest(method: "GET", url: "https://api.example.com:8443/x")
        var known = DPoPNonces()
        known.remember("n-1", for: "https://api.example.com:8443")
        known.remember("n-other", for: "https://other.example.com")
        let checked = try SignDecision(asked, url: asked.validatedURL(), config: config("dpop"))
        XCTAssertEqual(checked.nonce(known: known), "n-1", "the newest its origin asked for")
        XCTAssertNil(checked.nonce(known: nil))
        let given = try SignDecision(SignRequest(method: "GET", url: asked.url, dpopNonce: "n-2"), url: asked.validatedURL(), config: config("dpop"))
        XCTAssertEqual(given.nonce(known: known), "n-2")
        let bearer = try SignDecision(SignRequest(method: "GET", url: asked.url, dpopNonce: "n-2"), url: asked.validatedURL(), config: config())
        XCTAssertNil(bearer.nonce(known: known), "nonces are DPoP's alone")
        XCTAssertThrowsError(try SignDecision(SignRequest(method: "GET", url: asked.url, dpopNonce: String(repeating: "n", count: 513)),
                                              url: asked.validatedURL(), config: config("dpop")))
    }
}
