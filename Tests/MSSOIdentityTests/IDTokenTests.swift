import Crypto
import CryptoExtras
import Foundation
import MSSOCore
@testable import MSSOIdentity
import MSSOProtocol
import MSSOSigning
import XCTest

/// ID token validation (OpenID Connect Core §3.1.3.7) against keys and tokens made here, and
/// against the RFC 7515 examples, signed by someone else.
final class IDTokenTests: XCTestCase {
    static let issuer = "https://idp.example/realms/corp"
    static let clientID = "msso"
    static let now: Double = 1_800_000_000
    static let secret = "the client secret, long enough for HS512 as well"

    // Made once: RSA key generation takes a while.
    static let rsa = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
    static let otherRSA = try! _RSA.Signing.PrivateKey(keySize: .bits2048)
    static let p256 = P256.Signing.PrivateKey()
    static let p384 = P384.Signing.PrivateKey()
    static let p521 = P521.Signing.PrivateKey()
    static let ed25519 = Curve25519.Signing.PrivateKey()

    static func rsaJWK(_ key: _RSA.Signing.PrivateKey, kid: String?, extra: [String: Any] = [:]) -> [String: Any] {
        let numbers = try! key.publicKey.getKeyPrimitives()
        var jwk: [String: Any] = ["kty": "RSA", "n": Base64URL.encode(numbers.modulus), "e": Base64URL.encode(numbers.publicExponent)]
        jwk["kid"] = kid
        return jwk.merging(extra) { $1 }
    }

    static func ecJWK(_ raw: Data, curve: String, kid: String?) -> [String: Any] {
        var jwk: [String: Any] = ["kty": "EC", "crv": curve, "x": Base64URL.encode(raw.prefix(raw.count / 2)), "y": Base64URL.encode(raw.suffix(raw.count / 2))]
        jwk["kid"] = kid
        return jwk
    }

    static var publishedKeys: [[String: Any]] { [
        rsaJWK(rsa, kid: "rsa-1", extra: ["use": "sig"]),
        ecJWK(p256.publicKey.rawRepresentation, curve: "P-256", kid: "ec-256"),
        ecJWK(p384.publicKey.rawRepresentation, curve: "P-384", kid: "ec-384"),
        ecJWK(p521.publicKey.rawRepresentation, curve: "P-521", kid: "ec-521"),
        ["kty": "OKP", "crv": "Ed25519", "x": Base64URL.encode(ed25519.publicKey.rawRepresentation), "kid": "ed"],
    ] }

    static func jwks(_ keys: [Any]) -> Data {
        try! JSONSerialization.data(withJSONObject: ["keys": keys])
    }

    let keys = try! JSONWebKeySet(json: IDTokenTests.jwks(IDTokenTests.publishedKeys))

    static func claims(_ changes: [String: Any?] = [:]) -> [String: Any] {
        var claims: [String: Any] = ["iss": issuer, "sub": "f81d4fae-7dec", "aud": clientID, "exp": now + 300, "iat": now - 10,
                                     "nonce": "n-0S6_WzA2Mj", "preferred_username": "alice"]
        for (name, value) in changes { claims[name] = value }
        return claims
    }

