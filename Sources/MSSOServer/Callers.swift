import CMSSOSystem
import Crypto
import Glibc
import MSSOCore
import MSSOProtocol
import Synchronization

/// Who sent some bytes: the uid, gid and pid the kernel attached to them (`SCM_CREDENTIALS`) and,
/// when that pid is the connection's own process, that process's pidfd and number (taken when it
/// connected, `SO_PEERPIDFD`). While that pidfd's process lives, no other process has its pid, so
/// bytes sent in its name since it connected are its own (or root's: see
/// ``ProcessFacts/isOnHost(like:)`` for who may name a process).
struct Sender {
    var uid: UInt32
    var gid: UInt32
    var pid: Int32
    /// A pidfd of the process that sent the bytes (-1: none known). The connection's: never closed here.
    var pidfd: Int32
    /// Its /proc directory, opened while it lived (-1: none). The connection's too. Through it an
    /// `exe` is found only while that process lives: one statx says both.
    var processDirectory: Int32

    /// The kernel's number for that process (its pidfd's inode, unique for the system's lifetime
    /// on Linux >= 6.9; 0 when unknown). A pid can name another process once its first one is
    /// gone; this cannot.
    var process: UInt64

    init(uid: UInt32, gid: UInt32, pid: Int32, pidfd: Int32 = -1, processDirectory: Int32 = -1, process: UInt64 = 0) {
        (self.uid, self.gid, self.pid, self.pidfd, self.processDirectory, self.process) = (uid, gid, pid, pidfd, processDirectory, process)
    }

    /// The kernel's number of the process behind `pidfd` (0 when unknown).
    static func process(of pidfd: Int32) -> UInt64 {
        var info = stat()
        return pidfd >= 0 && fstat(pidfd, &info) == 0 ? UInt64(info.st_ino) : 0
    }
}

/// What about a process changes when it execs, moves to another namespace or changes root.
struct ProcessFacts: Equatable {
    typealias Namespace = (device: UInt64, inode: UInt64)
    var executable: FileIdentity?
    var mountNamespace: Namespace?
    var root: Namespace?
    /// Fixed for a process's life: who may name it in `SCM_CREDENTIALS` follows from it.
    var pidNamespace: Namespace?
    var userNamespace: Namespace?

    struct FileIdentity: Hashable {
        var device: UInt64, inode: UInt64, size: Int64
        var modified: Int64, changed: Int64 // ns; `changed` (ctime) cannot be set back by the file's owner
    }

    static func of(pid: Int32) -> ProcessFacts {
        var facts = cmsso_process_facts()
        cmsso_process_facts_of(pid, &facts)
        return ProcessFacts(facts)
    }

    /// The executable's part only (one statx instead of five).
    static func executable(pid: Int32) -> FileIdentity? {
        var facts = cmsso_process_facts()
        cmsso_process_executable_of(pid, &facts)
        return ProcessFacts(facts).executable
    }

    /// The same through its /proc directory (`cmsso_process_directory`): nil once it is gone.
    static func executable(directory: Int32) -> FileIdentity? {
        var facts = cmsso_process_facts()
        cmsso_process_executable_at(directory, &facts)
        return ProcessFacts(facts).executable
    }

    private init(_ facts: cmsso_process_facts) {
        executable = facts.exe_ok == 0 ? nil : FileIdentity(
            device: facts.exe_device, inode: facts.exe_inode, size: facts.exe_size,
            modified: facts.exe_mtime_sec * 1_000_000_000 + facts.exe_mtime_nsec,
            changed: facts.exe_ctime_sec * 1_000_000_000 + facts.exe_ctime_nsec)
        mountNamespace = facts.namespace_ok == 0 ? nil : (facts.namespace_device, facts.namespace_inode)
        root = facts.root_ok == 0 ? nil : (facts.root_device, facts.root_inode)
        pidNamespace = facts.pid_namespace_ok == 0 ? nil : (facts.pid_namespace_device, facts.pid_namespace_inode)
        userNamespace = facts.user_namespace_ok == 0 ? nil : (facts.user_namespace_device, facts.user_namespace_inode)
    }

