import MSSOProtocol
import MSSOSigning

/// What a `sign` on a fresh token needs, as the broker last published it.
struct Published: Sendable {
    struct Group: Sendable {
        var credential: Credential
        var key: SigningKey?
    }
    /// Groups with a stored, valid-looking session (the window and the token's age are checked
    /// at each sign).
    var groups: [String: Group] = [:]
    /// The newest DPoP nonce each origin asked for, per group (``Broker/dpopNonces``).
    var nonces: [String: DPoPNonces] = [:]
}

extension Broker {
    /// Publishes the group's state for ``signWithoutWaiting(_:group:)``. Called after every change
    /// to its credential or key, before the verb that made the change replies: so once `logout`
    /// has replied, no sign can read the old token. While the broker is locked nothing is
    /// published (``lock(passphrase:)`` withdraws what was).
    func publish(_ name: String) {
        let state = groups[name]
        let entry: Published.Group?
        if !lock.isLocked, let state, state.loaded, !state.corrupt, !state.unsaved, let credential = state.credential {
            entry = Published.Group(credential: credential, key: signingKeys[name])
        } else {
            entry = nil
        }
        published.withLock { $0.groups[name] = entry }
    }

    func publishNonces(_ name: String) {
        let nonces = dpopNonces[name]
        published.withLock { $0.nonces[name] = nonces }
    }

    /// The headers for `request` when the group's session is valid and its token fresh, computed
    /// on the caller's thread without waiting for the actor; nil when the actor must decide
    /// (a refresh, a first load, an expired window, a new DPoP nonce, no key yet). Throws only
    /// for a malformed request.
    public nonisolated func signWithoutWaiting(_ request: SignRequest, group config: GroupConfig) throws(BrokerError) -> SignResponse? {
        let url = try request.validatedURL()
        if let resources = config.resources { try resources.authorize(request.url, group: config.name, verb: "signature") }
        if request.dpopNonce != nil && config.signing.token == .dpop { return nil }
        let (entry, nonce) = published.withLock { published in
            (published.groups[config.name], config.signing.token == .dpop ? published.nonces[config.name]?.nonce(for: url.origin) : nil)
        }
        guard let entry else { return nil }
        let now = self.now()
        guard now < entry.credential.sessionExpiresAt, entry.credential.accessTokenExpiresAt - now >= config.refreshLead,
              !config.signing.needsKey || entry.key != nil else { return nil }
        do {
            return SignResponse(headers: try config.signing.headers(for: request, url: url, accessToken: entry.credential.accessToken,
                                                                    key: entry.key, dpopNonce: nonce, now: now))
        } catch let error as BrokerError {
            throw error
        } catch {
            return nil // let the actor's path report it
        }
    }
}
