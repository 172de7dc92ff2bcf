import Foundation
@testable import MSSOProtocol
import XCTest

/// protocol/names.json is the one definition of the wire's constants and names, and WireNames.swift
/// is generated from it (Tests/e2e/test_wire_names.py checks it is current). What the definition
/// cannot make is the dispatch: `CallArguments.Kind`, with a case and a switch arm per method, is
/// written by hand, so it is held to the definition here.
final class WireNamesTests: XCTestCase {
    func definition() throws -> [String: Any] {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../protocol/names.json")
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [String: Any])
    }

    func testTheDaemonDispatchesEveryMethodOfTheDefinitionAndNoOther() throws {
        let methods = try XCTUnwrap(definition()["methods"] as? [[String: Any]]).compactMap { $0["name"] as? String }
        XCTAssertEqual(Set(methods), Set(CallArguments.Kind.allCases.map(\.rawValue)))
        // Each type's generated `name` is its Kind's: the definition's `swift` names the right type.
        let named: [CallArguments.Kind: String] = [
            .hello: Methods.Hello.name, .ping: Methods.Ping.name, .login: Methods.Login.name, .extend: Methods.Extend.name,
            .logout: Methods.Logout.name, .status: Methods.Status.name, .check: Methods.Check.name, .sign: Methods.Sign.name,
            .token: Methods.Token.name, .subscribe: Methods.Subscribe.name, .apps: Methods.Apps.name, .audit: Methods.Audit.name,
            .keys: Methods.Keys.name, .lock: Methods.Lock.name, .unlock: Methods.Unlock.name, .diagnose: Methods.Diagnose.name,
            .forward: Methods.Forward.name,
        ]
        for kind in CallArguments.Kind.allCases { XCTAssertEqual(named[kind], kind.rawValue, "\(kind)") }
    }

    func testTheVersionAndTheFrameCapAreTheDefinitions() throws {
        let names = try definition()
        XCTAssertEqual((names["protocolVersion"] as? [String: Any])?["value"] as? Int, protocolVersion)
        XCTAssertEqual((names["maxFrame"] as? [String: Any])?["value"] as? Int, Framing.maximumPayload)
    }
}
