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
}
