import MSSOProtocol

/// The broker's lock (`msso lock`): while set, no group signs, hands out a token, logs in or
/// extends. Kept in memory only, as a salted hash of the passphrase.
///
/// Wrong passphrases slow down: after the n-th wrong one in a row, the refusal is sent only
/// ``delay(afterFailures:)`` seconds later (1, 2, 4, 8, 16, 32, then 60 s), and until that time
/// has passed every `unlock` is refused at once without being checked. So a guesser gets at most
/// one try per delay, however many connections it opens, and other callers never wait: the
/// delay is a sleep that leaves the actor free, and the hash is computed off it.
struct BrokerLock {
    /// The passphrase's hash; nil while locked but still being hashed (the lock already holds).
    var hash: PassphraseHash?
    /// When the lock took effect; nil when unlocked.
    var lockedAt: Double?
    /// Wrong passphrases in a row.
    var failures = 0
    /// No `unlock` is checked before this time.
    var pausedUntil: Double = 0
    /// An `unlock` is being checked: others are refused meanwhile.
    var checking = false

    var isLocked: Bool { lockedAt != nil }

    /// Seconds a wrong passphrase costs, after `failures` of them in a row.
    static func delay(afterFailures failures: Int) -> Double {
        min(60, Double(1 << min(max(failures - 1, 0), 6)))
    }
}

extension Broker {
    /// Whether the broker is locked, and since when.
    public var lockState: LockState {
        LockState(locked: lock.isLocked, lockedAt: lock.lockedAt)
    }

    /// Locks the broker. Takes effect before the hash is computed and before this returns: every
    /// published `sign` snapshot is withdrawn, so no sign that starts after the reply succeeds.
    public func lock(passphrase: String) async throws -> LockState {
        try Self.validate(passphrase)
        if let since = lock.lockedAt {
            throw BrokerError(.locked, "msso is already locked (since \(Int(since))); run `msso unlock` first to lock it with another passphrase")
        }
        let t = now()
        lock = BrokerLock(hash: nil, lockedAt: t)
        published.withLock { $0.sessions.removeAll() }
        do {
            let rounds = passphraseRounds
            let hash = try await Task.detached { try PassphraseHash(passphrase, rounds: rounds) }.value
            lock.hash = hash
        } catch {
            lock = BrokerLock()
            for key in sessions.keys { publish(key) }
            throw BrokerError(.internal, "could not hash the passphrase, so msso is not locked; see mssod's log")
        }
        logger.info("locked")
        return lockState
    }

    /// Lifts the lock when `passphrase` is the one it was set with.
    public func unlock(passphrase: String) async throws -> LockState {
        try Self.validate(passphrase)
        guard lock.isLocked else { return lockState }
        guard let hash = lock.hash, !lock.checking else {
            throw BrokerError(.locked, "another lock or unlock of msso is in progress; try again in a moment")
        }
        let wait = lock.pausedUntil - now()
        guard wait <= 0 else {
            throw BrokerError(.locked, "after \(lock.failures) wrong passphrase\(lock.failures == 1 ? "" : "s"), unlocking is paused; try again in \(Int(wait.rounded(.up))) s")
        }
        lock.checking = true
        let right = await Task.detached { hash.matches(passphrase) }.value
        lock.checking = false
        guard right else {
            lock.failures += 1
            let delay = BrokerLock.delay(afterFailures: lock.failures)
            lock.pausedUntil = now() + delay
            logger.warning("wrong passphrase for unlock", metadata: ["failures": "\(lock.failures)", "delay": "\(Int(delay))s"])
            await clock.sleep(delay)
            throw BrokerError(.locked, "wrong passphrase; msso stays locked (\(lock.failures) wrong in a row; the next wrong one is answered after \(Int(BrokerLock.delay(afterFailures: lock.failures + 1))) s)")
        }
        lock = BrokerLock()
        for key in sessions.keys { publish(key) }
        logger.info("unlocked")
        return lockState
    }

    /// Throws `Locked` while the broker is locked, when the table says the lock stops `action`
    /// (``AccessPolicy/Rule/whileLocked``). The gate refused such a call that came while locked;
    /// this, inside the actor turn that hands something out, refuses one that was waiting (for
    /// the actor, a refresh) when the lock took effect.
    func requireUnlocked(for action: AccessPolicy.Action) throws(BrokerError) {
        guard lock.isLocked, !AccessPolicy.rule(for: action).whileLocked else { return }
        throw AccessPolicy.lockedRefusal
    }

    /// `status` as seen while locked: each session says so.
    func markingLock(_ status: SessionStatus) -> SessionStatus {
        guard lock.isLocked else { return status }
        var status = status
        status.locked = true
        return status
    }

    private static func validate(_ passphrase: String) throws(BrokerError) {
        guard !passphrase.isEmpty else { throw BrokerError(.badRequest, "the passphrase is empty") }
        guard passphrase.utf8.count <= PassphraseArguments.maximumLength else {
            throw BrokerError(.badRequest, "the passphrase is longer than \(PassphraseArguments.maximumLength) bytes")
        }
    }
}
