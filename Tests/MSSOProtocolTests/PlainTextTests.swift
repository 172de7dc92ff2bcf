import FoundationEssentials
import MSSOProtocol
import XCTest

/// The text work written once for daemon, signing code and commands.
final class PlainTextTests: XCTestCase {
    func testTrimmingTakesOnlyTheBlanksAtEitherEnd() {
        XCTAssertEqual("  \tgzip, br \t ".trimmed(), "gzip, br")
        XCTAssertEqual("a  b".trimmed(), "a  b")
        XCTAssertEqual(" \t ".trimmed(), "")
        XCTAssertEqual("".trimmed(), "")
        XCTAssertEqual(" café ☕ ".trimmed(), "café ☕")
        // An HTTP field value keeps line ends (they are refused elsewhere, not hidden here)...
        XCTAssertEqual("value\r\n".trimmed(), "value\r\n")
        // ...a secret read from a file loses them.
        XCTAssertEqual("s3cr3t\n".trimmed(newlines: true), "s3cr3t")
        XCTAssertEqual("\r\n s3cr3t \r\n".trimmed(newlines: true), "s3cr3t")
        XCTAssertEqual("Accept: x".split(separator: ":", maxSplits: 1)[1].trimmed(), "x")
    }

    func testAJSONStringDecodesToWhatWasWritten() throws {
        for text in ["plain", "", "quote \" and \\ backslash", "lines\n\r\ttab", "\u{0}\u{1}\u{8}\u{c}\u{1f}", "é ☕ \u{7f} \u{2028}"] {
            let literal = JSONString.literal(text)
            XCTAssertEqual(try JSONDecoder().decode(String.self, from: Data(literal.utf8)), text)
            XCTAssertFalse(literal.utf8.dropFirst().dropLast().contains { $0 < 0x20 }, literal)
        }
        XCTAssertEqual(JSONString.literal("a\"b\n\u{1}"), #""a\"b\n\u0001""#)
    }

    func testHexIsTwoLowercaseDigitsAByte() {
        XCTAssertEqual(Hex.lowercase([0x00, 0x0f, 0xa5, 0xff] as [UInt8]), "000fa5ff")
        XCTAssertEqual(Hex.lowercase([UInt8]()), "")
        XCTAssertEqual(BodyDigest.hexSHA256(Array("abc".utf8)), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        let (a, b) = (Hex.random(digits: 24), Hex.random(digits: 24))
        XCTAssertEqual(a.utf8.count, 24)
        XCTAssertTrue(a.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }, a)
        XCTAssertNotEqual(a, b)
    }
}
