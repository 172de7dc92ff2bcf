import MSSOProtocol

/// What the broker keeps for a logged-in group: the tokens and both clocks.
///
/// Stored whole as the keyring item's secret payload (JSON), so nothing here ever sits in a
/// keyring attribute, which is readable while the keyring is locked. Times are Unix seconds.
public struct Credential: Codable, Sendable, Equatable {
    public var issuer: String
    public var username: String?
    public var accessToken: String
    public var refreshToken: String?
    public var accessTokenExpiresAt: Double
    public var loggedInAt: Double
    /// The sliding window's end: `extend` moves it, `sign` refuses past it.
    public var sessionExpiresAt: Double
    /// The absolute cap on `sessionExpiresAt`.
    public var sessionMaxAt: Double
    /// The provider's id for the user (`sub` of the login's checked ID token): a refresh whose ID
    /// token names another is not this session's (OpenID Connect Core §12.2).
    public var subject: String?

    public init(issuer: String, username: String?, accessToken: String, refreshToken: String?,
                accessTokenExpiresAt: Double, loggedInAt: Double, sessionExpiresAt: Double, sessionMaxAt: Double,
                subject: String? = nil) {
        self.subject = subject
        self.issuer = issuer
        self.username = username
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.accessTokenExpiresAt = accessTokenExpiresAt
        self.loggedInAt = loggedInAt
        self.sessionExpiresAt = sessionExpiresAt
        self.sessionMaxAt = sessionMaxAt
    }

    enum CodingKeys: String, CodingKey {
        case issuer, username, accessToken, refreshToken, accessTokenExpiresAt, loggedInAt, sessionExpiresAt, sessionMaxAt, subject
    }

    /// Reads a stored credential, refusing one whose times no real session could have (a keyring
    /// item is a value anyone of the user's processes can write): the broker then reports it as
    /// corrupt instead of computing timers from it.
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        issuer = try c.decode(String.self, forKey: .issuer)
        username = try c.decodeIfPresent(String.self, forKey: .username)
        accessToken = try c.decode(String.self, forKey: .accessToken)
        refreshToken = try c.decodeIfPresent(String.self, forKey: .refreshToken)
        accessTokenExpiresAt = try c.decode(Double.self, forKey: .accessTokenExpiresAt)
        loggedInAt = try c.decode(Double.self, forKey: .loggedInAt)
        sessionExpiresAt = try c.decode(Double.self, forKey: .sessionExpiresAt)
        sessionMaxAt = try c.decode(Double.self, forKey: .sessionMaxAt)
        subject = try c.decodeIfPresent(String.self, forKey: .subject)
        for (key, time) in [(CodingKeys.accessTokenExpiresAt, accessTokenExpiresAt), (.loggedInAt, loggedInAt),
                            (.sessionExpiresAt, sessionExpiresAt), (.sessionMaxAt, sessionMaxAt)]
        where !Self.plausible(time) {
            throw DecodingError.dataCorruptedError(forKey: key, in: c, debugDescription: "not a plausible time")
        }
        guard sessionExpiresAt <= sessionMaxAt, !accessToken.isEmpty, accessToken.utf8.count <= 16384,
              (refreshToken?.utf8.count ?? 0) <= 16384 else {
            throw DecodingError.dataCorruptedError(forKey: .sessionExpiresAt, in: c, debugDescription: "inconsistent")
        }
    }

    /// A Unix time between 2000 and 2200: anything else is not a time this broker wrote.
    static func plausible(_ time: Double) -> Bool { time.isFinite && time > 946_684_800 && time < 7_258_118_400 }

    /// When the session ends: its window's end, or sooner the access token's expiry when the IdP
    /// gave no refresh token (nothing can renew it then, so no app could sign past it).
    public var endsAt: Double {
        refreshToken == nil ? min(sessionExpiresAt, accessTokenExpiresAt) : sessionExpiresAt
    }

    /// The session as a client may see it: times and names, no token.
    public func status(group: String, now: Double) -> SessionStatus {
        SessionStatus(group: group, state: now < endsAt ? .valid : .expired, issuer: issuer,
                      username: username, loggedInAt: loggedInAt, sessionExpiresAt: endsAt,
                      sessionMaxAt: sessionMaxAt, accessTokenExpiresAt: accessTokenExpiresAt)
    }
}

// Interpolating or dumping a credential must never print a token.
extension Credential: CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    public var description: String {
        "Credential(issuer: \(issuer), username: \(username ?? "-"), sessionExpiresAt: \(sessionExpiresAt), tokens: <redacted>)"
    }
    public var debugDescription: String { description }
    public var customMirror: Mirror { Mirror(self, children: ["redacted": description]) }
}

/// Tokens as an identity provider hands them out.
public struct TokenSet: Sendable {
    public var accessToken: String
    public var refreshToken: String?
    /// Seconds the access token lives, per the IdP.
    public var expiresIn: Double
    /// Who logged in as people know them (from a checked ID token); for display only.
    public var username: String?
    /// The provider's id for the user (`sub` of a checked ID token): what ties a refresh to the login.
    public var subject: String?

    public init(accessToken: String, refreshToken: String?, expiresIn: Double, username: String? = nil, subject: String? = nil) {
        self.accessToken = accessToken
        self.refreshToken = refreshToken
        self.expiresIn = expiresIn
        self.username = username
        self.subject = subject
    }
}

extension TokenSet: CustomStringConvertible, CustomReflectable {
    public var description: String { "TokenSet(expiresIn: \(expiresIn), tokens: <redacted>)" }
    public var customMirror: Mirror { Mirror(self, children: ["redacted": description]) }
}
