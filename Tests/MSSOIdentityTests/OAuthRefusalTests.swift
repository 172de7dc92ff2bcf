import MSSOCore
@testable import MSSOIdentity
import MSSOProtocol
import XCTest

/// What an OAuth error answer means for the user (``OpenIDProvider/refusal(_:group:doing:)``):
/// the exit status of its cause, never "unreachable" for an answer the provider gave.
final class OAuthRefusalTests: XCTestCase {
    let group = GroupConfig(name: "g", issuer: "https://idp.example", clientID: "msso")

    func refusal(_ code: String, status: Int = 400, description: String? = nil) -> BrokerError {
        OpenIDProvider.refusal(.init(status: status, code: code, description: OpenIDProvider.OAuthError.shown(description)),
                               group: group, doing: "log in", grant: "password")
    }

    func testEachCodeHasTheStatusOfItsCause() {
        XCTAssertEqual(refusal("invalid_client").name, .configInvalid)
        XCTAssertEqual(refusal("unauthorized_client").name, .configInvalid)
        XCTAssertEqual(refusal("invalid_scope").name, .configInvalid)
        XCTAssertEqual(refusal("", status: 401).name, .configInvalid)
        for code in ["access_denied", "invalid_request", "invalid_grant", "unsupported_grant_type", "something_new"] {
            XCTAssertEqual(refusal(code).name, .loginDenied, code)
        }
    }

    func testUnauthorizedClientIsNotCalledAWrongSecret() {
        let sentence = refusal("unauthorized_client").message
        XCTAssertTrue(sentence.contains("the client is known, the grant is not allowed for it"), sentence)
        XCTAssertTrue(sentence.contains("does not let client \"msso\" use the password grant"), sentence)
        XCTAssertFalse(sentence.contains("client secret"), sentence)
    }

    func testTheProvidersWordsAreShownWithoutControlsAndCut() {
        let sentence = refusal("invalid_request", description: "Expected DPoP header,\u{1b}[31m none\u{202e} found").message
        XCTAssertTrue(sentence.hasSuffix("The identity provider said: \"Expected DPoP header,?[31m none? found\"."), sentence)
        let long = refusal("invalid_request", description: String(repeating: "é", count: 1000)).message
        XCTAssertLessThan(long.utf8.count, 700)
        XCTAssertNil(OpenIDProvider.OAuthError.shown("  \n "))
    }
}
