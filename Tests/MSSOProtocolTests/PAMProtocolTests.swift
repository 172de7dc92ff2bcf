import Foundation
@testable import MSSOProtocol
import XCTest

/// C cannot import the Swift definition of the protocol, so it has one C copy, libmsso's
/// clients/c/msso_protocol.h (which the PAM module and the C library both include). Its constants
/// (the frame cap, the protocol version, the method names) and lists of names (session states,
/// signals, errors) are generated from protocol/names.json, as the Swift ones are
/// (scripts/generate-names; Tests/e2e/test_wire_names.py checks both are current), and are
/// compared with the compiled Swift here too. And pam/ must take them from the header, never
/// retype them.
final class PAMProtocolTests: XCTestCase {
    func file(_ path: String) throws -> String {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../\(path)")
        return try String(contentsOf: url, encoding: .utf8)
    }

    func source(_ name: String) throws -> String { try file("pam/\(name)") }
    func header() throws -> String { try file("clients/c/msso_protocol.h") }

    /// Every match of `pattern` in `text`, as its groups.
    func matches(_ pattern: String, in text: String) throws -> [[String]] {
        let regex = try NSRegularExpression(pattern: pattern)
        return regex.matches(in: text, range: NSRange(text.startIndex..., in: text)).map { match in
            (1..<match.numberOfRanges).compactMap { Range(match.range(at: $0), in: text).map { String(text[$0]) } }
        }
    }

    /// The entries `X(ID, "name"…)` of the X-macro list `name` in the header: [ID, name] each.
    func list(_ name: String) throws -> [[String]] {
        let body = try matches(#"#define \#(name)\(X\)((?:[^\n]*\\\n)*[^\n]*)"#, in: header())
        XCTAssertEqual(body.count, 1, name)
        return try matches(#"X\(([A-Z_]+), "([A-Za-z]+)""#, in: body.first?.first ?? "")
    }

    func testTheFrameCapAndTheVersionAreTheProtocols() throws {
        XCTAssertEqual(try matches(#"#define MSSO_MAX_FRAME (\d+)"#, in: header()), [[String(Framing.maximumPayload)]])
        XCTAssertEqual(try matches(#"#define MSSO_PROTOCOL_VERSION (\d+)"#, in: header()), [[String(protocolVersion)]])
        XCTAssertEqual(try matches(#"json_call_field\(\w+, "version"\);\s*json_uint\([^,]+, (\w+)\)"#, in: source("broker.c")),
                       [["MSSO_PROTOCOL_VERSION"]])
    }

    func testTheHeaderNamesEveryMethodAndNoOther() throws {
        let defined = try matches(#"#define MSSO_METHOD_([A-Z_]+) "([a-z]+)""#, in: header())
        XCTAssertEqual(Set(defined.map { $0[1] }), Set(CallArguments.Kind.allCases.map(\.rawValue)))
        for entry in defined { XCTAssertEqual(entry[0], entry[1].uppercased()) }
    }

    func testEveryMethodTheModuleCallsExists() throws {
        let modules = try ["broker.c", "pam_msso.c"].map { try source($0) }
        // A call is begun with its method (msso_broker_begin, or pam_msso.c's begin_for_group).
        let begun = #"(?:msso_broker_begin|begin_for_group)\([a-z&]+, "#
        let called = try Set(modules.flatMap { try matches(begun + #"MSSO_METHOD_([A-Z]+)"#, in: $0) }.map { $0[0] })
        XCTAssertEqual(called, ["HELLO", "STATUS", "LOGIN", "PING", "LOGOUT"])
        // Only by the header's names: a method typed as a string would not be held to anything.
        for module in modules { XCTAssertEqual(try matches(begun + #"(")"#, in: module), []) }
    }

    func testTheHeaderKnowsEverySessionStateAndNoOther() throws {
        let states = try list("MSSO_SESSION_STATES")
        XCTAssertEqual(Set(states.map { $0[1] }), Set(SessionStatus.State.allCases.map(\.rawValue)))
        XCTAssertEqual(states.count, SessionStatus.State.allCases.count)
        // The module's table of states is the header's.
        let replies = try source("replies.c")
        XCTAssertTrue(replies.contains("MSSO_SESSION_STATES(STATE_ROW_)"))
        XCTAssertEqual(try matches(#"\{ ("[a-zA-Z]+"), MSSO_[A-Z_]+ \}"#, in: replies), [])
    }

    func testTheHeaderKnowsEverySignal() throws {
        let signals = try list("MSSO_SIGNALS")
        for entry in signals { XCTAssertNotNil(SignalName(rawValue: entry[1]), entry[1]) }
        // The header's are the definition's, which SignalName is generated from (not CaseIterable:
        // so the compiled enum is asked about each name of the definition).
        let definition = try JSONSerialization.jsonObject(with: Data(file("protocol/names.json").utf8)) as? [String: Any]
        let defined = (definition?["signals"] as? [[String: Any]] ?? []).compactMap { $0["name"] as? String }
        XCTAssertEqual(signals.map { $0[1] }, defined)
        for name in defined { XCTAssertEqual(SignalName(rawValue: name)?.rawValue, name) }
    }

    func testTheModuleRetypesNoConstant() throws {
        for name in ["broker.c", "broker.h", "pam_msso.c", "replies.c", "replies.h", "peer.c", "peer.h"] {
            XCTAssertEqual(try matches(#"#define (MSSO_MAX_FRAME|MSSO_PROTOCOL_VERSION|MSSO_METHOD_\w+)\b"#, in: source(name)), [], name)
        }
        XCTAssertTrue(try file("pam/Makefile").contains("MSSO_INCLUDE ?= ../clients/c"))
    }
}
