import FoundationEssentials
import Glibc

/// Whether a file may speak for the administrator.
///
/// Whichever directory an environment variable names, a file counts as the administrator's only
/// when it, and every directory above it, belongs to root and only root can write there: then no
/// process of the user can have written, replaced or renamed it. A world-writable directory with
/// the sticky bit (`/tmp`) is allowed on the way, since there only an entry's owner may rename or
/// remove it. What is checked is the path with every symbolic link resolved, and that resolved path
/// is what is read (``read(_:maximumSize:)``): a link of the user's on the way is resolved once,
/// and cannot point elsewhere between the check and the read.
public enum AdminFiles {
    /// Nil when `path` is the administrator's (or does not exist); otherwise a sentence naming the
    /// file, what is wrong and the fix.
    public static func problem(with path: String) -> String? {
        switch resolve(path) {
        case .missing: return nil // nothing there, nothing to trust
        case .unresolvable(let problem): return problem
        case .resolved(let resolved): return problem(resolved: resolved, named: path)
        }
    }

    /// What reading an administrator's file gave.
    public enum Read: Equatable {
        /// Nothing there.
        case missing
        /// Not the administrator's: the sentence says why and how to fix it.
        case refused(String)
        /// The administrator's file, with its bytes (nil: it could not be read, or holds more
        /// than the maximum size).
        case contents(Data?)
    }

    /// A configuration file's text: the administrator's read through ``read(_:maximumSize:)`` (a
    /// file that is not really the administrator's goes to `warnings`), the user's as it is. Nil
    /// when there is nothing to read; throws when the file is there but is not UTF-8 text of at
    /// most `maximumSize` bytes.
    static func text(of path: String, admin: Bool, maximumSize: Int, warnings: inout [String]) throws -> String? {
        let data: Data?
        if admin {
            switch read(path, maximumSize: maximumSize) {
            case .missing: return nil
            case .refused(let problem):
                warnings.append(problem)
                return nil
            case .contents(let bytes): data = bytes
            }
        } else {
            guard FileManager.default.fileExists(atPath: path) else { return nil }
            data = FileManager.default.contents(atPath: path)
        }
        guard let data, data.count <= maximumSize, let text = String(data: data, encoding: .utf8) else {
            throw ConfigError(file: path, line: nil, key: nil, problem: "cannot be read as UTF-8 text of at most \(maximumSize / 1024) KiB")
        }
        return text
    }

    /// Reads `path` if it is the administrator's: through its resolved path, the very one checked,
    /// opened without following a link, and checked again on the open file.
    public static func read(_ path: String, maximumSize: Int) -> Read {
        let resolved: String
        switch resolve(path) {
        case .missing: return .missing
        case .unresolvable(let problem): return .refused(problem)
        case .resolved(let found): resolved = found
        }
        if let problem = problem(resolved: resolved, named: path) { return .refused(problem) }
        let fd = open(resolved, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else { return errno == ENOENT ? .missing : .contents(nil) }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return .contents(nil) }
        guard info.st_uid == 0, info.st_mode & 0o022 == 0 else {
            return .refused("\(path) changed while it was checked, so it is not taken as the administrator's")
        }
        var bytes = [UInt8](repeating: 0, count: maximumSize + 1)
        var used = 0
        while used < bytes.count {
            let count = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + used, $0.count - used) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return .contents(nil) }
            if count == 0 { break }
            used += count
        }
        return .contents(used > maximumSize ? nil : Data(bytes[..<used]))
    }

    private enum Resolution {
        case missing
        case unresolvable(String)
        case resolved(String)
    }

    /// The path with every link resolved; a path that exists but cannot be resolved (its real path
    /// is longer than PATH_MAX, which open(2) does not mind and realpath(3) does; a loop) is not
    /// "nothing there".
    private static func resolve(_ path: String) -> Resolution {
        if let resolved = realPath(path) { return .resolved(resolved) }
        let failure = errno
        var info = stat()
        if stat(path, &info) != 0 && (errno == ENOENT || errno == ENOTDIR) { return .missing }
        return .unresolvable("\(path): its real path cannot be worked out (\(String(cString: strerror(failure)))), so it is not taken as the administrator's; name the directory by its real path")
    }

    /// Nil when every component of `resolved` (from the file up) is root's and only root's to write.
    private static func problem(resolved: String, named path: String) -> String? {
        var current = resolved
        var leaf = true
        while true {
            var info = stat()
            guard lstat(current, &info) == 0 else {
                return "\(path): cannot check who owns \(current); it is not taken as the administrator's"
            }
            if info.st_uid != 0 {
                return "\(path) is not the administrator's (\(current) belongs to uid \(info.st_uid), not root), so it is ignored; make it root's with `chown root:root \(current)`"
            }
            let writableByOthers = info.st_mode & 0o022 != 0
            let sticky = info.st_mode & UInt32(S_ISVTX) != 0 && (info.st_mode & S_IFMT) == S_IFDIR
            if writableByOthers && (leaf || !sticky) {
                return "\(path) is not the administrator's (\(current) can be written by others than root), so it is ignored; fix it with `chmod go-w \(current)`"
            }
            if current == "/" { return nil }
            current = parent(of: current)
            leaf = false
        }
    }

    /// The directory holding `path` (`/` for a top-level entry).
    public static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }

    /// The path with every symbolic link resolved, or nil when it does not exist (or cannot be
    /// resolved).
    public static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
