import CSQLite
import FoundationEssentials
import Glibc
import Logging
import MSSOCore
import MSSOProtocol
import Synchronization

/// The append-only audit log, in SQLite: one row per verb.
///
/// `record` never blocks the caller (it is on the sign path): rows are queued and written in one
/// transaction every `flushInterval`, so a crash can lose at most that much of the log, never a
/// credential. Two things keep a flood from erasing history:
/// - **Aggregation**: the same caller (executable) making the same call with the same outcome
///   gets at most ``rowsPerMinute`` rows a minute; the rest are counted into one row that says
///   how many more there were.
/// - **Rotation** deletes rows older than `maxAge`, and the oldest past `maxRows`, but never the
///   newest ``keptPerGroup`` successful calls of a group.
/// A database that another process holds locked is waited for (up to `busyTimeout`); a batch that
/// still cannot be written is logged and kept, and tried again after `retryInterval`, never dropped
/// silently. A log that cannot be opened (its directory unwritable, a file in its place) is tried
/// again at a later flush, at most once every `reopenInterval`, on the log's own lane: once the
/// directory is fixed the rows kept meanwhile are written, without a restart. ``health`` says, until then, what is wrong and what
/// to do (`msso doctor`, `msso status`).
public final class AuditLog: AuditTrail {
    /// The database once opened, and when it was last tried. Used on `lane` (and by `init` and a
    /// test's `prune`).
    private let link = Mutex(Link())
    /// Where the database is written and read, one job at a time.
    private let lane = Workers.Lane()
    private let state = Mutex(State())
    private let path: String
    private let maxRows: Int
    private let maxAge: Double
    private let flushInterval: Double
    private let reopenInterval: Double
    private let busyTimeout: Double
    private let retryInterval: Double
    private let logger: Logger

    /// Rows a minute for one caller's identical calls; more are counted, not written one by one.
    public static let rowsPerMinute = 60
    /// Successful calls of each group that rotation never deletes, however many others come.
    public static let keptPerGroup = 1000
    /// Rows waiting to be written, at most (a database that stays unwritable must not eat memory).
    static let maximumPending = 100_000
    /// Distinct callers and calls being counted at once; past this, one count per executable.
    static let maximumCounters = 4096

    private struct State {
        var pending: [AuditEntry] = []
        var flushScheduled = false
        var insertsSincePrune = 0
        var counters: [Key: Counter] = [:]
        var lost = 0
        /// Why rows are not being written now (nil while they are).
        var failure: Failure?
    }

    private struct Link {
        var database: Database?
        var lastTry: ContinuousClock.Instant?
    }

    /// What keeps rows from the file, and what the user can do about it.
    private struct Failure: Equatable {
        var cause: String
        var fix: String
    }

    /// What makes two rows "the same call" for aggregation.
    private struct Key: Hashable {
        var uid: UInt32
        var executable: String?
        var app: String?
        var group: String?
        var verb: String
        var outcome: String
        var error: String?
        var host: String?

        init(_ entry: AuditEntry) {
            (uid, executable, app, group, verb, outcome, error, host) =
                (entry.uid, entry.executable, entry.app, entry.group, entry.verb, entry.outcome, entry.error, entry.host)
        }
    }

    private struct Counter {
        var minute: Int
        var written: Int
        var suppressed: Int
        var last: AuditEntry
    }

    /// Opens (creating if needed) the log at `path`, readable by the user only. A log that cannot
    /// be opened now is logged, said by ``health``, and tried again later (the type says when).
    /// `busyTimeout`: how long a write waits for a lock another process holds; `retryInterval`: when
    /// a batch that could not be written is tried again (seconds both; tests make them short).
    public init(path: String, maxRows: Int = 100_000, maxAge: Double = 90 * 86400, flushInterval: Double = 0.1,
                reopenInterval: Double = 5, busyTimeout: Double = 2, retryInterval: Double = 1,
                logger: Logger = Logger(label: "msso.audit")) {
        self.path = path
        self.maxRows = maxRows
        self.maxAge = maxAge
        self.flushInterval = flushInterval
        self.reopenInterval = reopenInterval
        self.busyTimeout = busyTimeout
        self.retryInterval = retryInterval
        self.logger = logger
        _ = opened()
    }

