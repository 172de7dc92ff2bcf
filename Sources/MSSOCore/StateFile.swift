import FoundationEssentials
import Glibc

/// A small file of msso's own state, in a directory the user's programs can write
/// (`$XDG_STATE_HOME/msso`): read as hostile (no link followed, a regular file of this user's,
/// bounded, never blocking on a FIFO), written whole or not at all (a new file renamed over it).
public enum StateFile {
    /// The file's bytes; nil when there is none; or why it cannot be used.
    public static func read(_ path: String, maximumSize: Int) -> Result<Data?, StateFileProblem> {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return .success(nil) }
            return .failure(StateFileProblem("\(path) cannot be read (\(String(cString: strerror(errno))))"))
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return .failure(StateFileProblem("\(path) is not a regular file")) }
        guard info.st_uid == getuid() else { return .failure(StateFileProblem("\(path) belongs to uid \(info.st_uid), not to this user")) }
        let tooLarge = StateFileProblem("\(path) is larger than \(maximumSize) bytes")
        guard info.st_size <= maximumSize else { return .failure(tooLarge) }
        var bytes = [UInt8](repeating: 0, count: maximumSize + 1)
        var used = 0
        while used < bytes.count {
            let count = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + used, $0.count - used) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return .failure(StateFileProblem("\(path) cannot be read (\(String(cString: strerror(errno))))")) }
            if count == 0 { break }
            used += count
        }
        guard used <= maximumSize else { return .failure(tooLarge) }
        return .success(Data(bytes[..<used]))
    }

    /// Writes `data` in place of the file, whole or not at all; nil, or why not.
    public static func write(_ data: Data, to path: String) -> String? {
        let directory = AdminFiles.parent(of: path)
        guard makeDirectory(directory) else {
            return "the directory \(directory) cannot be made (\(String(cString: strerror(errno))))"
        }
        var random = SystemRandomNumberGenerator()
        let temporary = path + ".new-\(String(random.next(), radix: 36))"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return "\(temporary) cannot be made (\(String(cString: strerror(errno))))" }
        var written = 0
        let bytes = [UInt8](data)
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else {
                let why = String(cString: strerror(errno))
                close(fd)
                unlink(temporary)
                return "\(temporary) cannot be written (\(why))"
            }
            written += count
        }
        guard fsync(fd) == 0, close(fd) == 0 else {
            unlink(temporary)
            return "\(temporary) cannot be written (\(String(cString: strerror(errno))))"
        }
        guard rename(temporary, path) == 0 else {
            let why = String(cString: strerror(errno))
            unlink(temporary)
            return "\(path) cannot be replaced (\(why))"
        }
        return nil
    }

    /// Makes `directory` and those above it that are missing, 0700 (as the audit log's are).
    public static func makeDirectory(_ directory: String) -> Bool {
        var info = stat()
        if stat(directory, &info) == 0 { return (info.st_mode & S_IFMT) == S_IFDIR }
        let parent = AdminFiles.parent(of: directory)
        if parent != directory, parent != "/" { _ = makeDirectory(parent) }
        return mkdir(directory, 0o700) == 0 || errno == EEXIST
    }
}

/// Why a state file cannot be used, in a sentence.
public struct StateFileProblem: Error, Sendable {
    public let message: String
    init(_ message: String) { self.message = message }
}
