import Glibc

/// Whether a file may speak for the administrator.
///
/// Whichever directory an environment variable names, a file counts as the administrator's only
/// when it, and every directory above it, belongs to root and only root can write there: then no
/// process of the user can have written, replaced or renamed it. A world-writable directory with
/// the sticky bit (`/tmp`) is allowed on the way, since there only an entry's owner may rename or
/// remove it.
public enum AdminFiles {
    /// Nil when `path` is the administrator's (or does not exist); otherwise a sentence naming the
    /// file, what is wrong and the fix.
    public static func problem(with path: String) -> String? {
        guard let resolved = realPath(path) else { return nil } // nothing there, nothing to trust
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

    /// The path with every symbolic link resolved, or nil when it does not exist.
    public static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