    /// Where rows go, and what keeps them from it: the audit check of `msso doctor` and `status`.
    public var health: AuditHealth? {
        state.withLock { state in
            AuditHealth(path: path, problem: state.failure.map { failure in
                let waiting = "\(state.pending.count) row\(state.pending.count == 1 ? "" : "s") wait\(state.pending.count == 1 ? "s" : "")"
                let lost = state.lost > 0 ? ", \(state.lost) older \(state.lost == 1 ? "was" : "were") dropped" : ""
                return "the audit log (\(path)) is not being written: \(failure.cause) (\(waiting) to be written\(lost)); \(failure.fix)"
            })
        }
    }

    /// The database, opened now if it is not and the last try is `reopenInterval` ago.
    private func opened() -> Database? {
        let now = ContinuousClock.now
        let due = link.withLock { link -> Bool in
            guard link.database == nil, link.lastTry.map({ now - $0 >= .seconds(reopenInterval) }) ?? true else { return false }
            link.lastTry = now
            return true
        }
        guard due else { return link.withLock { $0.database } }
        let directory = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
        let failure: Failure
        if let cause = Self.makeDirectory(directory) {
            failure = Failure(cause: cause, fix: "make \(directory) a directory you can write (remove what is in its place, or fix its owner and mode); mssod opens the log by itself at the next call, within \(Self.seconds(reopenInterval)), with no restart")
        } else {
            do {
                let database = try Database(path: path, busyTimeout: busyTimeout)
                chmod(path, 0o600)
                link.withLock { $0.database = database }
                let (was, waiting) = state.withLock { state in
                    defer { state.failure = nil }
                    return (state.failure, state.pending.count)
                }
                if was != nil { logger.notice("audit log opened: rows are written again", metadata: ["path": "\(path)", "waiting": "\(waiting)"]) }
                return database
            } catch {
                failure = Failure(cause: "\(error)", fix: "make \(path) a database file you can write, in a directory you can write (or move it away: mssod makes a new one); mssod opens the log by itself at the next call, within \(Self.seconds(reopenInterval)), with no restart")
            }
        }
        let changed = state.withLock { state in
            defer { state.failure = failure }
            return state.failure != failure
        }
        if changed { logger.error("no audit log: \(failure.cause); \(failure.fix)") }
        return nil
    }

    /// `mkdir -p`, with mode 0700 for what it makes: nil once `directory` is a directory, else why not.
    static func makeDirectory(_ directory: String) -> String? {
        var status = stat()
        if stat(directory, &status) == 0 {
            return status.st_mode & S_IFMT == S_IFDIR ? nil : "\(directory) is not a directory"
        }
        guard errno == ENOENT else { return "cannot read \(directory): \(String(cString: strerror(errno)))" }
        if let slash = directory.lastIndex(of: "/"), slash != directory.startIndex,
           let cause = makeDirectory(String(directory[..<slash])) { return cause }
        guard mkdir(directory, 0o700) == 0 || errno == EEXIST else {
            return "cannot make the directory \(directory): \(String(cString: strerror(errno)))"
        }
        return nil
    }

    static func seconds(_ value: Double) -> String { value == value.rounded() ? "\(Int(value)) s" : "\(value) s" }

    deinit { flush() }

    /// Queues a row (or counts it, when its caller already has its rows for this minute); it is
    /// written within `flushInterval`.
    public func record(_ entry: AuditEntry) {
        let minute = Int(entry.time / 60)
        let schedule = state.withLock { state -> Bool in
            var key = Key(entry)
            if state.counters[key] == nil, state.counters.count >= Self.maximumCounters {
                key = Key(AuditEntry(time: 0, uid: entry.uid, pid: 0, executable: entry.executable, app: nil, group: nil,
                                     verb: "*", outcome: "*", error: nil))
            }
            var counter = state.counters[key] ?? Counter(minute: minute, written: 0, suppressed: 0, last: entry)
            if counter.minute != minute {
                Self.summarize(counter, into: &state.pending)
                counter = Counter(minute: minute, written: 0, suppressed: 0, last: entry)
            }
            // A login that put a group into a new account is always written: a caller that filled
            // its minute first must not hide it in a count.
            if counter.written < Self.rowsPerMinute || (entry.verb == "login" && entry.outcome == "ok" && entry.detail != nil) {
                counter.written += 1
                state.pending.append(entry)
            } else {
                counter.suppressed += 1
                counter.last = entry
            }
            state.counters[key] = counter
            defer { state.flushScheduled = true }
            return !state.flushScheduled
        }
        if schedule {
            lane.after(flushInterval) { [weak self] in self?.write() }
        }
    }

