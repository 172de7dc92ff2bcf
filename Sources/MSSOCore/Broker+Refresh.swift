import MSSOProtocol

/// When to ask an unavailable identity provider again: exponential backoff from 1 s to 60 s with
/// ±20 % jitter, or the IdP's `Retry-After` when that is longer (at most an hour).
struct RefreshBackoff {
    var failures = 0
    /// Before this Unix time, a refresh is not attempted.
    var notBefore: Double = 0

    mutating func failed(at now: Double, retryAfter: Double?) {
        failures += 1
        let exponential = min(60, Double(1 << min(failures - 1, 6)))
        let jittered = exponential * Double.random(in: 0.8...1.2)
        notBefore = now + min(3600, max(jittered, retryAfter ?? 0))
    }
}

extension Broker {
    /// A credential with a fresh access token. Concurrent callers share one IdP refresh. While
    /// the IdP is unavailable (and backing off), a token that still works is served as it is.
    func refreshed(_ config: GroupConfig, _ key: AccountName, _ stale: Credential) async throws -> Credential {
        let name = key
        let task: Task<Credential, any Error>
        if let running = sessions[name]?.refresh {
            task = running
        } else {
            let backoff = sessions[name]!.backoff
            if now() < backoff.notBefore, sessions[name]?.unsaved != true {
                if tokenLeft(stale, name) > 0 { return stale }
                throw BrokerError(.idpUnavailable, "the identity provider of \(name) is unavailable, so the access token could not be renewed; msso asks again in \(Int(backoff.notBefore - now()) + 1) s, and the session is kept")
            }
            let generation = sessions[name]!.generation
            task = inLane(name) { try await self.performRefresh(config, key, generation: generation) }
            sessions[name]!.refresh = task
        }
        defer { if sessions[name]?.refresh == task { sessions[name]?.refresh = nil } }
        do {
            return try await task.value
        } catch let busy as IdPBusy {
            // The IdP is down but the current token still works: serve it, retry after the backoff.
            if tokenLeft(stale, name) > 0 { return stale }
            let wait = Int(max(0, (sessions[name]?.backoff.notBefore ?? now()) - now())) + 1
            throw BrokerError(.idpUnavailable, "\(busy.error.message); msso asks again in \(wait) s, and the session is kept")
        }
    }

    private func performRefresh(_ config: GroupConfig, _ key: AccountName, generation: Int) async throws -> Credential {
        let name = key
        let config = config.session(key.account)
        guard var credential = sessions[name]?.credential, sessions[name]?.generation == generation else {
            throw BrokerError(.notLoggedIn, "not logged in to \(name); the session ended while it was being refreshed")
        }
        // A token rotated earlier but not yet stored only needs storing, unless it is stale too.
        let needsNewToken = !sessions[name]!.unsaved || tokenLeft(credential, name) < config.refreshLead
        if needsNewToken {
            guard let refreshToken = credential.refreshToken else {
                if tokenLeft(credential, name) > 0 { return credential }
                throw BrokerError(.expired, "the access token of \(name) expired and the IdP gave no refresh token; run `msso login \(name.options)`")
            }
            // The IdP spends a one-use refresh token as it answers: not before the answer can be
            // stored. Meanwhile a token that still works is served as it is.
            if let refusal = await store.cannotSave(credential, group: name.storeName) {
                if tokenLeft(credential, name) > 0 { return credential }
                throw refusal
            }
            let tokens: TokenSet
            do {
                let dpop = config.signing.token == .dpop ? try await signingKey(config) : nil
                tokens = try await identity.refresh(config, refreshToken: refreshToken, dpop: dpop)
                if let subject = tokens.subject, let ours = credential.subject, subject != ours {
                    // OpenID Connect Core §12.2: not this user's session any more; nothing of it is used.
                    throw BrokerError(.expired, "the identity provider of \(name) answered the refresh with another user's tokens, so the session is ended; run `msso login \(name.options)`")
                }
                sessions[name]?.backoff = RefreshBackoff()
            } catch let error as BrokerError where error.name == .expired {
                try await endWindowEarly(name, generation: generation)
                throw error
            } catch let busy as IdPBusy {
                guard sessions[name]?.generation == generation else {
                    // Logged out meanwhile (which cancels the refresh): nothing to keep or retry.
                    throw BrokerError(.notLoggedIn, "not logged in to \(name); the session ended while it was being refreshed")
                }
                sessions[name]?.backoff.failed(at: now(), retryAfter: busy.retryAfter)
                let wait = Int((sessions[name]?.backoff.notBefore ?? now()) - now()) + 1
                logger.warning("refresh failed; the session is kept", metadata: ["group": "\(name.group)", "account": "\(name.account)", "error": "\(busy.error)", "retry": "\(wait)s"])
                throw busy
            } catch is CancellationError {
                throw BrokerError(.notLoggedIn, "not logged in to \(name); the session ended while it was being refreshed")
            }
            retire(name, credential.accessToken, until: credential.accessTokenExpiresAt)
            credential.accessToken = tokens.accessToken
            credential.refreshToken = tokens.refreshToken ?? credential.refreshToken
            credential.accessTokenExpiresAt = now() + tokens.expiresIn
        }
        let refreshed = credential
        return try await exclusively(name) {
            guard sessions[name]?.generation == generation else {
                abandon(config, rotated: needsNewToken ? refreshed.refreshToken : nil, accessToken: needsNewToken ? refreshed.accessToken : nil)
                throw BrokerError(.notLoggedIn, "not logged in to \(name); the session ended while it was being refreshed")
            }
            // The IdP may have rotated the refresh token: keep it in memory even if the store
            // fails, and use the new access token only once it is stored.
            update(name) {
                $0.credential = refreshed
                $0.unsaved = true
            }
            try await store.save(refreshed, group: name.storeName)
            update(name) { $0.unsaved = false }
            identity.forgetRescuedRefresh(config) // kept until now in case this process died
            logger.info("access token refreshed", metadata: ["group": "\(name.group)", "account": "\(name.account)"])
            return refreshed
        }
    }

