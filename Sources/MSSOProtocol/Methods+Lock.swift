extension Methods {
    /// Locks the broker with a passphrase: until ``Unlock`` with the same passphrase, no group
    /// signs, hands out a token, logs in or extends (`Locked`). Held in the daemon's memory only.
    public enum Lock: BrokerMethod {
        public typealias Arguments = PassphraseArguments
        public typealias Result = LockState
    }

    /// Lifts ``Lock`` when given the same passphrase. Wrong passphrases are slowed down.
    public enum Unlock: BrokerMethod {
        public typealias Arguments = PassphraseArguments
        public typealias Result = LockState
    }
}

/// The passphrase of `lock` and `unlock`. Sent once over the socket; the daemon keeps only a
/// salted hash of it, never logs it, and never repeats it.
public struct PassphraseArguments: Codable, Sendable, CustomStringConvertible, CustomReflectable {
    public var passphrase: String

    public init(passphrase: String) { self.passphrase = passphrase }

    /// The longest passphrase accepted, in UTF-8 bytes.
    public static let maximumLength = 1024

    public var description: String { "PassphraseArguments(passphrase: <redacted>)" }
    public var customMirror: Mirror { Mirror(self, children: ["passphrase": "<redacted>"]) }
}

/// Whether the broker is locked, and since when.
public struct LockState: Codable, Sendable, Equatable {
    public var locked: Bool
    /// When `lock` took effect, seconds since the Unix epoch (absent when not locked).
    public var lockedAt: Double?

    public init(locked: Bool, lockedAt: Double? = nil) {
        self.locked = locked
        self.lockedAt = lockedAt
    }
}
