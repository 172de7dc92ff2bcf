import CSQLite
import Dispatch
import Foundation
import MSSOProtocol

/// The append-only audit log, in SQLite: one row per verb.
///
/// `record` never blocks the caller (it is on the sign path): rows are queued and written in one
/// transaction every `flushInterval`, so a crash can lose at most that much of the log, never a
/// credential. Rotation deletes the oldest rows past `maxRows` or older than `maxAge`.
public final class AuditLog: @unchecked Sendable {
    private let database: OpaquePointer
    private let queue = DispatchQueue(label: "msso.audit")
    private let lock = NSLock()
    private var pending: [AuditEntry] = []
    private var flushScheduled = false
    private var insertsSincePrune = 0
    private let maxRows: Int
    private let maxAge: Double
    private let flushInterval: Double

    /// Opens (creating if needed) the log at `path`, readable by the user only.
    public init(path: String, maxRows: Int = 100_000, maxAge: Double = 90 * 86400, flushInterval: Double = 0.1) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var handle: OpaquePointer?
        guard sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nil) == SQLITE_OK,
              let handle else {
            throw AuditError("cannot open the audit log at \(path)")
        }
        database = handle
        chmod(path, 0o600)
        self.maxRows = maxRows
        self.maxAge = maxAge
        self.flushInterval = flushInterval
        try execute("""
            PRAGMA journal_mode = WAL;
            PRAGMA synchronous = NORMAL;
            CREATE TABLE IF NOT EXISTS audit (
                id INTEGER PRIMARY KEY,
                time REAL NOT NULL, uid INTEGER NOT NULL, pid INTEGER NOT NULL,
                executable TEXT, app TEXT, grp TEXT,
                verb TEXT NOT NULL, outcome TEXT NOT NULL, error TEXT);
            CREATE INDEX IF NOT EXISTS audit_time ON audit (time);
            CREATE TRIGGER IF NOT EXISTS audit_append_only BEFORE UPDATE ON audit
                BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
            """)
        try? execute("ALTER TABLE audit ADD COLUMN detail TEXT") // logs made before the column existed
    }

    deinit {
        flush()
        sqlite3_close_v2(database)
    }

    /// Queues a row; it is written within `flushInterval`.
    public func record(_ entry: AuditEntry) {
        let schedule = lock.withLock {
            pending.append(entry)
            defer { flushScheduled = true }
            return !flushScheduled
        }
        if schedule {
            queue.asyncAfter(deadline: .now() + flushInterval) { [weak self] in self?.write() }
        }
    }

    /// Writes every queued row now (shutdown, tests, before a query).
    public func flush() {
        queue.sync { write() }
    }

    /// Rows, newest last, optionally of one group and since a time.
    public func query(group: String? = nil, since: Double? = nil, limit: Int = 1000) throws -> [AuditEntry] {
        flush()
        return try queue.sync {
            var conditions: [String] = []
            if group != nil { conditions.append("grp = ?1") }
            if since != nil { conditions.append("time >= ?2") }
            let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
            let sql = """
                SELECT time, uid, pid, executable, app, grp, verb, outcome, error, detail FROM
                (SELECT * FROM audit \(filter) ORDER BY id DESC LIMIT ?3) ORDER BY id
                """
            let statement = try prepare(sql)
            defer { sqlite3_finalize(statement) }
            if let group { msso_sqlite_bind_text(statement, 1, group) }
            if let since { sqlite3_bind_double(statement, 2, since) }
            sqlite3_bind_int64(statement, 3, Int64(limit))
            var rows: [AuditEntry] = []
            while sqlite3_step(statement) == SQLITE_ROW {
                func text(_ column: Int32) -> String? {
                    sqlite3_column_text(statement, column).map { String(cString: $0) }
                }
                rows.append(AuditEntry(time: sqlite3_column_double(statement, 0), uid: UInt32(sqlite3_column_int64(statement, 1)),
                                       pid: Int32(sqlite3_column_int64(statement, 2)), executable: text(3), app: text(4),
                                       group: text(5), verb: text(6) ?? "", outcome: text(7) ?? "", error: text(8), detail: text(9)))
            }
            return rows
        }
    }

    // MARK: Writing (on `queue` only)

    private func write() {
        let batch = lock.withLock {
            defer {
                pending = []
                flushScheduled = false
            }
            return pending
        }
        guard !batch.isEmpty else { return }
        do {
            try execute("BEGIN")
            let statement = try prepare("""
                INSERT INTO audit (time, uid, pid, executable, app, grp, verb, outcome, error, detail)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
                """)
            defer { sqlite3_finalize(statement) }
            for entry in batch {
                sqlite3_reset(statement)
                sqlite3_clear_bindings(statement)
                sqlite3_bind_double(statement, 1, entry.time)
                sqlite3_bind_int64(statement, 2, Int64(entry.uid))
                sqlite3_bind_int64(statement, 3, Int64(entry.pid))
                for (index, value) in [(4, entry.executable), (5, entry.app), (6, entry.group), (7, entry.verb),
                                       (8, entry.outcome), (9, entry.error), (10, entry.detail)] {
                    if let value { msso_sqlite_bind_text(statement, Int32(index), value) }
                }
                guard sqlite3_step(statement) == SQLITE_DONE else { throw AuditError("cannot write an audit row") }
            }
            try execute("COMMIT")
            insertsSincePrune += batch.count
            if insertsSincePrune >= max(1, maxRows / 10) { try prune() }
        } catch {
            try? execute("ROLLBACK")
        }
    }

    /// Rotation: drop rows past the age limit and the oldest rows past the count limit.
    public func prune() throws {
        insertsSincePrune = 0
        try execute("""
            DELETE FROM audit WHERE time < \(Date().timeIntervalSince1970 - maxAge);
            DELETE FROM audit WHERE id <= (SELECT max(id) FROM audit) - \(maxRows);
            """)
    }

    private func execute(_ sql: String) throws {
        guard sqlite3_exec(database, sql, nil, nil, nil) == SQLITE_OK else {
            throw AuditError("audit log: \(String(cString: sqlite3_errmsg(database)))")
        }
    }

    private func prepare(_ sql: String) throws -> OpaquePointer {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(database, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
            throw AuditError("audit log: \(String(cString: sqlite3_errmsg(database)))")
        }
        return statement
    }
}

public struct AuditError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