    /// A refresh or mint answered after its session ended (a logout or a login came meanwhile):
    /// the refresh token the provider rotated as it answered, and the access token it issued,
    /// belong to no session, so they are revoked (the logout revoked only those it knew), and its
    /// kept answer dropped. (Found by outside tests: the refresh token stayed alive at the provider
    /// and in the kernel keyring; later, an access token minted as the logout ran, valid an hour.)
    func abandon(_ config: GroupConfig, rotated: String?, accessToken: String?) {
        identity.forgetRescuedRefresh(config)
        let identity = self.identity
        if let rotated { Task { _ = await identity.revoke(config, token: rotated, hint: .refreshToken) } }
        if let accessToken { Task { _ = await identity.revoke(config, token: accessToken, hint: .accessToken) } }
    }

    /// The IdP no longer honours the session: close the window now so every app sees `Expired`.
    private func endWindowEarly(_ name: AccountName, generation: Int) async throws {
        try await exclusively(name) {
            guard sessions[name]?.generation == generation, var credential = sessions[name]?.credential else { return }
            credential.sessionExpiresAt = min(credential.sessionExpiresAt, now())
            update(name) { $0.credential = credential }
            try await store.save(credential, group: name.storeName)
        }
        armExpiryTimer(name)
        if let credential = sessions[name]?.credential, let config = configuration.groups[name.group] {
            emit(.expired, status(credential, config, name))
        }
    }
}

// MARK: Tokens for one server or one app (`tokens = "per-resource"`, a registration's `scopes`)

extension Broker {
    /// Starts `work` once the group's last request that may spend the refresh token has ended:
    /// with one-use rotation each such request spends the token the one before stored.
    func inLane<T: Sendable>(_ name: AccountName, _ work: @escaping @Sendable () async throws -> T) -> Task<T, any Error> {
        let before = sessions[name]?.lane
        let task = Task { () async throws -> T in
            await before?.value
            return try await work()
        }
        sessions[name, default: SessionState()].lane = Task { _ = try? await task.value }
        return task
    }

