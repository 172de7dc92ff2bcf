import FoundationEssentials
import MSSOProtocol

/// The broker's time: what time it is (seconds since 1970), and waiting for a while (the expiry
/// timers, the pause after a wrong unlock passphrase). Tests give the broker one they move by hand,
/// so that a 60-second wait takes no time at all.
public protocol BrokerClock: Sendable {
    func now() -> Double
    /// Returns after `seconds` (at once for 0 or less), or when the task is cancelled.
    func sleep(_ seconds: Double) async
}

/// The system's clock.
public struct SystemClock: BrokerClock {
    public init() {}

    public func now() -> Double { Date().timeIntervalSince1970 }

    /// Clamped to what a timer can hold: stored times are checked, but a timer must never be the
    /// thing that crashes on a number.
    public func sleep(_ seconds: Double) async {
        let clamped = seconds.isFinite ? min(max(seconds, 0), SessionDuration.maximum) : SessionDuration.maximum
        try? await Task.sleep(nanoseconds: UInt64(clamped * 1_000_000_000))
    }
}
