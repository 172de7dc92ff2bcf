import Foundation
@testable import MSSOProtocol
import XCTest

/// pam/ is C and cannot import the Swift definition of the protocol, so what it retypes is held
/// to that definition here: the frame cap, the protocol version, the methods it calls and the
/// session states it reads.
final class PAMProtocolTests: XCTestCase {
    func source(_ name: String) throws -> String {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../pam/\(name)")
        return try String(contentsOf: url, encoding: .utf8)
    }

    /// Every match of `pattern`'s first group in `text`.
    func matches(_ pattern: String, in text: String) throws -> [String] {
        let regex = try NSRegularExpression(pattern: pattern)
        return regex.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap {
            Range($0.range(at: 1), in: text).map { String(text[$0]) }
        }
    }

    func testTheFrameCapAndTheVersionAreTheProtocols() throws {
        let broker = try source("broker.c")
        XCTAssertEqual(try matches(#"#define MSSO_MAX_FRAME (\d+)"#, in: broker), [String(Framing.maximumPayload)])
        XCTAssertEqual(try matches(#""version", json_object_new_int\((\d+)\)"#, in: broker), [String(protocolVersion)])
    }

    func testEveryMethodTheModuleCallsExists() throws {
        let called = try Set(["broker.c", "pam_msso.c"].flatMap { try matches(#"msso_broker_call\([a-z&]+, "([A-Za-z]+)""#, in: source($0)) })
        XCTAssertEqual(called, ["hello", "status", "login", "ping", "logout"])
        for method in called { XCTAssertNotNil(CallArguments.Kind(rawValue: method), method) }
    }

    func testTheModuleKnowsEverySessionStateAndNoOther() throws {
        let states = try matches(#"\{ "([A-Za-z]+)", MSSO_[A-Z_]+ \}"#, in: source("replies.c"))
        XCTAssertEqual(Set(states), Set(SessionStatus.State.allCases.map(\.rawValue)))
    }
}
