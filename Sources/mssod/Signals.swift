import Dispatch
import Foundation

/// Waits for SIGTERM or SIGINT, running `reload` on each SIGHUP meanwhile.
enum Signals {
    static func wait(reload: @escaping @Sendable () async -> Void) async {
        let queue = DispatchQueue(label: "mssod.signals")
        for signal in [SIGTERM, SIGINT, SIGHUP] { Foundation.signal(signal, SIG_IGN) }
        let hangup = DispatchSource.makeSignalSource(signal: SIGHUP, queue: queue)
        hangup.setEventHandler { Task { await reload() } }
        hangup.resume()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let sources = [SIGTERM, SIGINT].map { DispatchSource.makeSignalSource(signal: $0, queue: queue) }
            let once = Once()
            for source in sources {
                source.setEventHandler {
                    guard once.first() else { return }
                    sources.forEach { $0.cancel() }
                    continuation.resume()
                }
                source.resume()
            }
        }
        hangup.cancel()
    }
}

/// True the first time only.
private final class Once: @unchecked Sendable {
    private let lock = NSLock()
    private var done = false
    func first() -> Bool {
        lock.withLock {
            defer { done = true }
            return !done
        }
    }
}