    private static func same(_ a: Namespace?, _ b: Namespace?) -> Bool {
        a?.device == b?.device && a?.inode == b?.inode
    }

    static func == (a: ProcessFacts, b: ProcessFacts) -> Bool {
        a.executable == b.executable && same(a.mountNamespace, b.mountNamespace) && same(a.root, b.root)
            && same(a.pidNamespace, b.pidNamespace) && same(a.userNamespace, b.userNamespace)
    }

    /// Whether a process with these facts is on the daemon's host (`other`'s facts): it sees the
    /// same file system (mount namespace and root), and it is in the same pid and user namespaces.
    ///
    /// The namespaces are what make the kernel's word about a sender unforgeable. A process may
    /// name any process of its own pid namespace in `SCM_CREDENTIALS` when it holds CAP_SYS_ADMIN
    /// over that namespace's user namespace, which `unshare -U -r -p -f` gives any user; naming a
    /// process of the daemon's pid namespace takes CAP_SYS_ADMIN over the initial user namespace
    /// (root). So a sender that named a process of our pid namespace is that process (or root).
    func isOnHost(like other: ProcessFacts) -> Bool {
        guard mountNamespace != nil, root != nil, pidNamespace != nil, userNamespace != nil else { return false }
        return Self.same(mountNamespace, other.mountNamespace) && Self.same(root, other.root)
            && Self.same(pidNamespace, other.pidNamespace) && Self.same(userNamespace, other.userNamespace)
    }
}

/// The identity of each calling process, judged per call and cached per process.
///
/// A cached identity is reused only while the process's facts are unchanged (the same executable
/// file, mount namespace and root) and its pidfd says it is the process that sent the call; an
/// exec, a new namespace or a chroot makes it a stranger again. A path a registration (or the
/// user's own tools) names counts only for the very file the daemon finds at that path: a process
/// can run a file of another mount namespace that the kernel still names by one of our paths. Finding out who a new process is
/// reads files (its executable, to hash it for a pinned registration; a sandbox's
/// `/.flatpak-info`), so it runs on a thread of the pool (`Workers`), never on the reactor.
final class Callers: @unchecked Sendable {
    private let reactor: Reactor
    private let rules: Rules
    /// The user's own tools: their paths are checked like registered ones.
    private let ownTools: Set<String>
    /// Whether the kernel gives each connection's process as a pidfd (SO_PEERPIDFD). Then a sender
    /// without one cannot be pinned to its process, whose pid may have been reused since.
    private let pidfds: Bool
    /// This daemon's own facts: a caller whose mount namespace and root match sees our paths.
    private let own = ProcessFacts.of(pid: 0)
    // Confined to the reactor's thread:
    private var cache: [Int32: Entry] = [:]
    private var waiting: [Int32: [(AppIdentity?) -> Void]] = [:]
    private var workers = 0

    /// Identifications running at once (each on a thread; a file system that never answers
    /// could hold one forever, and must not hold more than these).
    static let maximumWorkers = 8
    /// Processes remembered; past this the least recently seen are forgotten.
    static let maximumEntries = 4096
    /// How long a call waits for its sender to be identified.
    static let resolutionTimeoutNanoseconds: UInt64 = 5_000_000_000

    private struct Entry {
        /// The process (see ``Sender/process``; 0 when the kernel gives no pidfds).
        var process: UInt64
        var facts: ProcessFacts
        var identity: AppIdentity
        /// Whether the executable's path was checked against the file there (see ``Identified``).
        var pathChecked: Bool
        var generation: Int
        var lastUsed: UInt64
    }

