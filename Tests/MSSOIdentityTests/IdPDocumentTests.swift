import Foundation
import MSSOCore
@testable import MSSOIdentity
import MSSOProtocol
import XCTest

final class IdPDocumentTests: XCTestCase {
    let group = GroupConfig(name: "g", issuer: "https://idp.example/realms/corp", clientID: "msso")

    func discovery(_ fields: [String: String]) -> Data {
        try! JSONSerialization.data(withJSONObject: fields)
    }

    func testDiscoveryMustNameTheConfiguredIssuerExactly() throws {
        let good = discovery(["issuer": group.issuer, "token_endpoint": "https://idp.example/token"])
        XCTAssertEqual(try IdPEndpoints(discovery: good, group: group).token.absoluteString, "https://idp.example/token")
        let lying = discovery(["issuer": "https://evil.example", "token_endpoint": "https://idp.example/token"])
        XCTAssertThrowsError(try IdPEndpoints(discovery: lying, group: group)) { error in
            XCTAssertTrue("\(error)".contains("says its issuer is \"https://evil.example\", not the configured one"), "\(error)")
        }
        let trailing = discovery(["issuer": group.issuer + "/", "token_endpoint": "https://idp.example/token"])
        XCTAssertThrowsError(try IdPEndpoints(discovery: trailing, group: group), "identical means identical")
    }

    func testTheClientAuthenticationIsTheConfiguredOneElseTheBestTheProviderOffers() throws {
        func chosen(_ offered: [String]?, secret: ClientSecretSource = .inline("s"), key: String? = nil,
                    configured: ClientAuthentication? = nil) throws -> ClientAuthentication {
            var fields: [String: Any] = ["issuer": group.issuer, "token_endpoint": "https://idp.example/token"]
            fields["token_endpoint_auth_methods_supported"] = offered
            var config = group
            config.clientSecret = secret
            config.clientKeyFile = key
            config.clientAuthentication = configured
            return try IdPEndpoints(discovery: try JSONSerialization.data(withJSONObject: fields), group: config).clientAuthentication(config)
        }
        XCTAssertEqual(try chosen(nil), .clientSecretBasic, "OAuth's default when the provider does not say")
        XCTAssertEqual(try chosen(["client_secret_post", "client_secret_basic"]), .clientSecretBasic)
        XCTAssertEqual(try chosen(["client_secret_post", "private_key_jwt"]), .clientSecretPost)
        XCTAssertEqual(try chosen(["client_secret_basic"], secret: .none), ClientAuthentication.none, "a public client")
        XCTAssertEqual(try chosen(["client_secret_basic"], secret: .none, key: "/k.pem"), .privateKeyJWT)
        XCTAssertEqual(try chosen(["client_secret_basic"], configured: .clientSecretPost), .clientSecretPost, "the administrator knows best")
    }