    /// One row saying how many more calls like `counter`'s last one were counted, not written.
    private static func summarize(_ counter: Counter, into pending: inout [AuditEntry]) {
        guard counter.suppressed > 0 else { return }
        var row = counter.last
        row.detail = "and \(counter.suppressed) more like this in the same minute (rows of one caller are limited to \(rowsPerMinute) a minute)"
        pending.append(row)
    }

    /// Writes every queued row now, counts included (shutdown, tests, before a query).
    public func flush() {
        state.withLock { state in
            for counter in state.counters.values { Self.summarize(counter, into: &state.pending) }
            state.counters = [:]
        }
        lane.sync { self.write() }
    }

    /// Rows, newest last, optionally of one group and since a time.
    public func query(group: String? = nil, since: Double? = nil, limit: Int = 1000) throws -> [AuditEntry] {
        flush()
        return try lane.sync { [self] in
            guard let database = opened() else {
                throw BrokerError(.internal, health?.problem ?? "the audit log (\(path)) is not open; see mssod's log")
            }
            var conditions: [String] = []
            if group != nil { conditions.append("grp = ?1") }
            if since != nil { conditions.append("time >= ?2") }
            let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
            let statement = try database.prepare("""
                SELECT time, uid, pid, executable, app, grp, verb, outcome, error, detail, host, resource, account FROM
                (SELECT * FROM audit \(filter) ORDER BY id DESC LIMIT ?3) ORDER BY id
                """)
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
                                       group: text(5), verb: text(6) ?? "", outcome: text(7) ?? "", error: text(8), detail: text(9),
                                       host: text(10), resource: text(11), account: text(12)))
            }
            return rows
        }
    }

    // MARK: Writing (on `lane` only)

    private func write() {
        let batch = state.withLock { state -> [AuditEntry] in
            defer {
                state.pending = []
                state.flushScheduled = false
            }
            return state.pending
        }
        guard !batch.isEmpty else { return }
        guard let database = opened() else {
            // Tried again when the next try is due, whether or not more calls come.
            let next = link.withLock { $0.lastTry.map { .seconds(reopenInterval) - (ContinuousClock.now - $0) } } ?? .zero
            keep(batch, retryIn: max(next / .seconds(1), flushInterval))
            return
        }
        do {
            try database.insert(batch)
            let (prune, was) = state.withLock { state -> (Bool, Failure?) in
                defer { state.failure = nil }
                state.insertsSincePrune += batch.count
                return (state.insertsSincePrune >= max(1, maxRows / 10), state.failure)
            }
            if was != nil { logger.notice("audit rows are written again", metadata: ["path": "\(path)", "rows": "\(batch.count)"]) }
            if prune { try self.prune() }
        } catch {
            // The rows back in the queue first: `health` never says the log fails with none waiting.
            let lost = keep(batch, retryIn: retryInterval)
            state.withLock { state in
                state.failure = Failure(cause: "\(error)", fix: "make sure \(path) can be written (free disk space, its owner and mode, another process holding it locked); mssod tries again every \(Self.seconds(retryInterval))")
            }
            logger.error("audit rows not written yet; retrying in \(Self.seconds(retryInterval))", metadata: ["rows": "\(batch.count)", "error": "\(error)",
                                                                                   "lost": "\(lost)"])
        }
    }

    /// Kept for a later write: a locked, full or unopenable database delays rows, never drops them
    /// silently. Past the cap the oldest go, and that is said too (returned: how many in all).
    @discardableResult
    private func keep(_ batch: [AuditEntry], retryIn seconds: Double) -> Int {
        let (reschedule, lost) = state.withLock { state -> (Bool, Int) in
            state.pending = batch + state.pending
            let over = state.pending.count - Self.maximumPending
            if over > 0 {
                state.pending.removeFirst(over)
                state.lost += over
            }
            defer { state.flushScheduled = true }
            return (!state.flushScheduled, state.lost)
        }
        if reschedule { lane.after(seconds) { [weak self] in self?.write() } }
        return lost
    }

    /// Rotation: drop rows past the age limit, and the oldest rows past the count limit, but
    /// never the newest ``keptPerGroup`` successful calls of a group.
    public func prune() throws {
        state.withLock { $0.insertsSincePrune = 0 }
        try opened()?.execute("""
            DELETE FROM audit WHERE time < \(Date().timeIntervalSince1970 - maxAge);
            DELETE FROM audit WHERE id <= (SELECT max(id) FROM audit) - \(maxRows)
                AND id NOT IN (SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY grp ORDER BY id DESC) AS n
                                               FROM audit WHERE outcome = 'ok' AND grp IS NOT NULL) WHERE n <= \(Self.keptPerGroup));
            """)
    }
}

