import Foundation
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
}