    /// The access token a request for `target` carries, and its life: the session's own
    /// (refreshed first when due), or the token minted for the target (minted first when none is
    /// held or it is due). `renew`: a server refused the one it had.
    func accessToken(_ config: GroupConfig, _ key: AccountName, _ credential: Credential, for target: TokenTarget,
                     renew: Bool) async throws -> (token: String, life: SessionWindow) {
        let name = key
        guard !target.isSession else {
            var credential = credential
            if renew || tokenLeft(credential, name) < config.refreshLead && credential.refreshToken != nil || sessions[name]?.unsaved == true {
                credential = try await refreshed(config, key, credential)
            }
            return (credential.accessToken, tokenLife(of: credential, name))
        }
        if !renew, sessions[name]?.unsaved != true, let held = credential.minted(for: target),
           mintedLife(held, name).remaining(at: clock.moment()) >= config.refreshLead {
            return (held.accessToken, mintedLife(held, name))
        }
        let task: Task<MintedToken, any Error>
        if let running = sessions[name]?.mints[target] {
            task = running
        } else {
            let backoff = sessions[name]!.backoff
            if now() < backoff.notBefore, sessions[name]?.unsaved != true {
                // The IdP was unavailable: a token that still works is served, none is asked for yet.
                if let held = credential.minted(for: target), mintedLife(held, name).remaining(at: clock.moment()) > 0 {
                    return (held.accessToken, mintedLife(held, name))
                }
                throw BrokerError(.idpUnavailable, "the identity provider of \(name) is unavailable, so no token for \(target) could be had; msso asks again in \(Int(backoff.notBefore - now()) + 1) s, and the session is kept")
            }
            let generation = sessions[name]!.generation
            task = inLane(name) { try await self.performMint(config, key, target, generation: generation, renew: renew) }
            sessions[name]!.mints[target] = task
        }
        defer { if sessions[name]?.mints[target] == task { sessions[name]?.mints[target] = nil } }
        do {
            let minted = try await task.value
            noteMint(name, target, failure: nil)
            return (minted.accessToken, mintedLife(minted, name))
        } catch let error as BrokerError {
            noteMint(name, target, failure: error.message)
            throw error
        } catch let busy as IdPBusy {
            noteMint(name, target, failure: busy.error.message)
            // The IdP is down but the token held still works: serve it, and ask again later.
            if let held = sessions[name]?.credential?.minted(for: target), mintedLife(held, name).remaining(at: clock.moment()) > 0 {
                return (held.accessToken, mintedLife(held, name))
            }
            throw BrokerError(.idpUnavailable, "\(busy.error.message); the session is kept")
        }
    }

    private func noteMint(_ name: AccountName, _ target: TokenTarget, failure: String?) {
        guard sessions[name] != nil else { return }
        if sessions[name]!.mintOutcomes[target] == nil, sessions[name]!.mintOutcomes.count >= MintedToken.maximum {
            sessions[name]!.mintOutcomes.removeAll() // bounded; doctor then shows the newest only
        }
        sessions[name]!.mintOutcomes[target] = MintOutcome(target: target.description, ok: failure == nil, at: now(), message: failure)
    }

    /// Keeps a token a renewal replaced while it still works, to revoke with the session (the
    /// callers that hold it may still be using it: it is not revoked now).
    func retire(_ key: AccountName, _ token: String, until end: Double) {
        guard end > now(), sessions[key] != nil else { return }
        sessions[key]!.retired.removeAll { $0.expiresAt <= now() || $0.token == token }
        sessions[key]!.retired.append((token, end))
        if sessions[key]!.retired.count > Self.maximumRetired { sessions[key]!.retired.removeFirst() }
    }

    /// A minted token's life on both clocks (``tokenLife(of:_:)``'s rule).
    func mintedLife(_ token: MintedToken, _ name: AccountName) -> SessionWindow {
        if let life = sessions[name]?.mintedLives[token.target], life.end.wall == token.expiresAt { return life }
        return SessionWindow(endingAt: token.expiresAt, measuredAt: clock.moment())
    }

