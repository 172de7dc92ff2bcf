import FoundationEssentials
import MSSOProtocol

/// The one decision both sign paths make: the actor's ``Broker/sign(_:)`` and the reactor's
/// ``Broker/signWithoutWaiting(_:group:)``, which signs only when this says ``Verdict/sign`` and
/// leaves everything else (a refresh, a key to load, a nonce to remember, an error) to the actor.
struct SignDecision {
    /// What may be done with the credential at hand.
    enum Verdict: Equatable {
        case sign
        /// The access token is within `refresh_lead` of its expiry, or the broker has not stored it.
        case refreshFirst
        /// The group's profile needs a key that is not loaded.
        case keyFirst
        /// The session window has passed.
        case expired
    }

    let url: URL
    /// The URL's origin, where DPoP nonces are kept; "" for a profile without DPoP.
    let origin: String
    /// The nonce for the proof: the request's own (checked), else the newest its origin asked for.
    let nonce: String?

    /// Checks the request's DPoP nonce, of a sane size. `url`: the request's, as the gate checked
    /// it (an absolute http(s) URL, within the group's `resources`). `knownNonce` gives the newest
    /// nonce of an origin (asked only for a DPoP profile).
    init(_ request: SignRequest, url: URL, config: GroupConfig, knownNonce: (String) -> String?) throws(BrokerError) {
        self.url = url
        guard config.signing.token == .dpop else { // nonces matter to DPoP only: keep bearer's path bare
            (origin, nonce) = ("", nil)
            return
        }
        origin = url.origin
        if let given = request.dpopNonce {
            try DPoPNonces.check(given, origin: origin)
            nonce = given
        } else {
            nonce = knownNonce(origin)
        }
    }

    /// Whether `credential`, whose window is `window` and its access token's life `token`, signs
    /// now, and if not, what comes first.
    static func verdict(for credential: Credential, window: SessionWindow, token: SessionWindow, unsaved: Bool, hasKey: Bool,
                        config: GroupConfig, now: Moment) -> Verdict {
        guard window.isOpen(at: now) else { return .expired }
        // Without a refresh token there is nothing to renew: the token signs until it expires.
        if (credential.refreshToken != nil && token.remaining(at: now) < config.refreshLead) || unsaved { return .refreshFirst }
        if config.signing.needsKey && !hasKey { return .keyFirst }
        return .sign
    }
}
