/// Runs blocking work that a timer may interrupt (a GLib call given a `GCancellable`, cancelled
/// when its time is up): the keyring's calls and the notifier's connect.
public enum Deadline {
    /// Runs `body`, and `interrupt` if `body` is still running after `seconds` (on the pool's
    /// timer thread, which never waits for a free thread). When this returns the timer has run or
    /// never will, so `body`'s resources can be released (a call that ended by itself just as its
    /// timer fired had the timer cancel a freed GCancellable).
    /// With no timer to be had (the timers' thread could not start), `body` is interrupted before
    /// it starts: a call that fails at once rather than one that may never end.
    public static func run<T>(within seconds: Double, interrupt: @escaping () -> Void, _ body: () -> T) -> T {
        guard let timer = Workers.shared.after(seconds, interrupt) else {
            interrupt()
            return body()
        }
        let result = body()
        Workers.shared.cancel(timer)
        return result
    }
}
