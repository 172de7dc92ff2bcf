import Foundation
import MSSOAudit
import MSSOProtocol
import XCTest

final class AuditLogTests: XCTestCase {
    func path() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("audit-\(UUID().uuidString)/audit.sqlite").path
    }

    func entry(_ verb: String, group: String = "g", time: Double = Date().timeIntervalSince1970, error: String? = nil) -> AuditEntry {
        AuditEntry(time: time, uid: 1000, pid: 42, executable: "/usr/bin/app1", app: "app1", group: group, verb: verb,
                   outcome: error == nil ? "ok" : "error", error: error)
    }

    func testRowsAreWrittenInTheBackgroundAndReadBack() throws {
        let log = try AuditLog(path: path(), flushInterval: 0.05)
        log.record(entry("login"))
        log.record(entry("sign", error: "NotEntitled"))
        log.record(entry("sign", group: "other"))
        let rows = try log.query()
        XCTAssertEqual(rows.map(\.verb), ["login", "sign", "sign"])
        XCTAssertEqual(rows[1].error, "NotEntitled")
        XCTAssertEqual(try log.query(group: "other").count, 1)
    }

    func testTheFileIsTheUsersAloneAndSurvivesReopening() throws {
        let file = path()
        do {
            let log = try AuditLog(path: file)
            log.record(entry("logout"))
            log.flush()
        }
        let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as! Int
        XCTAssertEqual(mode & 0o077, 0)
        XCTAssertEqual(try AuditLog(path: file).query().map(\.verb), ["logout"])
    }

    func testRotationKeepsTheNewestRowsAndDropsOldOnes() throws {
        let log = try AuditLog(path: path(), maxRows: 50, maxAge: 3600)
        let now = Date().timeIntervalSince1970
        log.record(entry("ancient", time: now - 7200))
        for i in 0..<120 { log.record(entry("sign-\(i)")) }
        log.flush()
        try log.prune()
        let rows = try log.query()
        XCTAssertEqual(rows.count, 50)
        XCTAssertEqual(rows.last?.verb, "sign-119")
        XCTAssertFalse(rows.contains { $0.verb == "ancient" })
    }

    func testSinceAndLimit() throws {
        let log = try AuditLog(path: path())
        let now = Date().timeIntervalSince1970
        log.record(entry("old", time: now - 600))
        log.record(entry("new", time: now))
        XCTAssertEqual(try log.query(since: now - 60).map(\.verb), ["new"])
        XCTAssertEqual(try log.query(limit: 1).map(\.verb), ["new"])
    }
}
