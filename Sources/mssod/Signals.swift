import Glibc
import MSSOCore
import Synchronization

/// SIGTERM/SIGINT (shutdown) and SIGHUP (reload), blocked in every thread from mssod's first
/// instruction on (``blockInEveryThread()``, before any thread exists, so every thread inherits it)
/// and taken by one pool thread with `sigwaitinfo`: a signal that arrives before the daemon is
/// ready stays pending, never lost, and no handler runs in the middle of another thread's work.
final class Signals: @unchecked Sendable {
    private static let handled = [SIGTERM, SIGINT, SIGHUP]
    private let state = Mutex<(terminated: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    /// First thing in `main`.
    static func blockInEveryThread() {
        var set = Self.set
        pthread_sigmask(SIG_BLOCK, &set, nil)
        // A peer that closes first is an error to handle (EPIPE), never the daemon's end, whatever
        // a library writes with (mssod's own sockets send with MSG_NOSIGNAL; a helper's pipe does
        // not). Inherited through exec, like the mask: whatever mssod starts must reset every
        // signal (the browser opener and mssod-idp's spawn do).
        Glibc.signal(SIGPIPE, SIG_IGN)
    }

    private static var set: sigset_t {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in handled { sigaddset(&set, signal) }
        return set
    }

    /// Starts taking them; `reload` runs on each SIGHUP. Without a thread to take them (none to be
    /// had as mssod starts) mssod ends: it could be neither stopped cleanly nor reloaded.
    init(reload: @escaping @Sendable () async -> Void) {
        let started = Workers.shared.run { [self] in
            var set = Self.set
            while true {
                let signal = sigwaitinfo(&set, nil)
                if signal == SIGHUP {
                    Task { await reload() }
                } else if signal == SIGTERM || signal == SIGINT {
                    terminate()
                }
            }
        }
        if !started {
            let message = "mssod: no thread could be started to take signals (the system is out of threads); not starting\n"
            _ = message.withCString { write(2, $0, strlen($0)) }
            exit(1)
        }
    }

    /// Returns once SIGTERM or SIGINT has arrived (at once if one already did).
    func termination() async {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state in
                if state.terminated { return true }
                state.waiter = continuation
                return false
            }
            if done { continuation.resume() }
        }
    }

    private func terminate() {
        let waiter = state.withLock { state in
            defer { state.waiter = nil }
            state.terminated = true
            return state.waiter
        }
        waiter?.resume()
    }
}
