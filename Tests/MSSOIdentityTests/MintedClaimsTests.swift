import Foundation
import MSSOCore
@testable import MSSOIdentity
import XCTest

/// What msso reads of a minted token to decide whether to hand it out (outside test: a JWT whose
/// `aud` was missing or a number, and one whose scopes were in `scp`, were handed out unchecked).
final class MintedClaimsTests: XCTestCase {
    func jwt(_ claims: String) -> String {
        func b64(_ text: String) -> String {
            Data(text.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
                .replacingOccurrences(of: "=", with: "")
        }
        return b64(#"{"alg":"ES256"}"#) + "." + b64(claims) + ".c2ln"
    }

    func testAProvidersWordsKeepNoSecretSentInAnyEncoding() {
        let secret = "Vp0zHk2L9qRt7WmXcB4n"
        let basic = Data("msso:\(secret)".utf8).base64EncodedString()
        let body = Data("grant_type=refresh_token&refresh_token=N0XlxfYO6HHT5Zqo".utf8).base64EncodedString()
        let said = OpenIDProvider.withoutSecrets("no: \(secret), Basic \(basic), body \(body), %4e%30%58%6c%78%66%59%4f%36", sent: [secret])!
        XCTAssertFalse(said.contains(secret) || said.contains(basic) || said.contains(body) || said.contains("%4e%30"), said)
        XCTAssertTrue(said.hasPrefix("no: [a secret msso sent], Basic […], body […]"), said)
        for words in ["invalid redirect_uri http://127.0.0.1:4600/callback", "unauthorized_client_for_this_grant_type",
                      "The access token provided is expired, revoked, malformed, or invalid for other reasons.",
                      "Token refresh cannot request resources beyond the original refresh token scope"] {
            XCTAssertEqual(OpenIDProvider.withoutSecrets(words, sent: []), words)
        }
    }

    func testAudienceAndScopesAreReadInEveryFormProvidersWriteAndNothingElse() {
        XCTAssertEqual(OpenIDProvider.jwtClaims(jwt(#"{"aud":"https://a/"}"#))?.aud, ["https://a/"])
        XCTAssertEqual(OpenIDProvider.jwtClaims(jwt(#"{"aud":["x","y"]}"#))?.aud, ["x", "y"])
        XCTAssertNil(OpenIDProvider.jwtClaims(jwt(#"{"aud":7}"#))?.aud, "a number names no audience")
        XCTAssertNil(OpenIDProvider.jwtClaims(jwt(#"{"sub":"a"}"#))?.aud)
        XCTAssertEqual(OpenIDProvider.jwtClaims(jwt(#"{"scope":"openid app1"}"#))?.scopes, ["openid", "app1"])
        XCTAssertEqual(OpenIDProvider.jwtClaims(jwt(#"{"scp":["openid","admin"]}"#))?.scopes, ["openid", "admin"])
        XCTAssertEqual(OpenIDProvider.jwtClaims(jwt(#"{"scope":"openid","scp":"admin"}"#))?.scopes, ["openid", "admin"], "both are read")
        XCTAssertNil(OpenIDProvider.jwtClaims(jwt(#"{"sub":"a"}"#))?.scopes, "no scope said")
        XCTAssertNil(OpenIDProvider.jwtClaims("an-opaque-token"))
        XCTAssertNil(OpenIDProvider.jwtClaims("a.b%.c"), "not base64url: not a JWT")
    }

    /// A server named by a scope is asked for by it alone, and its token must carry the scope's
    /// server (Entra's `api://app/.default` → `api://app`) unless `audiences` names it otherwise.
    func testAServerNamedByAScopeExpectsTheScopesServerOrItsNamedAudience() {
        var group = GroupConfig(name: "g", issuer: "https://i.example", clientID: "c")
        group.resourceScopes = ["https://git/": "api://git/.default", "https://graph/": "https://graph.microsoft.com/.default",
                                "https://kc/": "kubernetes-audience", "https://odd/": "api://"]
        group.audiences = ["https://k8s/": "kubernetes", "https://kc/": "kubernetes"]
        func names(_ resource: String) -> [String?] {
            let named = OpenIDProvider.serverNames(group, resource)
            return [named.scope, named.audience, named.expected]
        }
        XCTAssertEqual(names("https://git/"), ["api://git/.default", nil, "api://git"])
        XCTAssertEqual(names("https://graph/"), ["https://graph.microsoft.com/.default", nil, "https://graph.microsoft.com"])
        XCTAssertEqual(names("https://kc/"), ["kubernetes-audience", "kubernetes", "kubernetes"])
        XCTAssertEqual(names("https://odd/"), ["api://", nil, "api://"])
        XCTAssertEqual(names("https://k8s/"), [nil, "kubernetes", "kubernetes"])
        XCTAssertEqual(names("https://plain/"), [nil, nil, "https://plain/"])
    }
}