    /// One request to the IdP for `target`'s token, in the group's lane; the answer (and the
    /// refresh token it rotated) is stored before the token is used.
    private func performMint(_ config: GroupConfig, _ key: AccountName, _ target: TokenTarget, generation: Int,
                             renew: Bool) async throws -> MintedToken {
        let name = key
        let config = config.session(key.account)
        let ended = BrokerError(.notLoggedIn, "not logged in to \(name); the session ended while a token for \(target) was being asked for")
        guard var credential = sessions[name]?.credential, sessions[name]?.generation == generation else { throw ended }
        // Minted by the request before this one in the lane, or renewed there; or minted before a
        // store that failed: then it only needs storing.
        if !renew, let held = credential.minted(for: target), mintedLife(held, name).remaining(at: clock.moment()) >= config.refreshLead {
            guard sessions[name]?.unsaved == true else { return held }
            try await storeMint(config, key, generation: generation, ended: ended)
            return held
        }
        let mechanism: TokenRequest
        do {
            mechanism = try await identity.mintingMechanism(config, for: target)
        } catch let error as BrokerError where error.name == .idpUnavailable {
            sessions[name]?.backoff.failed(at: now(), retryAfter: nil) // its discovery did not answer: backed off as a mint is
            throw IdPBusy(error)
        }
        if mechanism == .exchange, tokenLeft(credential, name) < config.refreshLead || sessions[name]?.unsaved == true {
            // The exchange's subject is the session's own token: renewed first (this lane's turn).
            credential = try await performRefresh(config, key, generation: generation)
        }
        // Room for the answer: tokens that have ended give theirs, then those that end first (each
        // minted again when asked for), so that a store with a small quota (the kernel keyring's
        // 20,000 bytes) goes on minting rather than jam (found by an outside test: ten did).
        var dropped = Set(credential.minted.filter { $0.target != target && mintedLife($0, name).remaining(at: clock.moment()) <= 0 }.map(\.target))
        credential.minted.removeAll { dropped.contains($0.target) }
        if mechanism == .resource {
            func withAnswer(_ credential: Credential) -> Credential {
                var probe = credential
                let size = max(credential.minted(for: target)?.accessToken.utf8.count ?? 0, credential.accessToken.utf8.count)
                probe.keep(MintedToken(target, accessToken: String(repeating: "x", count: size), expiresAt: now() + 1))
                return probe
            }
            var refusal = await store.cannotSave(withAnswer(credential), group: name.storeName)
            while refusal != nil, let soonest = credential.minted.filter({ $0.target != target }).min(by: { $0.expiresAt < $1.expiresAt }) {
                dropped.insert(soonest.target)
                credential.minted.removeAll { $0.target == soonest.target }
                refusal = await store.cannotSave(withAnswer(credential), group: name.storeName)
            }
            if let refusal { throw refusal } // the refresh token would be spent with no room for what rotates it
        }
        let tokens: TokenSet
        do {
            let dpop = config.signing.token == .dpop ? try await signingKey(config) : nil
            tokens = try await identity.mint(config, target: target, by: mechanism, refreshToken: credential.refreshToken,
                                             accessToken: credential.accessToken, dpop: dpop)
            if let subject = tokens.subject, let ours = credential.subject, subject != ours {
                throw BrokerError(.expired, "the identity provider of \(name) answered with another user's tokens, so the session is ended; run `msso login \(name.options)`")
            }
        } catch let error as BrokerError where error.name == .expired {
            try await endWindowEarly(name, generation: generation)
            throw error
        } catch let busy as IdPBusy {
            guard sessions[name]?.generation == generation else { throw ended }
            sessions[name]?.backoff.failed(at: now(), retryAfter: busy.retryAfter)
            logger.warning("a token for one server could not be had; the session is kept", metadata: ["group": "\(name.group)", "account": "\(name.account)", "resource": "\(target)", "error": "\(busy.error)"])
            throw busy
        } catch is CancellationError {
            throw ended
        } catch let refused as MintRefused {
            // Nothing handed out, but the refresh token the provider rotated as it answered is kept.
            if let rotated = refused.refreshToken {
                try await storeMint(config, key, generation: generation, ended: ended, rotated: rotated)
            }
            throw refused.error
        }
        let minted = MintedToken(target, accessToken: tokens.accessToken, expiresAt: now() + tokens.expiresIn)
        try await storeMint(config, key, generation: generation, ended: ended, rotated: tokens.refreshToken, minted: minted, dropped: dropped)
        logger.info("minted an access token", metadata: ["group": "\(name.group)", "account": "\(name.account)", "resource": "\(target)", "by": "\(mechanism.rawValue)"])
        return minted
    }

    /// Stores, under the group's lock, what a mint changed in the session: the refresh token the
    /// provider rotated (kept in memory even if the store fails, so never spent twice), the token
    /// minted (used only once stored), those that gave their place; with none of them, what a
    /// store that failed before left unsaved. A session ended meanwhile gets nothing: the rotated
    /// token is revoked (``abandon(_:rotated:accessToken:)``) and `ended` thrown.
    private func storeMint(_ config: GroupConfig, _ key: AccountName, generation: Int, ended: BrokerError, rotated: String? = nil,
                           minted: MintedToken? = nil, dropped: Set<TokenTarget> = []) async throws {
        let name = key
        try await exclusively(name) {
            guard sessions[name]?.generation == generation, var current = sessions[name]?.credential else {
                abandon(config, rotated: rotated, accessToken: minted?.accessToken)
                throw ended
            }
            current.refreshToken = rotated ?? current.refreshToken
            for old in current.minted where dropped.contains(old.target) || old.target == minted?.target {
                retire(name, old.accessToken, until: old.expiresAt)
            }
            current.minted.removeAll { dropped.contains($0.target) }
            if let minted { current.keep(minted) }
            update(name) {
                $0.credential = current
                $0.unsaved = true
                if let minted {
                    $0.mintedLives[minted.target] = SessionWindow(endingAt: minted.expiresAt, measuredAt: clock.moment())
                    $0.backoff = RefreshBackoff()
                }
            }
            try await store.save(current, group: name.storeName)
            update(name) { $0.unsaved = false }
            identity.forgetRescuedRefresh(config)
        }
    }
}
