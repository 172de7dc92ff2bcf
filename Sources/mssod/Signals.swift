import Dispatch
import Glibc
import Synchronization

/// SIGTERM/SIGINT (shutdown) and SIGHUP (reload), handled from before the socket exists: a
/// signal that arrives between "listening" and "handling signals" must not be lost.
final class Signals: @unchecked Sendable {
    private let queue = DispatchQueue(label: "mssod.signals")
    private var sources: [DispatchSourceSignal] = []
    private let state = Mutex<(terminated: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))

    /// Starts handling now; `reload` runs on each SIGHUP.
    init(reload: @escaping @Sendable () async -> Void) {
        // First the default actions off, then the sources on: resuming a source installs
        // libdispatch's own handler, which a later SIG_IGN would replace.
        for signal in [SIGTERM, SIGINT, SIGHUP] { Glibc.signal(signal, SIG_IGN) }
        // A peer that closes first is an error to handle (EPIPE), never the daemon's end, whatever
        // a library writes with (mssod's own sockets send with MSG_NOSIGNAL; a helper's pipe does
        // not). Inherited through exec: whatever mssod starts must reset it (the browser opener
        // and mssod-idp's spawn do).
        Glibc.signal(SIGPIPE, SIG_IGN)
        for signal in [SIGTERM, SIGINT, SIGHUP] {
            let source = DispatchSource.makeSignalSource(signal: signal, queue: queue)
            if signal == SIGHUP {
                source.setEventHandler { Task { await reload() } }
            } else {
                source.setEventHandler { [weak self] in self?.terminate() }
            }
            source.resume()
            sources.append(source)
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
        sources.forEach { $0.cancel() }
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