    /// What identifying a process found.
    struct Identified {
        var facts: ProcessFacts
        var identity: AppIdentity
        /// Whether the executable's path was looked up in the daemon's file system and compared with
        /// the file the process runs. Done for host processes whose path a registration or an own
        /// tool names (only those paths can matter, and only those are looked up: never a path of
        /// the caller's choosing, on a file system of the caller's that might not answer).
        var pathChecked: Bool
    }

    init(reactor: Reactor, rules: Rules, ownTools: Set<String> = [], pidfds: Bool = false) {
        self.reactor = reactor
        self.rules = rules
        self.ownTools = ownTools
        self.pidfds = pidfds
    }

    enum Lookup {
        /// Known, and unchanged since.
        case known(AppIdentity, executable: ProcessFacts.FileIdentity?)
        /// Being found out: the callback runs on the reactor's thread (nil: it could not be).
        case pending
        /// The sender is gone (it exited, or its pid now names another process).
        case gone
        /// Too many identifications are under way.
        case busy
    }

    /// The identity of the process that sent a call.
    func identity(of sender: Sender, then: @escaping (AppIdentity?) -> Void) -> Lookup {
        let snapshot = rules.current
        // The very process seen before (by its pidfd, which no other process can have): only an
        // exec changes the code it runs, and an exec changes its executable. (A new mount namespace
        // or root is the process's own doing, by its own code; a later exec shows.) So one statx
        // per call, where a stranger takes three and a readlink; made through the process's own
        // /proc directory, it also says the process still runs (so its pid named it throughout).
        if sender.process != 0, var entry = cache[sender.pid], entry.process == sender.process,
           entry.generation == snapshot.generation || !needsAnotherLook(entry, snapshot.entitlements),
           let executable = sender.processDirectory >= 0 ? ProcessFacts.executable(directory: sender.processDirectory)
                                                         : ProcessFacts.executable(pid: sender.pid),
           executable == entry.facts.executable,
           sender.processDirectory >= 0 || cmsso_pidfd_alive(sender.pidfd) == 1 {
            entry.lastUsed = cmsso_monotonic_ns()
            cache[sender.pid] = entry
            return .known(entry.identity, executable: executable)
        }
        let facts = ProcessFacts.of(pid: sender.pid)
        // Read the facts first, then check the sender still runs: the pid then named it throughout.
        guard sender.pidfd >= 0 ? cmsso_pidfd_alive(sender.pidfd) == 1 : !pidfds else { return .gone }
        if var entry = cache[sender.pid], entry.facts == facts, entry.process == sender.process,
           entry.generation == snapshot.generation || !needsAnotherLook(entry, snapshot.entitlements) {
            entry.lastUsed = cmsso_monotonic_ns()
            cache[sender.pid] = entry
            return .known(entry.identity, executable: facts.executable)
        }
        // A host process whose executable no registration pins is known from /proc alone, which
        // no file system of the caller's can stall: found out here. A sandbox's files, or a
        // binary to hash, are read on a thread of their own.
        // (A registered path is looked up here too: on the file system its registrant chose.)
        if facts.isOnHost(like: own), let path = Self.readLink("/proc/\(sender.pid)/exe"), !snapshot.entitlements.pins(path),
           let found = Self.identify(pid: sender.pid, pidfd: sender.pidfd, own: own, entitlements: snapshot.entitlements, ownTools: ownTools),
           found.facts == facts {
            remember(sender.pid, sender.process, found, generation: snapshot.generation)
            return .known(found.identity, executable: facts.executable)
        }
        return resolve(sender, then: then)
    }

    /// Whether a process known under older rules must be looked at again under `entitlements`:
    /// its executable is pinned now and was not hashed, or its path is registered now and was
    /// never checked against the file there.
    private func needsAnotherLook(_ entry: Entry, _ entitlements: Entitlements) -> Bool {
        guard entry.identity.onHost, let executable = entry.identity.executable else { return false }
        if entry.identity.digest == nil, entitlements.pins(executable) { return true }
        return !entry.pathChecked && (entitlements.registers(executable) || ownTools.contains(executable))
    }

