import Crypto
import MSSOProtocol
import XCTest

final class BodyDigestTests: XCTestCase {
    func testTheStandardsVectors() {
        // FIPS 180-4 examples (NIST CSRC), and the empty message.
        XCTAssertEqual(BodyDigest.hexSHA256(Array("abc".utf8)), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(BodyDigest.hexSHA256(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)),
                       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        XCTAssertEqual(BodyDigest.hexSHA256([UInt8]()), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(BodyDigest.base64SHA256(Array("{\"hello\": \"world\"}".utf8)), "X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=")
    }

    func testEveryLengthAroundTheBlockEdgesAgreesWithSwiftCrypto() {
        var generator = SystemRandomNumberGenerator()
        for length in Array(0...200) + [1000, 4096, 65_537] {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            XCTAssertEqual(BodyDigest.sha256(bytes), Array(SHA256.hash(data: bytes)), "length \(length)")
        }
    }
}
