import Foundation
@testable import MSSOServer
import XCTest

/// The version is written in one place, the top entry of dist/debian/changelog (README); the
/// daemon's own (said in `hello`) must be that entry's upstream version.
final class VersionTests: XCTestCase {
    func testTheDaemonSaysTheChangelogsVersion() throws {
        let changelog = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../dist/debian/changelog")
        let first = try String(contentsOf: changelog, encoding: .utf8).split(separator: "\n").first.map(String.init) ?? ""
        let version = first.split(separator: "(").dropFirst().first?.split(separator: ")").first?.split(separator: "-").first
        XCTAssertEqual(version.map(String.init), brokerVersion, "dist/debian/changelog's top entry and Connection.swift's brokerVersion")
    }
}
