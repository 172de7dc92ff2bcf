import MSSOProtocol

extension Broker {
    /// Measures the group's window (``SessionWindow``) anew when the credential's stored end moved
    /// or it is another login's (a login, an extend, a read from the store, an end the IdP made),
    /// and keeps the measure otherwise (a refresh). ``update(_:_:)`` calls it after every change.
    func measureWindow(_ name: String) {
        guard let state = groups[name], let credential = state.credential else {
            groups[name]?.window = nil
            groups[name]?.tokenLife = nil
            return
        }
        if state.tokenLife?.end.wall != credential.accessTokenExpiresAt {
            groups[name]!.tokenLife = SessionWindow(endingAt: credential.accessTokenExpiresAt, measuredAt: clock.moment())
        }
        guard state.windowMeasured?.generation != state.generation || state.windowMeasured?.end != credential.endsAt else { return }
        groups[name]!.window = SessionWindow(endingAt: credential.endsAt, measuredAt: clock.moment())
        groups[name]!.windowMeasured = (state.generation, credential.endsAt)
    }

    /// The window of `credential`, the group's: as measured, or measured now for one that memory
    /// does not hold (there is none; a fallback, not a second rule).
    func window(of credential: Credential, _ name: String) -> SessionWindow {
        if !madeHere(credential, name) {
            // Ended when it began: its tokens are for another provider, which the group no longer names.
            return SessionWindow(endingAt: credential.loggedInAt, measuredAt: clock.moment())
        }
        if let window = groups[name]?.window, window.end.wall == credential.endsAt { return window }
        return SessionWindow(endingAt: credential.endsAt, measuredAt: clock.moment())
    }

    /// The access token's life, by the same rule as the window (``SessionWindow``): it ends at the
    /// first of its stored wall-clock end and as much elapsed time as it had left when its expiry
    /// was set or read. A refresh made while the wall clock was ahead stores an expiry as far
    /// ahead; measured so, the token is still renewed when it really ends (a blind attack had msso
    /// hand out an expired token for the hours the clock had been ahead).
    func tokenLife(of credential: Credential, _ name: String) -> SessionWindow {
        if let life = groups[name]?.tokenLife, life.end.wall == credential.accessTokenExpiresAt { return life }
        return SessionWindow(endingAt: credential.accessTokenExpiresAt, measuredAt: clock.moment())
    }

    /// Seconds the access token has left (``tokenLife(of:_:)``); negative once it has ended.
    func tokenLeft(_ credential: Credential, _ name: String) -> Double {
        tokenLife(of: credential, name).remaining(at: clock.moment())
    }

    /// Whether the session was made with the identity provider the group names now. One made with
    /// another (an administrator moved the group) is over, and its tokens are sent nowhere: not to
    /// the new provider (a refresh or a revocation would hand it the old one's refresh token).
    func madeHere(_ credential: Credential, _ name: String) -> Bool {
        configuration.groups[name].map { $0.issuer == credential.issuer } ?? true
    }

    /// Arms the group's `Expiring` and `Expired` timers for its current window: each wakes at its
    /// time on the wall clock or on the elapsed clock, whichever comes first (``SessionWindow``).
    func armExpiryTimer(_ name: String) {
        groups[name]?.expiryTimer?.cancel()
        groups[name]?.expiringTimer?.cancel()
        guard let window = groups[name]?.window else { return }
        let now = clock.moment()
        guard window.isOpen(at: now) else { return }
        let clock = self.clock
        groups[name]!.expiryTimer = Task { [weak self] in
            await clock.sleep(until: window.end)
            guard !Task.isCancelled else { return }
            await self?.windowPassed(name)
        }
        let lead = configuration.groups[name]?.expiringLead ?? 0
        guard lead > 0, window.remaining(at: now) > lead else { return }
        groups[name]!.expiringTimer = Task { [weak self] in
            await clock.sleep(until: window.before(lead))
            guard !Task.isCancelled else { return }
            await self?.windowClosing(name)
        }
    }

    private func windowClosing(_ name: String) {
        guard let credential = groups[name]?.credential, window(of: credential, name).isOpen(at: clock.moment()),
              let config = configuration.groups[name] else { return }
        emit(.expiring, status(credential, config))
    }

    private func windowPassed(_ name: String) {
        guard let credential = groups[name]?.credential, var window = groups[name]?.window else { return }
        let now = clock.moment()
        guard !window.isOpen(at: now) else { return armExpiryTimer(name) }
        window.close(at: now)
        groups[name]!.window = window
        logger.info("session expired", metadata: ["group": "\(name)"])
        publish(name)
        if let config = configuration.groups[name] { emit(.expired, status(credential, config)) }
    }
}
