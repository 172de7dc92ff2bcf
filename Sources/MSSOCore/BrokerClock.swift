import CMSSOSystem
import FoundationEssentials
import MSSOProtocol
import Synchronization

/// The broker's two clocks, and waiting on them (the expiry timers, the pause after a wrong unlock
/// passphrase). Tests give the broker one they move by hand, so that a 60-second wait takes no time
/// at all and a jump of the wall clock is one call.
public protocol BrokerClock: Sendable {
    /// The wall clock: seconds since 1970, what stored times are in. It can jump: set by hand, by
    /// NTP, or behind on a machine without a battery-backed clock.
    func now() -> Double
    /// Elapsed time in seconds, a suspend included; it never jumps. Only differences mean anything.
    func elapsed() -> Double
    /// Returns after `seconds` of elapsed time (at once for 0 or less), or when the task is cancelled.
    func sleep(_ seconds: Double) async
    /// Returns once either clock has reached its part of `deadline` (at once if one has), or when
    /// the task is cancelled; within a second of it whatever the wall clock does meanwhile.
    func sleep(until deadline: Moment) async
}

/// A time on both clocks: what the wall clock reads, and what the elapsed clock reads.
public struct Moment: Sendable, Equatable {
    public var wall: Double
    public var elapsed: Double

    public init(wall: Double, elapsed: Double) {
        (self.wall, self.elapsed) = (wall, elapsed)
    }

    /// Whether `now` has reached this moment on either clock.
    public func reached(by now: Moment) -> Bool { now.wall >= wall || now.elapsed >= elapsed }
}

extension BrokerClock {
    /// Both clocks now.
    public func moment() -> Moment { Moment(wall: now(), elapsed: elapsed()) }
}

/// The system's clocks: CLOCK_REALTIME, and CLOCK_BOOTTIME for elapsed time (CLOCK_MONOTONIC stops
/// during a suspend). Deadlines are waited for on the pool's timers thread (``Workers/at(wall:elapsed:_:)``).
public struct SystemClock: BrokerClock {
    private let workers: Workers

    public init(workers: Workers = .shared) {
        self.workers = workers
    }

    public func now() -> Double { Date().timeIntervalSince1970 }

    public func elapsed() -> Double { Double(cmsso_boottime_ns()) / 1e9 }

    /// Clamped to what a timer can hold: stored times are checked, but a timer must never be the
    /// thing that crashes on a number.
    public func sleep(_ seconds: Double) async {
        let clamped = seconds.isFinite ? min(max(seconds, 0), SessionDuration.maximum) : SessionDuration.maximum
        try? await Task.sleep(nanoseconds: UInt64(clamped * 1_000_000_000))
    }

    public func sleep(until deadline: Moment) async {
        let wait = Wait(workers)
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                wait.begin(continuation) { workers.at(wall: deadline.wall, elapsed: deadline.elapsed) { wait.end() } }
            }
        } onCancel: {
            wait.end(cancelling: true)
        }
        if wait.untimed, !Task.isCancelled {
            // No timers thread (none could be started): the sooner deadline as it stands now.
            await sleep(min(deadline.wall - now(), deadline.elapsed - elapsed()))
        }
    }
}

/// One ``SystemClock/sleep(until:)``: its continuation, resumed once, by its timer or by the task's
/// cancellation, which cancels the timer (none is left behind for every extend's new one).
private final class Wait: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Void, Never>?
        var timer: Workers.Timer?
        var ended = false
        var untimed = false
    }
    private let state = Mutex(State())
    private let workers: Workers

    init(_ workers: Workers) { self.workers = workers }

    /// Whether no timer could be had (then the waiter was resumed at once).
    var untimed: Bool { state.withLock { $0.untimed } }

    func begin(_ continuation: CheckedContinuation<Void, Never>, arm: () -> Workers.Timer?) {
        let ended = state.withLock { state in
            if !state.ended { state.continuation = continuation }
            return state.ended
        }
        if ended { return continuation.resume() } // cancelled before it began
        guard let timer = arm() else {
            state.withLock { $0.untimed = true }
            return end()
        }
        let cancelled = state.withLock { state in
            if !state.ended { state.timer = timer }
            return state.ended
        }
        if cancelled { workers.cancel(timer) } // (or fired already: then this does nothing)
    }

    /// Resumes the waiter: from the timer's job, or on cancellation, which cancels the timer (never
    /// from its own job: cancelling waits for a firing timer's job to end).
    func end(cancelling: Bool = false) {
        let (continuation, timer) = state.withLock { state in
            state.ended = true
            defer { (state.continuation, state.timer) = (nil, nil) }
            return (state.continuation, state.timer)
        }
        if cancelling, let timer { workers.cancel(timer) }
        continuation?.resume()
    }
}