    private func resolve(_ sender: Sender, then: @escaping (AppIdentity?) -> Void) -> Lookup {
        let (pid, process) = (sender.pid, sender.process)
        if let queued = waiting[pid] {
            guard queued.count < 64 else { return .busy }
            waiting[pid]!.append(then)
            return .pending
        }
        guard workers < Self.maximumWorkers else { return .busy }
        let pidfd = sender.pidfd >= 0 ? dup(sender.pidfd) : -1
        waiting[pid] = [then]
        workers += 1
        let (rules, own, reactor, ownTools) = (self.rules, self.own, self.reactor, self.ownTools)
        let started = Workers.shared.run {
            let snapshot = rules.current
            let generation = snapshot.generation
            let resolved = Self.identify(pid: pid, pidfd: pidfd, own: own, entitlements: snapshot.entitlements, ownTools: ownTools)
            if pidfd >= 0 { close(pidfd) }
            reactor.execute { [self] in finish(pid, process, resolved, generation) }
        }
        if !started {
            if pidfd >= 0 { close(pidfd) }
            workers -= 1
            waiting[pid] = nil
            return .busy
        }
        return .pending
    }

    private func finish(_ pid: Int32, _ process: UInt64, _ resolved: Identified?, _ generation: Int) {
        workers -= 1
        if let resolved { remember(pid, process, resolved, generation: generation) }
        for then in waiting.removeValue(forKey: pid) ?? [] { then(resolved?.identity) }
    }

    private func remember(_ pid: Int32, _ process: UInt64, _ found: Identified, generation: Int) {
        if cache.count >= Self.maximumEntries { forgetOldest() }
        cache[pid] = Entry(process: process, facts: found.facts, identity: found.identity, pathChecked: found.pathChecked, generation: generation,
                           lastUsed: cmsso_monotonic_ns())
    }

    private func forgetOldest() {
        let oldest = cache.sorted { $0.value.lastUsed < $1.value.lastUsed }.prefix(Self.maximumEntries / 4)
        for (pid, _) in oldest { cache[pid] = nil }
    }

    /// Forgets processes that ended (every few seconds).
    func sweep() {
        for pid in cache.keys where kill(pid, 0) != 0 && errno == ESRCH { cache[pid] = nil }
    }

    // MARK: Identifying a process (on a worker thread)

    /// Everything the broker needs to know about `pid`, or nil when it ended meanwhile.
    static func identify(pid: Int32, pidfd: Int32, own: ProcessFacts, entitlements: Entitlements,
                         ownTools: Set<String> = []) -> Identified? {
        let facts = ProcessFacts.of(pid: pid)
        let executable = readLink("/proc/\(pid)/exe")
        let onHost = facts.isOnHost(like: own)
        var identity = AppIdentity(executable: executable, onHost: onHost, unit: unit(pid: pid))
        var pathChecked = false
        if !onHost {
            // Only a process that really is in a sandbox has one to speak of, and only in one made
            // from our namespaces: inside namespaces another process of the user made, that
            // process may name it in the credentials of bytes it wrote itself (see isOnHost).
            if cmsso_sandbox_made_from_ours(pid) == 1 {
                identity.flatpak = readSmall("/proc/\(pid)/root/.flatpak-info", capacity: 64 * 1024).flatMap(flatpakID(info:))
            }
        } else if let executable, entitlements.registers(executable) || ownTools.contains(executable) {
            // The kernel names a file by its path in the mount namespace it was opened from: run
            // through /proc/PID/root of a process in a namespace of its own (or from a detached
            // mount), a file mounted over one of our paths there is named by that path here.
            pathChecked = true
            if let file = facts.executable, isFile(executable, file) {
                if entitlements.pins(executable) { identity.digest = digest(pid: pid, file: file) }
            } else {
                identity.onHost = false // the path does not name what runs: it means nothing
            }
        }
        // Read after the facts: had the pid been reused meanwhile, they describe another process.
        if pidfd >= 0, cmsso_pidfd_alive(pidfd) != 1 { return nil }
        guard ProcessFacts.of(pid: pid) == facts else { return nil } // it exec'd while we looked
        return Identified(facts: facts, identity: identity, pathChecked: pathChecked)
    }

