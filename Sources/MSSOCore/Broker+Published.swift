import FoundationEssentials
import MSSOProtocol
import MSSOSigning

/// What a `sign` on a fresh token needs, as the broker last published it.
struct Published: Sendable {
    struct Group: Sendable {
        var credential: Credential
        /// Its window, as the actor measured it (``SessionWindow``): the fast path asks the same rule.
        var window: SessionWindow
        /// The access token's life, as the actor measured it (``Broker/tokenLife(of:_:)``).
        var token: SessionWindow
        var key: SigningKey?
        /// The tokens minted for one server or one app, and their lives (``Broker/mintedLife(_:_:)``).
        var minted: [TokenTarget: (accessToken: String, life: SessionWindow)] = [:]
    }
    /// Sessions stored and valid-looking (the window and the token's age are checked at each sign).
    var sessions: [AccountName: Group] = [:]
    /// Each group's default account (``Broker/defaultAccount(_:)``), for a sign that names none.
    var defaults: [String: String] = [:]
    /// The newest DPoP nonce each origin asked for, per group (``Broker/dpopNonces``).
    var nonces: [String: DPoPNonces] = [:]
    /// Whether msso is locked (`msso lock`), for the gate (``Broker/isLocked``).
    var locked = false
}

extension Broker {
    /// Whether msso is locked now, read without waiting for the actor (the gate's view; the actor
    /// checks again where it hands something out: ``requireUnlocked(for:)``).
    public nonisolated var isLocked: Bool { published.withLock { $0.locked } }

    /// Publishes the group's state for ``signWithoutWaiting(_:checked:group:target:)``. Called after every change
    /// to its credential or key, before the verb that made the change replies: so once `logout`
    /// has replied, no sign can read the old token. While the broker is locked nothing is
    /// published (``lock(passphrase:)`` withdraws what was).
    func publish(_ key: AccountName) {
        let state = sessions[key]
        let entry: Published.Group?
        if !lock.isLocked, let state, state.loaded, !state.corrupt, !state.unsaved, let credential = state.credential {
            var minted: [TokenTarget: (accessToken: String, life: SessionWindow)] = [:]
            for token in credential.minted { minted[token.target] = (token.accessToken, mintedLife(token, key)) }
            entry = Published.Group(credential: credential, window: window(of: credential, key), token: tokenLife(of: credential, key),
                                    key: signingKeys[key.group], minted: minted)
        } else {
            entry = nil
        }
        let chosen = configuration.groups[key.group].map { defaultAccount($0) }
        published.withLock {
            $0.sessions[key] = entry
            $0.defaults[key.group] = chosen
        }
    }

    /// The account a call about `config` naming none gets, as last published (for audit rows).
    public nonisolated func defaultAccountNow(_ config: GroupConfig) -> String {
        config.defaultAccount ?? published.withLock { $0.defaults[config.name] } ?? AccountName.defaultName
    }

    /// Publishes every session of the group (its signing key changed).
    func publishGroup(_ name: String) {
        for key in sessions.keys where key.group == name { publish(key) }
    }

    func publishNonces(_ name: String) {
        let nonces = dpopNonces[name]
        published.withLock { $0.nonces[name] = nonces }
    }

    /// The headers for `request` when the group's session is valid and its token fresh, computed
    /// on the caller's thread without waiting for the actor; nil when the actor must decide
    /// (a refresh, a first load, an expired window, a new DPoP nonce, no key yet). `decision`: the
    /// request as the gate checked it, carried here and, if this returns nil, to the actor's path.
    public nonisolated func signWithoutWaiting(_ request: SignRequest, checked decision: SignDecision, group config: GroupConfig,
                                               target: TokenTarget = .session) throws(BrokerError) -> SignResponse? {
        let dpop = config.signing.token == .dpop
        let (entry, nonces) = published.withLock { published in
            let account = request.account ?? config.defaultAccount ?? published.defaults[config.name] ?? AccountName.defaultName
            return (published.sessions[AccountName(group: config.name, account: account)], dpop ? published.nonces[config.name] : nil)
        }
        if dpop && request.dpopNonce != nil { return nil } // a nonce to remember: the actor's
        guard let entry else { return nil }
        let now = clock.moment()
        var (accessToken, life) = (entry.credential.accessToken, entry.token)
        if !target.isSession {
            guard let minted = entry.minted[target] else { return nil } // not minted yet: the actor's
            (accessToken, life) = minted
        }
        guard SignDecision.verdict(for: entry.credential, window: entry.window, token: life, unsaved: false, hasKey: entry.key != nil, config: config,
                                   now: now) == .sign else {
            return nil
        }
        do {
            return SignResponse(headers: try config.signing.headers(for: request, url: decision.url, accessToken: accessToken,
                                                                    key: entry.key, dpopNonce: decision.nonce(known: nonces), now: now.wall))
        } catch let error as BrokerError {
            throw error
        } catch {
            return nil // let the actor's path report it
        }
    }
}
