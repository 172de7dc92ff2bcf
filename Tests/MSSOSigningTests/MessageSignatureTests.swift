import Crypto
import Foundation
@testable import MSSOSigning
import XCTest

final class MessageSignatureTests: XCTestCase {
    /// RFC 9421 appendix B.1.4: test-key-ed25519 (PKCS#8; the last 32 bytes are the seed).
    let rfcKey = try! SigningKey(kind: .ed25519, rawPrivate: Data(
        base64Encoded: "MC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF")!.suffix(32))

    /// RFC 9421 appendix B.2's test request.
    let rfcRequest = MessageSignature.Request(
        method: "POST", url: URL(string: "https://example.com/foo?param=Value&Pet=dog")!,
        headers: [("Host", "example.com"), ("Date", "Tue, 20 Apr 2021 02:07:55 GMT"), ("Content-Type", "application/json"),
                  ("Content-Digest", "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:"),
                  ("Content-Length", "18")])

    func testTheRFCsEd25519VectorB26ByteForByte() throws {
        let components = ["date", "@method", "@path", "@authority", "content-type", "content-length"]
        let parameters = MessageSignature.Parameters(created: 1_618_884_473, keyID: "test-key-ed25519")
        let base = try MessageSignature.base(rfcRequest, components: components, parameters: parameters)
        XCTAssertEqual(base, """
            "date": Tue, 20 Apr 2021 02:07:55 GMT
            "@method": POST
            "@path": /foo
            "@authority": example.com
            "content-type": application/json
            "content-length": 18
            "@signature-params": ("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519"
            """)
        let signed = try MessageSignature.sign(rfcRequest, components: components, parameters: parameters, label: "sig-b26", key: rfcKey)
        XCTAssertEqual(signed.signatureInput, #"sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519""#)
        XCTAssertEqual(signed.signature, "sig-b26=:wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==:")
    }

    func testDerivedComponents() throws {
        let request = MessageSignature.Request(method: "get", url: URL(string: "https://API.example.com:443/a%20b?x=1&y")!, headers: [])
        let base = try MessageSignature.base(request, components: ["@method", "@authority", "@path", "@query", "@target-uri", "@request-target"],
                                             parameters: .init())
        XCTAssertEqual(base.split(separator: "\n").prefix(6).joined(separator: "\n"), """
            "@method": GET
            "@authority": api.example.com
            "@path": /a%20b
            "@query": ?x=1&y
            "@target-uri": https://API.example.com:443/a%20b?x=1&y
            "@request-target": /a%20b?x=1&y
            """)
        XCTAssertThrowsError(try MessageSignature.base(request, components: ["content-type"], parameters: .init()))
    }

    func testFieldValuesAreTrimmedAndCombined() throws {
        let request = MessageSignature.Request(method: "GET", url: URL(string: "https://a.example/")!,
                                               headers: [("X-A", " \tone two\t "), ("x-a", "three"), ("X-B", " \t "), ("X-C", "é ")])
        let base = try MessageSignature.base(request, components: ["x-a", "x-b", "x-c"], parameters: .init())
        XCTAssertEqual(Array(base.split(separator: "\n", omittingEmptySubsequences: false).prefix(3)),
                       [#""x-a": one two, three"#, #""x-b": "#, #""x-c": é"#])
    }

    func testParametersAndContentDigest() throws {
        let digest = MessageSignature.contentDigest(sha256: Data(SHA256.hash(data: Data(#"{"hello": "world"}"#.utf8))))
        XCTAssertEqual(digest, "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:") // RFC 9530 appendix B.1
        let parameters = MessageSignature.Parameters(created: 1, expires: 2, nonce: "n", algorithm: "ed25519", keyID: "k", tag: "t")
        let signed = try MessageSignature.sign(rfcRequest, components: ["@method"], parameters: parameters, key: rfcKey)
        XCTAssertEqual(signed.signatureInput, #"sig1=("@method");created=1;expires=2;nonce="n";alg="ed25519";keyid="k";tag="t""#)
    }
}

final class DPoPProofTests: XCTestCase {
    func testAProofSaysWhatItBindsAndVerifies() throws {
        let key = SigningKey.generate(.p256)
        let proof = try DPoPProof.make(key: key, method: "post", url: URL(string: "https://rs.example/api/items?page=2#top")!,
                                       accessToken: "token-123", nonce: "n-1", issuedAt: 1_700_000_000, jti: "j-1")
        let parts = proof.split(separator: ".").map(String.init)
        XCTAssertEqual(parts.count, 3)
        func decode(_ part: String) throws -> [String: Any] {
            var text = part.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
            text += String(repeating: "=", count: (4 - text.count % 4) % 4)
            return try JSONSerialization.jsonObject(with: Data(base64Encoded: text)!) as! [String: Any]
        }
        let header = try decode(parts[0]), claims = try decode(parts[1])
        XCTAssertEqual(header["typ"] as? String, "dpop+jwt")
        XCTAssertEqual(header["alg"] as? String, "ES256")
        XCTAssertEqual((header["jwk"] as? [String: String])?["kty"], "EC")
        XCTAssertNil((header["jwk"] as? [String: String])?["d"], "no private part in the proof")
        XCTAssertEqual(claims["htm"] as? String, "POST")
        XCTAssertEqual(claims["htu"] as? String, "https://rs.example/api/items")
        XCTAssertEqual(claims["ath"] as? String, Base64URL.encode(Data(SHA256.hash(data: Data("token-123".utf8)))))
        XCTAssertEqual(claims["nonce"] as? String, "n-1")
        XCTAssertEqual(claims["iat"] as? Int, 1_700_000_000)

        var signature = parts[2].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        signature += String(repeating: "=", count: (4 - signature.count % 4) % 4)
        XCTAssertTrue(key.isValidSignature(Data(base64Encoded: signature)!, for: Data((parts[0] + "." + parts[1]).utf8)))
    }

    func testThumbprintOfTheRFC7638Example() throws {
        // RFC 8037 appendix A.3: the Ed25519 key of A.1 has thumbprint kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k.
        let key = try SigningKey(kind: .ed25519, rawPrivate: Data(base64Encoded: "nWGxne/9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A=")!)
        XCTAssertEqual(key.publicJWKJSON, #"{"crv":"Ed25519","kty":"OKP","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}"#)
        XCTAssertEqual(key.thumbprint, "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k")
    }

    func testClaimStringsAreValidJSON() throws {
        let tricky = "a\"b\\c\nd\u{01}é"
        let decoded = try JSONDecoder().decode(String.self, from: Data(DPoPProof.json(tricky).utf8))
        XCTAssertEqual(decoded, tricky)
    }

    func testEveryProofIsUnique() throws {
        let key = SigningKey.generate(.ed25519)
        let url = URL(string: "https://rs.example/")!
        let proofs = try (0..<100).map { _ in try DPoPProof.make(key: key, method: "GET", url: url) }
        XCTAssertEqual(Set(proofs).count, 100)
    }

    func testQuotedEscapesBackslashAndQuoteAndKeepsOtherCharacters() {
        func quoted(_ text: String) -> String {
            var out = ""
            appendQuoted(text, to: &out)
            return out
        }
        XCTAssertEqual(quoted(#"a"b\c"#), #""a\"b\\c""#)
        XCTAssertEqual(quoted("é\"ü"), "\"é\\\"ü\"")
        XCTAssertEqual(quoted("éü"), "\"éü\"")
        XCTAssertEqual(quoted(""), "\"\"")
    }

    func testBase64MatchesRFC4648AndFoundationInBothAlphabets() {
        // RFC 4648 §10's vectors.
        let vectors = ["": "", "f": "Zg==", "fo": "Zm8=", "foo": "Zm9v", "foob": "Zm9vYg==", "fooba": "Zm9vYmE=", "foobar": "Zm9vYmFy"]
        for (text, encoded) in vectors {
            XCTAssertEqual(Base64.encode(Data(text.utf8), alphabet: Base64.standardAlphabet, padded: true), encoded)
            XCTAssertEqual(Base64URL.encode(Data(text.utf8)), encoded.replacingOccurrences(of: "=", with: ""))
        }
        var generator = SystemRandomNumberGenerator()
        for count in 0..<200 {
            let bytes = Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) })
            let standard = bytes.base64EncodedString()
            XCTAssertEqual(Base64.encode(bytes, alphabet: Base64.standardAlphabet, padded: true), standard)
            let url = standard.replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_")
            XCTAssertEqual(Base64URL.encode(bytes), url)
            XCTAssertEqual(Base64URL.decode(url), bytes)
            XCTAssertEqual(Base64URL.encode(bytes.dropFirst(count / 2)), Base64URL.encode(Data(bytes.dropFirst(count / 2))), "a slice")
        }
    }

    func testRandomUUIDsAreVersion4WithTheStandardVariantAndDiffer() {
        let uuids = (0..<1000).map { _ in UUID.random() }
        XCTAssertEqual(Set(uuids).count, 1000)
        for uuid in uuids {
            let text = Array(uuid.uuidString)
            XCTAssertEqual(text[14], "4", uuid.uuidString)
            XCTAssertTrue("89AB".contains(text[19]), uuid.uuidString)
        }
    }
}
