import Foundation
@testable import MSSOServer
import XCTest

/// The version is the top entry of dist/debian/changelog, also written in Connection.swift and the
/// Python package (docs/GUIDE.md, "Packages"); the daemon's own (said in `hello`) must be that
/// entry's upstream version. Tests/e2e/test_readme.py checks all three.
final class VersionTests: XCTestCase {
    func testTheDaemonSaysTheChangelogsVersion() throws {
        let changelog = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../dist/debian/changelog")
        let first = try String(contentsOf: changelog, encoding: .utf8).split(separator: "\n").first.map(String.init) ?? ""
        let version = first.split(separator: "(").dropFirst().first?.split(separator: ")").first?.split(separator: "-").first
        XCTAssertEqual(version.map(String.init), brokerVersion, "dist/debian/changelog's top entry and Connection.swift's brokerVersion")
    }
}
