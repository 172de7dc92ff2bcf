import Foundation
import CSQLite
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
        let log = AuditLog(path: path(), flushInterval: 0.05)
        log.record(entry("login"))
        log.record(entry("sign", error: "NotEntitled"))
        log.record(entry("sign", group: "other"))
        let rows = try log.query()
        XCTAssertEqual(rows.map(\.verb), ["login", "sign", "sign"])
        XCTAssertEqual(rows[1].error, "NotEntitled")
        XCTAssertEqual(try log.query(group: "other").count, 1)
    }

    func testTheAccountAndTheResourceOfARowAreKept() throws {
        let log = AuditLog(path: path(), flushInterval: 0.05)
        var row = entry("sign")
        (row.account, row.resource) = ("admin", "https://git.example/")
        log.record(row)
        log.record(entry("check"))
        let rows = try log.query()
        XCTAssertEqual(rows.map(\.account), ["admin", nil])
        XCTAssertEqual(rows.map(\.resource), ["https://git.example/", nil])
    }

    func testTheFileIsTheUsersAloneAndSurvivesReopening() throws {
        let file = path()
        do {
            let log = AuditLog(path: file)
            log.record(entry("logout"))
            log.flush()
        }
        let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as! Int
        XCTAssertEqual(mode & 0o077, 0)
        XCTAssertEqual(try AuditLog(path: file).query().map(\.verb), ["logout"])
    }

    func testRotationKeepsTheNewestRowsAndDropsOldOnes() throws {
        let log = AuditLog(path: path(), maxRows: 50, maxAge: 3600)
        let now = Date().timeIntervalSince1970
        log.record(entry("ancient", time: now - 7200))
        for i in 0..<120 { log.record(entry("sign-\(i)", error: "NotEntitled")) }
        log.flush()
        try log.prune()
        let rows = try log.query()
        XCTAssertEqual(rows.count, 50)
        XCTAssertEqual(rows.last?.verb, "sign-119")
        XCTAssertFalse(rows.contains { $0.verb == "ancient" })
    }

    func testAFloodOfRefusalsCannotRotateAGroupsSuccessfulCallsAway() throws {
        let log = AuditLog(path: path(), maxRows: 100, maxAge: 86400)
        for i in 0..<10 { log.record(entry("sign-\(i)", group: "suite")) }
        let flooder = { (i: Int) in
            AuditEntry(time: Date().timeIntervalSince1970, uid: 1000, pid: 7, executable: "/tmp/flood-\(i % 500)", app: nil,
                       group: nil, verb: "status", outcome: "ok", error: nil)
        }
        for i in 0..<5000 { log.record(flooder(i)) }
        log.flush()
        try log.prune()
        let kept = try log.query(group: "suite")
        XCTAssertEqual(kept.map(\.verb), (0..<10).map { "sign-\($0)" }, "the group's successful calls survive the flood")
        XCTAssertLessThanOrEqual(try log.query(limit: 10_000).count, 110)
    }

    func testOneCallersIdenticalCallsAreCountedNotWrittenPastTheLimit() throws {
        let log = AuditLog(path: path(), maxRows: 100_000, maxAge: 86400)
        let time = (Date().timeIntervalSince1970 / 60).rounded(.down) * 60 + 1 // all within one minute
        for _ in 0..<10_000 { log.record(entry("status", time: time, error: "NotEntitled")) }
        let rows = try log.query(limit: 100_000)
        XCTAssertEqual(rows.count, AuditLog.rowsPerMinute + 1)
        XCTAssertEqual(rows.last?.detail?.hasPrefix("and \(10_000 - AuditLog.rowsPerMinute) more like this"), true, rows.last?.detail ?? "-")
    }

    /// Another process holds the write lock past the busy timeout: the batch fails, `health` says
    /// so (what `msso doctor` shows) with the rows waiting, and once the lock is let go the retry
    /// writes them all, without a query to push it. The timeouts are the test's (2 s and 1 s in
    /// mssod), and it waits for each event, not for a time.
    func testALockedDatabaseDelaysRowsButLosesNone() throws {
        let file = path()
        let log = AuditLog(path: file, flushInterval: 0.02, busyTimeout: 0.05, retryInterval: 0.05)
        var other: OpaquePointer?
        XCTAssertEqual(sqlite3_open(file, &other), SQLITE_OK)
        XCTAssertEqual(sqlite3_exec(other, "BEGIN IMMEDIATE", nil, nil, nil), SQLITE_OK, "another process holds the write lock")
        for i in 0..<5 { log.record(entry("held-\(i)")) }
        let problem = waitFor { log.health?.problem }
        XCTAssertTrue(problem?.contains("is not being written: audit log: database is locked (5 rows wait to be written)") == true,
                      problem ?? "the failed write was never said")
        XCTAssertTrue(problem?.contains("mssod tries again every 0.05 s") == true, problem ?? "-")
        XCTAssertEqual(sqlite3_exec(other, "COMMIT", nil, nil, nil), SQLITE_OK)
        sqlite3_close(other)
        XCTAssertNotNil(waitFor { log.health?.problem == nil ? true : nil }, "the retry wrote the rows: \(log.health?.problem ?? "-")")
        XCTAssertEqual(try log.query().map(\.verb), (0..<5).map { "held-\($0)" })
    }

    /// `condition`'s first non-nil value, polled until it comes (nil after 10 s).
    func waitFor<T>(_ condition: () -> T?) -> T? {
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if let value = condition() { return value }
            Thread.sleep(forTimeInterval: 0.005)
        }
        return nil
    }

    /// A log whose directory could not be made when it started (a file in its place) says so,
    /// keeps its rows, and is opened once the directory can be made, without a new AuditLog; it
    /// is not tried again sooner than `reopenInterval`. An outside test found mssod never
    /// recording again, and nothing saying so.
    func testALogThatCouldNotBeOpenedIsOpenedOnceItsDirectoryCanBeMade() throws {
        let file = path(), directory = (file as NSString).deletingLastPathComponent
        XCTAssertTrue(FileManager.default.createFile(atPath: directory, contents: Data()), "a file where the directory should be")
        let log = AuditLog(path: file, flushInterval: 0.01, reopenInterval: 0.3)
        let problem = try XCTUnwrap(log.health?.problem)
        XCTAssertTrue(problem.hasPrefix("the audit log (\(file)) is not being written: \(directory) is not a directory"), problem)
        XCTAssertTrue(problem.contains("make \(directory) a directory you can write") && problem.contains("with no restart"), problem)
        log.record(entry("while-closed"))
        XCTAssertThrowsError(try log.query()) { XCTAssertTrue("\($0)".contains("is not being written"), "\($0)") }
        XCTAssertTrue(log.health?.problem?.contains("(1 row waits to be written)") == true, log.health?.problem ?? "-")

        try FileManager.default.removeItem(atPath: directory)
        log.record(entry("after-fix"))
        // Waits for the reopen (a flush past `reopenInterval`), not for a fixed time.
        let deadline = Date().addingTimeInterval(10)
        var rows: [AuditEntry]?
        while rows == nil, Date() < deadline {
            rows = try? log.query()
            if rows == nil { Thread.sleep(forTimeInterval: 0.02) }
        }
        XCTAssertEqual(rows?.map(\.verb), ["while-closed", "after-fix"], "the rows kept meanwhile are written")
        XCTAssertEqual(log.health, AuditHealth(path: file, problem: nil))
    }

    func testAnUnopenedLogIsNotTriedAgainSoonerThanItsInterval() throws {
        let file = path(), directory = (file as NSString).deletingLastPathComponent
        XCTAssertTrue(FileManager.default.createFile(atPath: directory, contents: Data()))
        let log = AuditLog(path: file, flushInterval: 0.01, reopenInterval: 3600)
        try FileManager.default.removeItem(atPath: directory)
        for _ in 0..<50 { log.record(entry("sign")) }
        log.flush()
        XCTAssertNotNil(log.health?.problem, "not tried again within the hour")
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory), "no mkdir was tried either")
    }

    func testSinceAndLimit() throws {
        let log = AuditLog(path: path())
        let now = Date().timeIntervalSince1970
        log.record(entry("old", time: now - 600))
        log.record(entry("new", time: now))
        XCTAssertEqual(try log.query(since: now - 60).map(\.verb), ["new"])
        XCTAssertEqual(try log.query(limit: 1).map(\.verb), ["new"])
    }
}