    func testGooglesDeviceAnswerNamesItsAddressVerificationURL() throws {
        let google = try JSONDecoder().decode(DeviceAuthorization.self, from: Data("""
            {"device_code": "d", "user_code": "ABCD-EFGH", "verification_url": "https://www.google.com/device", "expires_in": 1800, "interval": 5}
            """.utf8))
        XCTAssertEqual(google.verification_uri, "https://www.google.com/device")
        let both = try JSONDecoder().decode(DeviceAuthorization.self, from: Data("""
            {"device_code": "d", "user_code": "U", "verification_uri": "https://idp.example/device", "verification_url": "https://elsewhere.example/"}
            """.utf8))
        XCTAssertEqual(both.verification_uri, "https://idp.example/device", "RFC 8628's name wins")
        XCTAssertThrowsError(try JSONDecoder().decode(DeviceAuthorization.self, from: Data(#"{"device_code": "d", "user_code": "U"}"#.utf8)))
    }

    func testOAuthMetadataIsLookedForWhereRFC8414PutsItThenAfterTheIssuer() {
        XCTAssertEqual(IdPEndpoints.metadataURLs(issuer: "https://idp.example/o").map(\.absoluteString),
                       ["https://idp.example/.well-known/oauth-authorization-server/o",
                        "https://idp.example/o/.well-known/oauth-authorization-server"])
        XCTAssertEqual(IdPEndpoints.metadataURLs(issuer: "https://idp.example/realms/corp/").map(\.absoluteString),
                       ["https://idp.example/.well-known/oauth-authorization-server/realms/corp",
                        "https://idp.example/realms/corp/.well-known/oauth-authorization-server"])
        XCTAssertEqual(IdPEndpoints.metadataURLs(issuer: "http://127.0.0.1:8000").map(\.absoluteString),
                       ["http://127.0.0.1:8000/.well-known/oauth-authorization-server"])
    }

    func testEveryEndpointIsHttpsUnlessOnLoopback() throws {
        for endpoint in ["http://idp.example/token", "ftp://idp.example/token", "https:///token", "token"] {
            let document = discovery(["issuer": group.issuer, "token_endpoint": endpoint])
            XCTAssertThrowsError(try IdPEndpoints(discovery: document, group: group), endpoint)
        }
        let revocation = discovery(["issuer": group.issuer, "token_endpoint": "https://idp.example/token",
                                    "revocation_endpoint": "http://10.0.0.1/revoke"])
        XCTAssertThrowsError(try IdPEndpoints(discovery: revocation, group: group))
        let local = GroupConfig(name: "g", issuer: "http://127.0.0.1:4599/api/oidc", clientID: "msso")
        let loopback = discovery(["issuer": local.issuer, "token_endpoint": "http://127.0.0.1:4599/api/oidc/token"])
        XCTAssertNoThrow(try IdPEndpoints(discovery: loopback, group: local))
    }

    func testOnlyALoopbackAddressMayBePlainHttp() throws {
        let local = GroupConfig(name: "g", issuer: "http://127.0.0.1:4599/api/oidc", clientID: "msso")
        // Names that only look like loopback addresses are hosts anywhere: refused over http.
        for endpoint in ["http://127.attacker.example/token", "http://127.0.0.1.attacker.example/token",
                         "http://127.0.0.256/token", "http://127.0.0/token", "http://127.0.0.1./token",
                         "http://0.0.0.0:4599/token", "http://localhost.attacker.example/token"] {
            let document = discovery(["issuer": local.issuer, "token_endpoint": endpoint])
            XCTAssertThrowsError(try IdPEndpoints(discovery: document, group: local), endpoint) { error in
                XCTAssertTrue("\(error)".contains("not https"), "\(error)")
            }
        }
        for endpoint in ["http://127.0.0.1:4599/token", "http://127.1.2.3/token", "http://localhost:4599/token",
                         "http://[::1]:4599/token"] {
            let document = discovery(["issuer": local.issuer, "token_endpoint": endpoint])
            XCTAssertNoThrow(try IdPEndpoints(discovery: document, group: local), endpoint)
        }
        XCTAssertTrue(ProxySettings(environment: ["https_proxy": "http://proxy.corp:3128"])
            .applies(to: URL(string: "https://127.attacker.example/x")!), "not loopback: proxied like any host")
    }

    func testHostileNumbersAreBroughtIntoRange() throws {
        func device(_ interval: String, _ expires: String = "600") throws -> DeviceAuthorization {
            try JSONDecoder().decode(DeviceAuthorization.self, from: Data("""
                {"device_code":"d","user_code":"U","verification_uri":"https://i/d","expires_in":\(expires),"interval":\(interval)}
                """.utf8))
        }
        XCTAssertEqual(try device("1e20").pollInterval, 60)
        XCTAssertEqual(try device("\"inf\"").pollInterval, 5, "not a finite number: the default")
        XCTAssertEqual(try device("-3").pollInterval, 1)
        XCTAssertEqual(try device("5", "1e300").lifetime, 3600)
        let token = try JSONDecoder().decode(TokenResponse.self, from: Data(#"{"access_token":"a","expires_in":1e30}"#.utf8))
        XCTAssertEqual(try token.tokens(group: group, dpop: false).expiresIn, TokenResponse.maximumLifetime)
        let empty = try JSONDecoder().decode(TokenResponse.self, from: Data(#"{"access_token":""}"#.utf8))
        XCTAssertThrowsError(try empty.tokens(group: group, dpop: false))
    }

    func testRetryAfterInSecondsOrAsADate() {
        XCTAssertEqual(IdPHTTP.retryAfter("120"), 120)
        XCTAssertEqual(IdPHTTP.httpDate("Sun, 06 Nov 1994 08:49:37 GMT"), 784_111_777)
        XCTAssertEqual(IdPHTTP.retryAfter("Sun, 06 Nov 1994 08:49:37 GMT"), 0, "a date in the past: now")
        XCTAssertNil(IdPHTTP.retryAfter("soon"))
        XCTAssertNil(IdPHTTP.retryAfter("-5"))
    }

    func testProxiesAreChosenAsCurlChoosesThem() {
        let settings = ProxySettings(environment: ["https_proxy": "http://proxy.corp:3128", "no_proxy": "internal.corp, .example.org"])
        XCTAssertTrue(settings.applies(to: URL(string: "https://login.microsoftonline.com/x")!))
        XCTAssertFalse(settings.applies(to: URL(string: "https://sso.internal.corp/x")!), "a subdomain of an exempt host")
        XCTAssertFalse(settings.applies(to: URL(string: "https://idp.example.org/x")!), "a leading dot changes nothing")
        XCTAssertFalse(settings.applies(to: URL(string: "http://127.0.0.1:4599/x")!), "loopback is never proxied")
        XCTAssertFalse(ProxySettings(environment: ["HTTPS_PROXY": "proxy:8080", "NO_PROXY": "*"]).applies(to: URL(string: "https://a.example/")!))
        XCTAssertTrue(ProxySettings(environment: ["HTTPS_PROXY": "proxy:8080"]).applies(to: URL(string: "https://a.example/")!))
        XCTAssertFalse(ProxySettings(environment: [:]).applies(to: URL(string: "https://a.example/")!))
    }

    func testAProxyIsGivenToLibcurlAsTheURLItMeans() {
        XCTAssertEqual(ProxySettings.parse("proxy.corp:3128"), "http://proxy.corp:3128")
        XCTAssertEqual(ProxySettings.parse("proxy.corp"), "http://proxy.corp:1080", "no port: 1080")
        XCTAssertEqual(ProxySettings.parse("https://u%40corp:p%3Aw@proxy.corp:8443/ignored?x"), "http://u%40corp:p%3Aw@proxy.corp:8443",
                       "a plain CONNECT proxy, its credentials as written, nothing after the port")
        XCTAssertEqual(ProxySettings.parse("socks5://user:pw@[::1]:9050"), "socks5h://[::1]:9050", "the proxy resolves the IdP's name")
        XCTAssertNil(ProxySettings.parse("ftp://proxy.corp:21"))
        XCTAssertNil(ProxySettings.parse("http://"))
    }

    func testFormEncoding() {
        XCTAssertEqual(OpenIDProvider.formEncode("a b&c=d/é~"), "a+b%26c%3Dd%2F%C3%A9%7E")
    }
}
