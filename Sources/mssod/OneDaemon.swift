import Glibc
import MSSOCore

/// One mssod per user: two would each spend the refresh token they hold, and a provider that
/// rotates refresh tokens ends the session when the second spends one the first already had
/// (found by an outside test: a second mssod on another socket lost the login, 6 of 6). The
/// daemon holds an exclusive `flock` on a file of the user's state directory (where the accounts
/// and the store's choice are kept too) for its life; the kernel lets it go when the process
/// ends, however it ends. Close-on-exec, so that a `mssod-idp` left running does not hold it.
enum OneDaemon {
    enum Outcome {
        case claimed
        /// Another mssod holds it: this one must not start.
        case held(String)
        /// The file cannot be had (a state directory that cannot be written): mssod serves all the
        /// same, as it does without its audit log, and says so.
        case unavailable(String)
    }

    /// Takes the lock, or says why not.
    static func claim(stateDirectory: String) -> Outcome {
        guard StateFile.makeDirectory(stateDirectory) else {
            return .unavailable("cannot make \(stateDirectory) (\(String(cString: strerror(errno))))")
        }
        let path = stateDirectory + "/mssod.lock"
        let file = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard file >= 0 else { return .unavailable("cannot open \(path) (\(String(cString: strerror(errno))))") }
        guard flock(file, LOCK_EX | LOCK_NB) == 0 else {
            var text = [UInt8](repeating: 0, count: 32)
            let count = read(file, &text, text.count - 1)
            let pid = count > 0 ? Int32(String(decoding: text[..<count], as: UTF8.self).prefix { $0.isNumber }) : nil
            close(file)
            return .held("another mssod (\(pid.map { "pid \($0)" } ?? "its pid unknown")) already runs for this user, with the state directory \(stateDirectory): two would spend the same one-use refresh tokens and end the sessions; use that one (its socket), or stop it first")
        }
        let pid = Array("\(getpid())\n".utf8)
        _ = ftruncate(file, 0)
        _ = pwrite(file, pid, pid.count, 0)
        return .claimed // the descriptor stays open, and the lock held, for the process's life
    }
}