    static func encode(_ object: [String: Any]) -> String {
        Base64URL.encode(try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]))
    }

    /// A compact JWS of `claims` with `header`, its signature made by `sign` over the signing input.
    static func token(_ header: [String: Any], _ claims: [String: Any] = claims(), sign: (Data) throws -> Data) -> String {
        let input = encode(header) + "." + encode(claims)
        return input + "." + Base64URL.encode(try! sign(Data(input.utf8)))
    }

    /// A token signed with `algorithm` by the key of the published set that is meant for it.
    static func token(_ algorithm: String, kid: String?, _ claims: [String: Any] = claims()) -> String {
        var header: [String: Any] = ["alg": algorithm, "typ": "JWT"]
        header["kid"] = kid
        return token(header, claims) { input in try signature(algorithm, over: input) }
    }

    static func signature(_ algorithm: String, over input: Data, rsaKey: _RSA.Signing.PrivateKey = rsa) throws -> Data {
        switch algorithm {
        case "RS256": return try rsaKey.signature(for: SHA256.hash(data: input), padding: .insecurePKCS1v1_5).rawRepresentation
        case "RS384": return try rsaKey.signature(for: SHA384.hash(data: input), padding: .insecurePKCS1v1_5).rawRepresentation
        case "RS512": return try rsaKey.signature(for: SHA512.hash(data: input), padding: .insecurePKCS1v1_5).rawRepresentation
        case "PS256": return try rsaKey.signature(for: SHA256.hash(data: input), padding: .PSS).rawRepresentation
        case "PS384": return try rsaKey.signature(for: SHA384.hash(data: input), padding: .PSS).rawRepresentation
        case "PS512": return try rsaKey.signature(for: SHA512.hash(data: input), padding: .PSS).rawRepresentation
        case "ES256": return try p256.signature(for: input).rawRepresentation
        case "ES384": return try p384.signature(for: input).rawRepresentation
        case "ES512": return try p521.signature(for: input).rawRepresentation
        case "EdDSA": return try ed25519.signature(for: input)
        case "HS256": return Data(HMAC<SHA256>.authenticationCode(for: input, using: SymmetricKey(data: Data(secret.utf8))))
        case "HS384": return Data(HMAC<SHA384>.authenticationCode(for: input, using: SymmetricKey(data: Data(secret.utf8))))
        case "HS512": return Data(HMAC<SHA512>.authenticationCode(for: input, using: SymmetricKey(data: Data(secret.utf8))))
        default: fatalError(algorithm)
        }
    }

    func validate(_ jwt: String, keys: JSONWebKeySet? = nil, nonce: String? = "n-0S6_WzA2Mj", clientSecret: String? = nil,
                  now: Double = IDTokenTests.now) throws(IDTokenError) -> IDTokenClaims {
        try IDToken.validate(jwt, keys: keys ?? self.keys, issuer: Self.issuer, clientID: Self.clientID, nonce: nonce,
                             clientSecret: clientSecret, now: now)
    }

    /// The error `body` throws, or nil when it throws none.
    func refusal(_ body: () throws(IDTokenError) -> IDTokenClaims) -> IDTokenError? {
        do {
            _ = try body()
            return nil
        } catch {
            return error
        }
    }

    // MARK: Algorithms

    func testEveryAlgorithmIsAcceptedWithItsKey() throws {
        let kids = ["RS256": "rsa-1", "RS384": "rsa-1", "RS512": "rsa-1", "PS256": "rsa-1", "PS384": "rsa-1", "PS512": "rsa-1",
                    "ES256": "ec-256", "ES384": "ec-384", "ES512": "ec-521", "EdDSA": "ed"]
        XCTAssertEqual(keys.keys.count, 5)
        for (algorithm, kid) in kids {
            let claims = try validate(Self.token(algorithm, kid: kid))
            XCTAssertEqual(claims.subject, "f81d4fae-7dec", algorithm)
            XCTAssertEqual(claims.displayName, "alice", algorithm)
            XCTAssertEqual(claims.expiresAt, Self.now + 300, algorithm)
        }
        for algorithm in ["HS256", "HS384", "HS512"] {
            XCTAssertNoThrow(try validate(Self.token(algorithm, kid: nil), clientSecret: Self.secret), algorithm)
            // The kid of an HMAC token names no published key, and is not looked up.
            XCTAssertNoThrow(try validate(Self.token(algorithm, kid: "rsa-1"), clientSecret: Self.secret), algorithm)
        }
    }

    func testNoneAndUnknownAlgorithmsAreRefused() {
        let claims = Self.encode(Self.claims())
        for alg in ["none", "None", "NONE", "RS1", "ES256K", "A128KW", "dir", ""] {
            let jwt = Self.encode(["alg": alg]) + "." + claims + "."
            XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(jwt, clientSecret: Self.secret) },
                           .unsupportedAlgorithm(alg), alg)
        }
        // A token whose alg is not a string, or that has none.
        for header in [["alg": 1] as [String: Any], ["kid": "rsa-1"]] {
            let jwt = Self.encode(header) + "." + claims + ".AAAA"
            guard case .malformed = refusal({ () throws(IDTokenError) in try validate(jwt) }) else { return XCTFail("\(header)") }
        }
    }

    func testHMACNeedsTheClientSecretAndOnlyTheClientSecret() {
        let jwt = Self.token("HS256", kid: nil)
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(jwt) }, .needsClientSecret(.hs256))
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(jwt, clientSecret: "") }, .needsClientSecret(.hs256))
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(jwt, clientSecret: "another secret") }, .badSignature)
    }

    /// The classic confusion: an HS256 token keyed with the bytes of the provider's public RSA key,
    /// which anyone can read from the JWKS, in every form a careless verifier might use as a secret.
    func testHMACKeyedWithThePublicKeyIsRefused() throws {
        let numbers = try Self.rsa.publicKey.getKeyPrimitives()
        let jwkJSON = try JSONSerialization.data(withJSONObject: Self.rsaJWK(Self.rsa, kid: "rsa-1"), options: [.sortedKeys])
        for secret in [Self.rsa.publicKey.derRepresentation, Data(Self.rsa.publicKey.pemRepresentation.utf8), numbers.modulus, jwkJSON] {
            let jwt = Self.token(["alg": "HS256", "kid": "rsa-1"]) { input in
                Data(HMAC<SHA256>.authenticationCode(for: input, using: SymmetricKey(data: secret)))
            }
            XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(jwt) }, .needsClientSecret(.hs256))
            XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(jwt, clientSecret: Self.secret) }, .badSignature)
        }
    }

    func testTheAlgorithmMustFitTheKeysType() throws {
        // An ES256 token naming the RSA key, an RS256 token naming an EC key, ES256 naming the
        // P-384 key, ES384 naming the P-256 key, EdDSA naming an EC key: each refused before
        // any signature is checked.
        let cases: [(String, String, JWSAlgorithm)] = [("ES256", "rsa-1", .es256), ("RS256", "ec-256", .rs256),
                                                       ("ES256", "ec-384", .es256), ("ES384", "ec-256", .es384),
                                                       ("EdDSA", "ec-256", .edDSA), ("PS256", "ed", .ps256)]
        for (algorithm, kid, parsed) in cases {
            XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(Self.token(algorithm, kid: kid)) },
                           .keyMismatch(parsed, kid: kid), "\(algorithm) with \(kid)")
        }
        // A key that names its algorithm verifies that one only.
        let pinned = try JSONWebKeySet(json: Self.jwks([Self.rsaJWK(Self.rsa, kid: "rsa-1", extra: ["alg": "RS256"])]))
        XCTAssertNoThrow(try validate(Self.token("RS256", kid: "rsa-1"), keys: pinned))
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(Self.token("PS256", kid: "rsa-1"), keys: pinned) },
                       .keyMismatch(.ps256, kid: "rsa-1"))
    }

    func testASignatureByAnotherKeyWithTheSameKidIsRefused() {
        let forged = Self.token(["alg": "RS256", "kid": "rsa-1"]) { input in
            try Self.signature("RS256", over: input, rsaKey: Self.otherRSA)
        }
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(forged) }, .badSignature)
        let otherEC = P256.Signing.PrivateKey()
        let forgedEC = Self.token(["alg": "ES256", "kid": "ec-256"]) { input in try otherEC.signature(for: input).rawRepresentation }
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(forgedEC) }, .badSignature)
    }

    func testTamperingBreaksTheSignature() {
        let jwt = Self.token("ES256", kid: "ec-256")
        let parts = jwt.split(separator: ".").map(String.init)
        // Claims changed after signing.
        let changed = parts[0] + "." + Self.encode(Self.claims(["sub": "mallory"])) + "." + parts[2]
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(changed) }, .badSignature)
        // The same signature as DER, which JOSE does not use.
        let der = Self.token(["alg": "ES256", "kid": "ec-256"]) { input in try Self.p256.signature(for: input).derRepresentation }
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(der) }, .badSignature)
        // RS256 signature presented as PS256 (same key, same hash, other padding).
        let rs = Self.token(["alg": "PS256", "kid": "rsa-1"]) { input in try Self.signature("RS256", over: input) }
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(rs) }, .badSignature)
        // No signature at all.
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(parts[0] + "." + parts[1] + ".") }, .badSignature)
    }

    // MARK: Key lookup

    func testAKidNotInTheSetIsUnknownKey() {
        let jwt = Self.token(["alg": "RS256", "kid": "rotated"]) { input in try Self.signature("RS256", over: input) }
        let error = refusal { () throws(IDTokenError) in try validate(jwt) }
        XCTAssertEqual(error, .unknownKey("rotated"))
        XCTAssertEqual(error?.isUnknownKey, true)
        XCTAssertEqual(IDTokenError.badSignature.isUnknownKey, false)
        // After the caller fetches the JWKS again, with the new key in it:
        let rotated = try! JSONWebKeySet(json: Self.jwks([Self.rsaJWK(Self.rsa, kid: "rotated")]))
        XCTAssertNoThrow(try validate(jwt, keys: rotated))
    }

    func testWithoutKidTheOnlyKeyThatFitsIsUsed() throws {
        XCTAssertNoThrow(try validate(Self.token("RS256", kid: nil)), "one RSA key among EC and OKP keys")
        XCTAssertNoThrow(try validate(Self.token("ES384", kid: nil)))
        let two = try JSONWebKeySet(json: Self.jwks([Self.rsaJWK(Self.rsa, kid: "a"), Self.rsaJWK(Self.otherRSA, kid: "b")]))
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(Self.token("RS256", kid: nil), keys: two) }, .ambiguousKey(.rs256))
        let noEC = try JSONWebKeySet(json: Self.jwks([Self.rsaJWK(Self.rsa, kid: "a")]))
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(Self.token("ES256", kid: nil), keys: noEC) }, .unknownKey(nil))
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(Self.token("ES256", kid: nil), keys: JSONWebKeySet(keys: [])) },
                       .unknownKey(nil))
    }

    // MARK: The key set

    func testJunkKeysAreSkippedAndTheGoodOnesKept() throws {
        let p256 = Self.p256.publicKey.rawRepresentation
        var offCurve = p256
        offCurve[offCurve.count - 1] ^= 1
        let junk: [Any] = [
            42, "a string", NSNull(), [1, 2],
            ["kty": "oct", "k": "c2VjcmV0", "kid": "hmac"],
            Self.rsaJWK(Self.otherRSA, kid: "enc", extra: ["use": "enc"]),
            Self.rsaJWK(Self.otherRSA, kid: "ops", extra: ["key_ops": ["encrypt", "wrapKey"]]),
            Self.rsaJWK(Self.otherRSA, kid: "none", extra: ["alg": "none"]),
            Self.rsaJWK(Self.otherRSA, kid: "hs", extra: ["alg": "HS256"]),
            Self.rsaJWK(Self.otherRSA, kid: "ec-alg", extra: ["alg": "ES256"]),
            Self.rsaJWK(Self.otherRSA, kid: nil, extra: ["kid": 7]),
            ["kty": "RSA", "kid": "small", "n": Base64URL.encode(Data(repeating: 0xC1, count: 128)), "e": "AQAB"],
            ["kty": "RSA", "kid": "huge", "n": Base64URL.encode(Data(repeating: 0xC1, count: 1025)), "e": "AQAB"],
            Self.rsaJWK(Self.otherRSA, kid: "big-e", extra: ["e": Base64URL.encode(Data([1, 0, 0, 0, 1]))]),
            Self.rsaJWK(Self.otherRSA, kid: "even-e", extra: ["e": Base64URL.encode(Data([1, 0, 0]))]),
            Self.rsaJWK(Self.otherRSA, kid: "e-1", extra: ["e": "AQ"]),
            ["kty": "RSA", "kid": "no-n", "e": "AQAB"],
            ["kty": "RSA", "kid": "padded", "n": Base64URL.encode(try Self.otherRSA.publicKey.getKeyPrimitives().modulus) + "==", "e": "AQAB"],
            Self.ecJWK(offCurve, curve: "P-256", kid: "off-curve"),
            Self.ecJWK(p256.dropFirst(), curve: "P-256", kid: "short"),
            Self.ecJWK(p256, curve: "P-384", kid: "wrong-curve"),
            Self.ecJWK(p256, curve: "secp256k1", kid: "k1"),
            ["kty": "OKP", "crv": "Ed448", "x": Base64URL.encode(Data(repeating: 1, count: 57)), "kid": "ed448"],
            ["kty": "OKP", "crv": "X25519", "x": Base64URL.encode(Data(repeating: 1, count: 32)), "kid": "x25519"],
            ["kty": "EC", "crv": "P-256", "x": 1, "y": 2, "kid": "numbers"],
            ["kty": "ROT13", "kid": "unknown"],
        ]
        let mixed = try JSONWebKeySet(json: Self.jwks(junk + Self.publishedKeys))
        XCTAssertEqual(mixed.keys.map(\.id), ["rsa-1", "ec-256", "ec-384", "ec-521", "ed"])
        XCTAssertNoThrow(try validate(Self.token("RS256", kid: "rsa-1"), keys: mixed))
        XCTAssertNoThrow(try validate(Self.token("EdDSA", kid: "ed"), keys: mixed))
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(Self.token("RS256", kid: "enc"), keys: mixed) }, .unknownKey("enc"))
        // key_ops with verify, use sig: kept.
        let verifying = try JSONWebKeySet(json: Self.jwks([Self.rsaJWK(Self.rsa, kid: "v", extra: ["key_ops": ["verify"], "use": "sig"])]))
        XCTAssertEqual(verifying.keys.count, 1)
    }

    func testACoordinatePublishedWithoutItsLeadingZerosIsTheSameKey() throws {
        // glewlwyd (rhonabwy) publishes x or y without their leading zero bytes, for about one
        // key in 128: such a key verifies the provider's tokens as the full-length one does.
        var key = P256.Signing.PrivateKey()
        while key.publicKey.rawRepresentation.first != 0 { key = P256.Signing.PrivateKey() }
        let raw = key.publicKey.rawRepresentation
        let x = raw.prefix(32), y = raw.suffix(32)
        let published: [String: Any] = ["kty": "EC", "crv": "P-256", "kid": "short-x",
                                        "x": Base64URL.encode(x.drop { $0 == 0 }), "y": Base64URL.encode(y)]
        let padded: [String: Any] = ["kty": "EC", "crv": "P-256", "kid": "long-x",
                                     "x": Base64URL.encode(Data([0]) + x), "y": Base64URL.encode(y)]
        let tooLong: [String: Any] = ["kty": "EC", "crv": "P-256", "kid": "too-long",
                                      "x": Base64URL.encode(Data([1]) + x), "y": Base64URL.encode(y)]
        let set = try JSONWebKeySet(json: Self.jwks([published, padded, tooLong]))
        XCTAssertEqual(set.keys.map(\.id), ["short-x", "long-x"])
        let token = Self.token(["alg": "ES256", "kid": "short-x", "typ": "JWT"]) { try key.signature(for: $0).rawRepresentation }
        XCTAssertNoThrow(try validate(token, keys: set))
    }

    func testTheKeySetIsBounded() throws {
        XCTAssertThrowsError(try JSONWebKeySet(json: Data("not json".utf8))) { XCTAssertEqual($0 as? JSONWebKeySetError, .notAKeySet) }
        XCTAssertThrowsError(try JSONWebKeySet(json: Data("{\"keys\":{}}".utf8))) { XCTAssertEqual($0 as? JSONWebKeySetError, .notAKeySet) }
        XCTAssertThrowsError(try JSONWebKeySet(json: Data("[]".utf8))) { XCTAssertEqual($0 as? JSONWebKeySetError, .notAKeySet) }
        let big = Data(("{\"keys\":[],\"pad\":\"" + String(repeating: "x", count: 65536) + "\"}").utf8)
        XCTAssertThrowsError(try JSONWebKeySet(json: big)) { XCTAssertEqual($0 as? JSONWebKeySetError, .tooLarge(bytes: big.count)) }
        let many = Self.jwks(Array(repeating: ["kty": "oct"], count: 101))
        XCTAssertThrowsError(try JSONWebKeySet(json: many)) { XCTAssertEqual($0 as? JSONWebKeySetError, .tooManyKeys(101)) }
        XCTAssertEqual(try JSONWebKeySet(json: Self.jwks(Array(repeating: ["kty": "oct"], count: 100))).keys.count, 0)
        XCTAssertEqual(try JSONWebKeySet(json: Data("{\"keys\":[]}".utf8)).keys.count, 0)
        let error = JSONWebKeySetError.tooManyKeys(101).brokerError(group: GroupConfig(name: "corp", issuer: Self.issuer, clientID: Self.clientID))
        XCTAssertEqual(error.name, .idpUnavailable)
        XCTAssertTrue(error.message.contains("\"corp\""), error.message)
    }

    // MARK: Claims

    func testClaimRules() {
        func refused(_ changes: [String: Any?], nonce: String? = "n-0S6_WzA2Mj", now: Double = IDTokenTests.now) -> IDTokenError? {
            refusal { () throws(IDTokenError) in try validate(Self.token("ES256", kid: "ec-256", Self.claims(changes)), nonce: nonce, now: now) }
        }
        XCTAssertNil(refused([:]))
        XCTAssertEqual(refused(["iss": "https://evil.example"]), .issuer("https://evil.example"))
        XCTAssertEqual(refused(["iss": Self.issuer + "/"]), .issuer(Self.issuer + "/"), "identical means identical")
        XCTAssertEqual(refused(["aud": "another-client"]), .audience(Self.clientID))
        XCTAssertEqual(refused(["aud": ["another-client", "third"]]), .audience(Self.clientID))
        XCTAssertEqual(refused(["aud": [String]()]), .missingClaim("aud"))
        XCTAssertEqual(refused(["aud": [Self.clientID, "api"]]), .authorizedParty(Self.clientID), "several audiences, no azp")
        XCTAssertEqual(refused(["aud": [Self.clientID, "api"], "azp": "api"]), .authorizedParty(Self.clientID))
        XCTAssertNil(refused(["aud": [Self.clientID, "api"], "azp": Self.clientID]))
        XCTAssertNil(refused(["aud": [Self.clientID]]), "an array of one")
        XCTAssertEqual(refused(["azp": "another-client"]), .authorizedParty(Self.clientID), "an azp present must be this client")
        XCTAssertEqual(refused(["exp": Self.now - 301]), .expired(at: Self.now - 301))
        XCTAssertNil(refused(["exp": Self.now - 299]), "within the leeway")
        XCTAssertEqual(refused(["iat": Self.now + 301]), .issuedInFuture(at: Self.now + 301))
        XCTAssertNil(refused(["iat": Self.now + 299]), "within the leeway")
        XCTAssertEqual(refused(["nbf": Self.now + 400]), .notYetValid(at: Self.now + 400))
        XCTAssertEqual(refused(["nonce": "another login's"]), .nonce)
        XCTAssertEqual(refused(["nonce": nil]), .nonce, "a nonce was sent: the token must carry it")
        XCTAssertNil(refused(["nonce": nil], nonce: nil), "no nonce sent (device, password, refresh)")
        XCTAssertNil(refused(["nonce": "whatever"], nonce: nil), "no nonce sent: the token's is not looked at")
        for claim in ["iss", "sub", "aud", "exp", "iat"] {
            XCTAssertEqual(refused([claim: nil]), .missingClaim(claim), claim)
        }
        XCTAssertEqual(refused(["exp": "\(Self.now + 300)"]), .missingClaim("exp"), "a number as a string is not a NumericDate")
        XCTAssertEqual(refused(["sub": ["alice"]]), .missingClaim("sub"))
        XCTAssertEqual(refused(["sub": ""]), .missingClaim("sub"))
    }

    func testMalformedAndOversizedTokensAreRefused() {
        let jwt = Self.token("ES256", kid: "ec-256")
        let parts = jwt.split(separator: ".").map(String.init)
        for bad in ["", jwt + ".", parts[0] + "." + parts[1], "a.b.c.d", parts[0] + "=." + parts[1] + "." + parts[2],
                    parts[0] + "." + parts[1] + "." + parts[2] + "==", "!!!." + parts[1] + "." + parts[2]] {
            guard case .malformed = refusal({ () throws(IDTokenError) in try validate(bad) }) else { return XCTFail(bad) }
        }
        // A payload that is not JSON, under a valid signature.
        let notJSON = Self.encode(["alg": "ES256", "kid": "ec-256"]) + "." + Base64URL.encode(Data("not json".utf8))
        let signed = notJSON + "." + Base64URL.encode(try! Self.p256.signature(for: Data(notJSON.utf8)).rawRepresentation)
        guard case .malformed = refusal({ () throws(IDTokenError) in try validate(signed) }) else { return XCTFail("payload") }
        // Past the bound, refused before anything is decoded.
        let huge = Self.token("ES256", kid: "ec-256", Self.claims(["pad": String(repeating: "x", count: 16384)]))
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(huge) }, .tooLarge(bytes: huge.utf8.count))
        // A critical extension msso does not understand.
        let critical = Self.token(["alg": "ES256", "kid": "ec-256", "crit": ["exp"], "exp": 1]) { input in try Self.p256.signature(for: input).rawRepresentation }
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(critical) }, .criticalHeader)
    }

    /// A key the token carries in its header (`jwk`) is not a key the provider publishes.
    func testAKeyInTheHeaderIsNotTrusted() throws {
        let attacker = P256.Signing.PrivateKey()
        let raw = attacker.publicKey.rawRepresentation
        let header: [String: Any] = ["alg": "ES256", "kid": "attacker", "jwk": Self.ecJWK(raw, curve: "P-256", kid: "attacker")]
        let jwt = Self.token(header) { input in try attacker.signature(for: input).rawRepresentation }
        XCTAssertEqual(refusal { () throws(IDTokenError) in try validate(jwt) }, .unknownKey("attacker"))
    }

    // MARK: Display name

    func testDisplayNamePreferenceAndFallback() throws {
        func name(_ changes: [String: Any?]) throws -> String? {
            try validate(Self.token("EdDSA", kid: "ed", Self.claims(changes))).displayName
        }
        let all: [String: Any?] = ["preferred_username": "alice", "email": "alice@example.com", "name": "Alice Liddell", "sub": "f81d"]
        XCTAssertEqual(try name(all), "alice")
        XCTAssertEqual(try name(all.merging(["preferred_username": nil]) { $1 }), "alice@example.com")
        XCTAssertEqual(try name(all.merging(["preferred_username": nil, "email": nil]) { $1 }), "Alice Liddell")
        XCTAssertEqual(try name(["preferred_username": nil]), nil, "the subject is not a name people know")
        XCTAssertEqual(try validate(Self.token("EdDSA", kid: "ed", Self.claims(["preferred_username": nil]))).subject, "f81d4fae-7dec")
        XCTAssertEqual(try name(all.merging(["preferred_username": "alice\u{1B}[2J"]) { $1 }), "alice@example.com", "an escape sequence")
        XCTAssertEqual(try name(all.merging(["preferred_username": "evil\u{202E}gnp.exe", "email": "a\nb"]) { $1 }), "Alice Liddell", "bidi override, newline")
        XCTAssertEqual(try name(all.merging(["preferred_username": String(repeating: "é", count: 128)]) { $1 }), "alice@example.com", "256 bytes")
        XCTAssertEqual(try name(all.merging(["preferred_username": String(repeating: "a", count: 255)]) { $1 }), String(repeating: "a", count: 255))
        XCTAssertEqual(try name(all.merging(["preferred_username": 42, "email": ""]) { $1 }), "Alice Liddell", "not a string, empty")
        XCTAssertEqual(try name(["preferred_username": "\u{7}", "sub": "\u{9B}31m"]), nil, "nothing displayable")
        XCTAssertEqual(try name(["preferred_username": "Zoë 😀"]), "Zoë 😀")
    }

    // MARK: Errors as the user sees them

    func testErrorsNameTheCauseAndTheFixWithoutTheToken() {
        let group = GroupConfig(name: "G", issuer: Self.issuer, clientID: Self.clientID)
        let expectations: [(IDTokenError, ErrorName, String)] = [
            (.unknownKey("k-9"), .idpUnavailable, "the identity provider of \"G\" sent an ID token signed with a key it does not publish (kid \"k-9\")"),
            (.unknownKey(nil), .idpUnavailable, "no kid"),
            (.audience("msso"), .configInvalid, "whose audience is not client_id \"msso\""),
            (.authorizedParty("msso"), .configInvalid, "authorized party (azp) is not client_id \"msso\""),
            (.expired(at: 1_300_819_380), .idpUnavailable, "that expired at 2011-03-22T18:43:00Z"),
            (.issuedInFuture(at: 951_782_400), .idpUnavailable, "issued at 2000-02-29T00:00:00Z"),
            (.nonce, .loginDenied, "whose nonce does not match the login's: the answer was not for this login"),
            (.issuer("https://evil.example"), .configInvalid, "from issuer \"https://evil.example\", not the configured \(Self.issuer)"),
            (.unsupportedAlgorithm("none"), .configInvalid, "signed with \"none\""),
            (.needsClientSecret(.hs256), .configInvalid, "or configure the client secret"),
            (.badSignature, .idpUnavailable, "signature does not verify"),
            (.keyMismatch(.es256, kid: "rsa-1"), .idpUnavailable, "signed with ES256, which its key \"rsa-1\" is not for"),
            (.missingClaim("sub"), .idpUnavailable, "without the \"sub\" claim"),
        ]
        for (error, name, phrase) in expectations {
            let broker = error.brokerError(group: group)
            XCTAssertEqual(broker.name, name, "\(error)")
            XCTAssertTrue(broker.message.contains(phrase), broker.message)
        }
        // What the token says is cut short and made safe for a terminal.
        let hostile = IDTokenError.unknownKey("\u{1B}]0;owned\u{7}" + String(repeating: "k", count: 200)).brokerError(group: group)
        XCTAssertFalse(hostile.message.unicodeScalars.contains { $0.value < 0x20 }, hostile.message)
        XCTAssertLessThan(hostile.message.utf8.count, 400)
        XCTAssertEqual(IDTokenError.utc(4_102_444_799), "2099-12-31T23:59:59Z")
        XCTAssertEqual(IDTokenError.utc(0), "1970-01-01T00:00:00Z")
    }

    // MARK: Known answers (RFC 7515 Appendix A.2 and A.3)

    // The examples' payload: {"iss":"joe",\r\n "exp":1300819380,\r\n "http://example.com/is_root":true}
    static let rfcPayload = "eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ"
    // A.2: RS256 with the RSA key of A.2.1 (its public half).
    static let rfcRS256 = "eyJhbGciOiJSUzI1NiJ9." + rfcPayload + "."
        + "cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw"
    static var rfcRSAKey: [String: Any] { [
        "kty": "RSA", "e": "AQAB",
        "n": "ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMs"
            + "D1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdV"
            + "MTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ",
    ] }
    // A.3: ES256 with the P-256 key of A.3.1 (its public half). The signature has a high s,
    // which ECDSA allows and JWS does not forbid.
    static let rfcES256 = "eyJhbGciOiJFUzI1NiJ9." + rfcPayload + "."
        + "DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q"
    static var rfcECKey: [String: Any] { [
        "kty": "EC", "crv": "P-256", "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0",
    ] }

    /// The RFC's tokens verify with the RFC's keys: the verifier agrees with an independent
    /// signer. Their claims are not an ID token's (no sub, no aud), so validation gets past the
    /// signature and stops at the claims; a single changed signature bit stops it at the signature.
    func testRFC7515ExamplesVerify() throws {
        for (jwt, jwk, algorithm) in [(Self.rfcRS256, Self.rfcRSAKey, JWSAlgorithm.rs256), (Self.rfcES256, Self.rfcECKey, .es256)] {
            let keys = try JSONWebKeySet(json: Self.jwks([jwk]))
            XCTAssertEqual(keys.keys.count, 1)
            let parts = jwt.split(separator: ".").map(String.init)
            let signature = try XCTUnwrap(Base64URL.decode(parts[2]))
            let input = Data(jwt.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
            XCTAssertTrue(keys.keys[0].isValidSignature(signature, algorithm: algorithm, for: input), "\(algorithm)")
            var flipped = signature
            flipped[10] ^= 0x01
            XCTAssertFalse(keys.keys[0].isValidSignature(flipped, algorithm: algorithm, for: input), "\(algorithm)")

            func validate(_ jwt: String) -> IDTokenError? {
                refusal { () throws(IDTokenError) in
                    try IDToken.validate(jwt, keys: keys, issuer: "joe", clientID: "msso", nonce: nil, clientSecret: nil, now: 1_300_819_000)
                }
            }
            XCTAssertEqual(validate(jwt), .missingClaim("sub"), "\(algorithm): past the signature")
            let tampered = parts[0] + "." + parts[1] + "." + Base64URL.encode(flipped)
            XCTAssertEqual(validate(tampered), .badSignature, "\(algorithm)")
        }
    }
}
