@testable import MSSOProtocol
import XCTest

/// What the commands print of outside text: no character a terminal acts on.
final class TerminalTextTests: XCTestCase {
    func testPrintableTextIsUnchanged() {
        XCTAssertEqual(TerminalText.safe("com.example.suite: logged in as alice"), "com.example.suite: logged in as alice")
        XCTAssertEqual(TerminalText.safe("Grüße, Zoë — ✓ 日本"), "Grüße, Zoë — ✓ 日本")
    }

    func testControlCharactersBecomeQuestionMarks() {
        XCTAssertEqual(TerminalText.safe("\u{1B}]0;title\u{07}x\u{1B}[2Jy"), "?]0;title?x?[2Jy")
        XCTAssertEqual(TerminalText.safe("a\u{7F}b\u{9B}31mc\u{85}d"), "a?b?31mc?d")
        XCTAssertEqual(TerminalText.safe("tab\there\rcr\u{0}nul"), "tab?here?cr?nul")
        XCTAssertEqual(TerminalText.safe("\u{202E}gnp.exe\u{2066}\u{2069}\u{200F}\u{061C}"), "?gnp.exe????")
        XCTAssertEqual(TerminalText.safe("line\u{2028}sep\u{2029}"), "line?sep?")
    }

    func testNewlinesOnlyWhereTheTextIsOurs() {
        XCTAssertEqual(TerminalText.safe("one\ntwo"), "one?two")
        XCTAssertEqual(TerminalText.safe("one\ntwo\u{1B}", newlines: true), "one\ntwo?")
    }

    func testJSONKeepsValuesExactAndEscapesWhatJSONEncoderLeavesRaw() throws {
        let value = ["m": "a\u{1B}b\u{7F}c\u{9B}d\u{202E}e ✓"]
        let encoded = String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
        let safe = TerminalText.json(encoded)
        XCTAssertFalse(safe.unicodeScalars.contains { TerminalText.isHarmful($0.value, newlines: true) }, safe)
        XCTAssertEqual(try JSONDecoder().decode([String: String].self, from: Data(safe.utf8)), value)
        XCTAssertEqual(TerminalText.json("{\n  \"a\" : 1\n}"), "{\n  \"a\" : 1\n}")
    }
}
