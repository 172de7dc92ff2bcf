import FoundationEssentials
import MSSOProtocol

/// A `sign` as checked once and carried to both sign paths, the reactor's
/// ``Broker/signWithoutWaiting(_:checked:group:target:)`` and the actor's
/// ``Broker/sign(_:checked:target:)``; and the one rule both follow, ``verdict(for:window:token:unsaved:hasKey:config:now:)``:
/// the reactor signs only when it says ``Verdict/sign`` and leaves everything else (a refresh, a
/// key to load, a nonce to remember, an error) to the actor.
public struct SignDecision: Sendable {
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

    public let url: URL
    /// The URL's origin, where DPoP nonces are kept; "" for a profile without DPoP.
    let origin: String
    /// The nonce the request brought (checked, of a sane size), for a DPoP profile.
    let givenNonce: String?

    /// Checks the request's DPoP nonce, of a sane size. `url`: the request's, as the gate checked
    /// it (an absolute http(s) URL, within the group's `resources`). Made once, by the gate, and
    /// carried to whichever path signs.
    public init(_ request: SignRequest, url: URL, config: GroupConfig) throws(BrokerError) {
        self.url = url
        guard config.signing.token == .dpop else { // nonces matter to DPoP only: keep bearer's path bare
            (origin, givenNonce) = ("", nil)
            return
        }
        origin = url.origin
        if let given = request.dpopNonce { try DPoPNonces.check(given, origin: origin) }
        givenNonce = request.dpopNonce
    }

    /// The nonce for the proof: the request's own, else the newest its origin asked for (in
    /// `known`, the group's, as the path that signs has them).
    func nonce(known: DPoPNonces?) -> String? {
        guard !origin.isEmpty else { return nil }
        return givenNonce ?? known?.nonce(for: origin)
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
