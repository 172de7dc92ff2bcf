import MSSOProtocol

extension Broker {
    /// Measures the group's window (``SessionWindow``) anew when the credential's stored end moved
    /// or it is another login's (a login, an extend, a read from the store, an end the IdP made),
    /// and keeps the measure otherwise (a refresh). ``update(_:_:)`` calls it after every change.
    func measureWindow(_ key: AccountName) {
        guard let state = sessions[key], let credential = state.credential else {
            sessions[key]?.window = nil
            sessions[key]?.tokenLife = nil
            return
        }
        if state.tokenLife?.end.wall != credential.accessTokenExpiresAt {
            sessions[key]!.tokenLife = SessionWindow(endingAt: credential.accessTokenExpiresAt, measuredAt: clock.moment())
        }
        guard state.windowMeasured?.generation != state.generation || state.windowMeasured?.end != credential.endsAt else { return }
        sessions[key]!.window = SessionWindow(endingAt: credential.endsAt, measuredAt: clock.moment())
        sessions[key]!.windowMeasured = (state.generation, credential.endsAt)
    }

    /// The window of `credential`, the group's: as measured, or measured now for one that memory
    /// does not hold (there is none; a fallback, not a second rule).
    func window(of credential: Credential, _ key: AccountName) -> SessionWindow {
        if !madeHere(credential, key.group) {
            // Ended when it began: its tokens are for another provider, which the group no longer names.
            return SessionWindow(endingAt: credential.loggedInAt, measuredAt: clock.moment())
        }
        if let window = sessions[key]?.window, window.end.wall == credential.endsAt { return window }
        return SessionWindow(endingAt: credential.endsAt, measuredAt: clock.moment())
    }

    /// The access token's life, by the same rule as the window (``SessionWindow``): it ends at the
    /// first of its stored wall-clock end and as much elapsed time as it had left when its expiry
    /// was set or read. A refresh made while the wall clock was ahead stores an expiry as far
    /// ahead; measured so, the token is still renewed when it really ends (a blind attack had msso
    /// hand out an expired token for the hours the clock had been ahead).
    func tokenLife(of credential: Credential, _ key: AccountName) -> SessionWindow {
        if let life = sessions[key]?.tokenLife, life.end.wall == credential.accessTokenExpiresAt { return life }
        return SessionWindow(endingAt: credential.accessTokenExpiresAt, measuredAt: clock.moment())
    }

    /// Seconds the access token has left (``tokenLife(of:_:)``); negative once it has ended.
    func tokenLeft(_ credential: Credential, _ key: AccountName) -> Double {
        tokenLife(of: credential, key).remaining(at: clock.moment())
    }

    /// Whether the session was made with the identity provider the group names now. One made with
    /// another (an administrator moved the group) is over, and its tokens are sent nowhere: not to
    /// the new provider (a refresh or a revocation would hand it the old one's refresh token).
    func madeHere(_ credential: Credential, _ name: String) -> Bool {
        configuration.groups[name].map { $0.issuer == credential.issuer } ?? true
    }

    /// Arms the group's `Expiring` and `Expired` timers for its current window: each wakes at its
    /// time on the wall clock or on the elapsed clock, whichever comes first (``SessionWindow``).
    func armExpiryTimer(_ key: AccountName) {
        sessions[key]?.expiryTimer?.cancel()
        sessions[key]?.expiringTimer?.cancel()
        guard let window = sessions[key]?.window else { return }
        let now = clock.moment()
        guard window.isOpen(at: now) else { return }
        let clock = self.clock
        sessions[key]!.expiryTimer = Task { [weak self] in
            await clock.sleep(until: window.end)
            guard !Task.isCancelled else { return }
            await self?.windowPassed(key)
        }
        let lead = configuration.groups[key.group]?.expiringLead ?? 0
        guard lead > 0, window.remaining(at: now) > lead else { return }
        sessions[key]!.expiringTimer = Task { [weak self] in
            await clock.sleep(until: window.before(lead))
            guard !Task.isCancelled else { return }
            await self?.windowClosing(key)
        }
    }

    private func windowClosing(_ key: AccountName) {
        guard let credential = sessions[key]?.credential, window(of: credential, key).isOpen(at: clock.moment()),
              let config = configuration.groups[key.group] else { return }
        emit(.expiring, status(credential, config, key))
    }

    private func windowPassed(_ key: AccountName) {
        guard let credential = sessions[key]?.credential, var window = sessions[key]?.window else { return }
        let now = clock.moment()
        guard !window.isOpen(at: now) else { return armExpiryTimer(key) }
        window.close(at: now)
        sessions[key]!.window = window
        logger.info("session expired", metadata: ["group": "\(key.group)", "account": "\(key.account)"])
        publish(key)
        if let config = configuration.groups[key.group] { emit(.expired, status(credential, config, key)) }
    }
}