public struct AuditError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}

/// The SQLite connection: statements and one transaction per batch. Used from one lane.
private final class Database: @unchecked Sendable {
    let handle: OpaquePointer

    /// Opens (creating if needed) the database at `path` with its table; the cause when it cannot.
    init(path: String, busyTimeout: Double) throws {
        var handle: OpaquePointer?
        let opened = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nil)
        guard let handle else { throw AuditError("cannot open \(path): out of memory") }
        self.handle = handle // closed by deinit, failure or not
        guard opened == SQLITE_OK else { throw AuditError("cannot open \(path): \(openMessage)") }
        // Another process (a reader, `sqlite3`) may hold the lock for a moment: wait, bounded.
        sqlite3_busy_timeout(handle, Int32(clamping: Int((busyTimeout * 1000).rounded())))
        do {
            try execute("PRAGMA journal_mode = WAL") // the first read and write of the file
        } catch {
            throw AuditError("cannot open \(path): \(openMessage)")
        }
        try execute("""
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
        try? execute("ALTER TABLE audit ADD COLUMN host TEXT") // the remote host of an SSH forward's calls
        try? execute("ALTER TABLE audit ADD COLUMN resource TEXT") // what a minted token was for
        try? execute("ALTER TABLE audit ADD COLUMN account TEXT") // which account of the group
        try execute("CREATE INDEX IF NOT EXISTS audit_group_ok ON audit (grp, outcome, id)")
    }

    deinit { sqlite3_close_v2(handle) }

    func insert(_ batch: [AuditEntry]) throws {
        try execute("BEGIN IMMEDIATE")
        do {
            let statement = try prepare("""
                INSERT INTO audit (time, uid, pid, executable, app, grp, verb, outcome, error, detail, host, resource, account)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
                """)
            defer { sqlite3_finalize(statement) }
            for entry in batch {
                sqlite3_reset(statement)
                sqlite3_clear_bindings(statement)
                sqlite3_bind_double(statement, 1, entry.time)
                sqlite3_bind_int64(statement, 2, Int64(entry.uid))
                sqlite3_bind_int64(statement, 3, Int64(entry.pid))
                for (index, value) in [(4, entry.executable), (5, entry.app), (6, entry.group), (7, entry.verb),
                                       (8, entry.outcome), (9, entry.error), (10, entry.detail), (11, entry.host), (12, entry.resource),
                                       (13, entry.account)] {
                    if let value { msso_sqlite_bind_text(statement, Int32(index), value) }
                }
                guard sqlite3_step(statement) == SQLITE_DONE else { throw AuditError("cannot write an audit row: \(message)") }
            }
            try execute("COMMIT")
        } catch {
            try? execute("ROLLBACK")
            throw error
        }
    }

    func execute(_ sql: String) throws {
        guard sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK else { throw AuditError("audit log: \(message)") }
    }

    func prepare(_ sql: String) throws -> OpaquePointer {
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
            throw AuditError("audit log: \(message)")
        }
        return statement
    }

    var message: String { String(cString: sqlite3_errmsg(handle)) }

    /// SQLite's sentence and the system's, for a failure to open ("unable to open database file
    /// (Permission denied)"); the system's may be stale later on.
    var openMessage: String {
        let system = sqlite3_system_errno(handle)
        return message + (system != 0 ? " (\(String(cString: strerror(system))))" : "")
    }
}
