import Dispatch

/// Runs blocking work that a timer may interrupt (a GLib call given a `GCancellable`, cancelled
/// when its time is up): the keyring's calls and the notifier's connect.
public enum Deadline {
    /// Runs `body`, and `interrupt` if `body` is still running after `seconds`. `queue` is where the
    /// timer fires: a serial queue of the caller's (it gets a thread when it has work, where
    /// Dispatch's shared pool may have none free). When this returns the timer has run or never
    /// will, so `body`'s resources can be released: it is cancelled on that same queue (a call that
    /// ended by itself just as its timer fired had the timer cancel a freed GCancellable).
    public static func run<T>(within seconds: Double, on queue: DispatchQueue, interrupt: @escaping () -> Void, _ body: () -> T) -> T {
        let timer = DispatchWorkItem(block: interrupt)
        queue.asyncAfter(deadline: .now() + seconds, execute: timer)
        let result = body()
        queue.sync { timer.cancel() }
        return result
    }
}