    /// Whether `path`, looked up in the daemon's file system, is the file `running` (a process's
    /// executable, from statx of /proc/PID/exe).
    static func isFile(_ path: String, _ running: ProcessFacts.FileIdentity) -> Bool {
        var info = stat()
        guard stat(path, &info) == 0 else { return false }
        // glibc's dev_t to the (major << 32 | minor) of statx.
        let device = UInt64(info.st_dev)
        let major = UInt64(UInt32(truncatingIfNeeded: device >> 8) & 0xfff | UInt32(truncatingIfNeeded: device >> 32) & ~0xfff)
        let minor = UInt64(UInt32(truncatingIfNeeded: device) & 0xff | UInt32(truncatingIfNeeded: device >> 12) & ~0xff)
        return UInt64(info.st_ino) == running.inode && major << 32 | minor == running.device
    }

    static func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, Int(PATH_MAX))
        guard count > 0 else { return nil }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// A small regular file's text: never more than `capacity` bytes read, never a FIFO waited on.
    static func readSmall(_ path: String, capacity: Int) -> String? {
        var buffer = [CChar](repeating: 0, count: capacity)
        let count = cmsso_read_small_file(path, &buffer, capacity)
        guard count >= 0 else { return nil }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The parent pid, from /proc/PID/stat (the field after the command name, which may itself
    /// hold spaces and parentheses: read after the last ')').
    static func parent(of pid: Int32) -> Int32? {
        guard let text = readSmall("/proc/\(pid)/stat", capacity: 1024), let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        return fields.count > 1 ? Int32(fields[1]) : nil
    }

    /// The systemd unit from the process's cgroup (`0::/user.slice/…/app-foo.scope` → `app-foo.scope`).
    static func unit(pid: Int32) -> String? {
        guard let text = readSmall("/proc/\(pid)/cgroup", capacity: 4096),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("0::") }) else { return nil }
        let last = line.split(separator: "/").last.map(String.init)
        return last.flatMap { $0.hasSuffix(".scope") || $0.hasSuffix(".service") ? $0 : nil }
    }

    /// The `name` of the `[Application]` section of a `.flatpak-info` file.
    static func flatpakID(info text: String) -> String? {
        var inApplication = false
        for line in text.split(separator: "\n") {
            if line.hasPrefix("[") { inApplication = line == "[Application]" }
            if inApplication, line.hasPrefix("name=") {
                let name = String(line.dropFirst(5))
                return name.isEmpty || name.utf8.count > 255 ? nil : name
            }
        }
        return nil
    }

    /// SHA-256 of the running executable (`/proc/PID/exe` opens the very file the process runs),
    /// cached by the file's identity, change time included: rewriting a binary in place and
    /// setting its mtime back still changes its ctime, so the old digest is never reused.
    static func digest(pid: Int32, file: ProcessFacts.FileIdentity) -> String? {
        if let known = digests.withLock({ $0[file] }) { return known }
        let fd = open("/proc/\(pid)/exe", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var hasher = SHA256()
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { if count < 0 { return nil }; break }
            chunk.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[..<count])) }
        }
        let hex = Hex.lowercase(hasher.finalize())
        digests.withLock {
            if $0.count > 1024 { $0.removeAll() }
            $0[file] = hex
        }
        return hex
    }

    private static let digests = Mutex<[ProcessFacts.FileIdentity: String]>([:])
}
