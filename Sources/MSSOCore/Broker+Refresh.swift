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
    func refreshed(_ config: GroupConfig, _ stale: Credential) async throws -> Credential {
        let name = config.name
        let task: Task<Credential, any Error>
        if let running = groups[name]?.refresh {
            task = running
        } else {
            let backoff = groups[name]!.backoff
            if now() < backoff.notBefore, groups[name]?.unsaved != true {
                if tokenLeft(stale, name) > 0 { return stale }
                throw BrokerError(.idpUnavailable, "the identity provider of \"\(name)\" is unavailable, so the access token could not be renewed; msso asks again in \(Int(backoff.notBefore - now()) + 1) s, and the session is kept")
            }
            let generation = groups[name]!.generation
            task = Task { () async throws -> Credential in
                try await self.performRefresh(config, generation: generation)
            }
            groups[name]!.refresh = task
        }
        defer { if groups[name]?.refresh == task { groups[name]?.refresh = nil } }
        do {
            return try await task.value
        } catch let busy as IdPBusy {
            // The IdP is down but the current token still works: serve it, retry after the backoff.
            if tokenLeft(stale, name) > 0 { return stale }
            let wait = Int(max(0, (groups[name]?.backoff.notBefore ?? now()) - now())) + 1
            throw BrokerError(.idpUnavailable, "\(busy.error.message); msso asks again in \(wait) s, and the session is kept")
        }
    }

    private func performRefresh(_ config: GroupConfig, generation: Int) async throws -> Credential {
        let name = config.name
        guard var credential = groups[name]?.credential, groups[name]?.generation == generation else {
            throw BrokerError(.notLoggedIn, "not logged in to \"\(name)\"; the session ended while it was being refreshed")
        }
        // A token rotated earlier but not yet stored only needs storing, unless it is stale too.
        let needsNewToken = !groups[name]!.unsaved || tokenLeft(credential, name) < config.refreshLead
        if needsNewToken {
            guard let refreshToken = credential.refreshToken else {
                if tokenLeft(credential, name) > 0 { return credential }
                throw BrokerError(.expired, "the access token of \"\(name)\" expired and the IdP gave no refresh token; run `msso login --group \(name)`")
            }
            // The IdP spends a one-use refresh token as it answers: not before the answer can be
            // stored. Meanwhile a token that still works is served as it is.
            if let refusal = await store.cannotSave(credential, group: name) {
                if tokenLeft(credential, name) > 0 { return credential }
                throw refusal
            }
            let tokens: TokenSet
            do {
                let dpop = config.signing.token == .dpop ? try await signingKey(config) : nil
                tokens = try await identity.refresh(config, refreshToken: refreshToken, dpop: dpop)
                if let subject = tokens.subject, let ours = credential.subject, subject != ours {
                    // OpenID Connect Core §12.2: not this user's session any more; nothing of it is used.
                    throw BrokerError(.expired, "the identity provider of \"\(name)\" answered the refresh with another user's tokens, so the session is ended; run `msso login --group \(name)`")
                }
                groups[name]?.backoff = RefreshBackoff()
            } catch let error as BrokerError where error.name == .expired {
                try await endWindowEarly(name, generation: generation)
                throw error
            } catch let busy as IdPBusy {
                guard groups[name]?.generation == generation else {
                    // Logged out meanwhile (which cancels the refresh): nothing to keep or retry.
                    throw BrokerError(.notLoggedIn, "not logged in to \"\(name)\"; the session ended while it was being refreshed")
                }
                groups[name]?.backoff.failed(at: now(), retryAfter: busy.retryAfter)
                let wait = Int((groups[name]?.backoff.notBefore ?? now()) - now()) + 1
                logger.warning("refresh failed; the session is kept", metadata: ["group": "\(name)", "error": "\(busy.error)", "retry": "\(wait)s"])
                throw busy
            } catch is CancellationError {
                throw BrokerError(.notLoggedIn, "not logged in to \"\(name)\"; the session ended while it was being refreshed")
            }
            credential.accessToken = tokens.accessToken
            credential.refreshToken = tokens.refreshToken ?? credential.refreshToken
            credential.accessTokenExpiresAt = now() + tokens.expiresIn
        }
        let refreshed = credential
        return try await exclusively(name) {
            guard groups[name]?.generation == generation else {
                throw BrokerError(.notLoggedIn, "not logged in to \"\(name)\"; the session ended while it was being refreshed")
            }
            // The IdP may have rotated the refresh token: keep it in memory even if the store
            // fails, and use the new access token only once it is stored.
            update(name) {
                $0.credential = refreshed
                $0.unsaved = true
            }
            try await store.save(refreshed, group: name)
            update(name) { $0.unsaved = false }
            identity.forgetRescuedRefresh(config) // kept until now in case this process died
            logger.info("access token refreshed", metadata: ["group": "\(name)"])
            return refreshed
        }
    }

    /// The IdP no longer honours the session: close the window now so every app sees `Expired`.
    private func endWindowEarly(_ name: String, generation: Int) async throws {
        try await exclusively(name) {
            guard groups[name]?.generation == generation, var credential = groups[name]?.credential else { return }
            credential.sessionExpiresAt = min(credential.sessionExpiresAt, now())
            update(name) { $0.credential = credential }
            try await store.save(credential, group: name)
        }
        armExpiryTimer(name)
        if let credential = groups[name]?.credential, let config = configuration.groups[name] {
            emit(.expired, status(credential, config))
        }
    }
}
