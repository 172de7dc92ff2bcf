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
    /// The tokens minted from this session for one server or one app's scopes (``MintedToken``):
    /// stored with it, in the same item, so a rotated refresh token and the token it minted are
    /// written in one step.
    public var minted: [MintedToken] = []
    /// When a logout of this session began: it is over, and what is left is to revoke its tokens
    /// and delete the item. A mssod stopped in between finishes it when it reads the item (found
    /// by an outside test: a kill between the delete and the revocation left the refresh token
    /// alive at the provider, out of reach of any later logout).
    public var loggedOutAt: Double?

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
        case issuer, username, accessToken, refreshToken, accessTokenExpiresAt, loggedInAt, sessionExpiresAt, sessionMaxAt, subject, minted
        case loggedOutAt
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
        minted = try c.decodeIfPresent([MintedToken].self, forKey: .minted) ?? []
        // Any value, even one no clock gives, is a logout begun: an item never reads as a session again once marked.
        loggedOutAt = (try? c.decodeIfPresent(Double.self, forKey: .loggedOutAt)) ?? (c.contains(.loggedOutAt) ? 0 : nil)
        guard minted.count <= MintedToken.maximum, Set(minted.map(\.target)).count == minted.count,
              minted.allSatisfy({ Self.plausible($0.expiresAt) }) else {
            throw DecodingError.dataCorruptedError(forKey: .minted, in: c, debugDescription: "not minted tokens msso keeps")
        }
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

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(issuer, forKey: .issuer)
        try c.encodeIfPresent(username, forKey: .username)
        try c.encode(accessToken, forKey: .accessToken)
        try c.encodeIfPresent(refreshToken, forKey: .refreshToken)
        try c.encode(accessTokenExpiresAt, forKey: .accessTokenExpiresAt)
        try c.encode(loggedInAt, forKey: .loggedInAt)
        try c.encode(sessionExpiresAt, forKey: .sessionExpiresAt)
        try c.encode(sessionMaxAt, forKey: .sessionMaxAt)
        try c.encodeIfPresent(subject, forKey: .subject)
        if !minted.isEmpty { try c.encode(minted, forKey: .minted) } // a shared group's item stays as it was
        try c.encodeIfPresent(loggedOutAt, forKey: .loggedOutAt)
    }

    /// A Unix time between 2000 and 2200: anything else is not a time this broker wrote.
    static func plausible(_ time: Double) -> Bool { time.isFinite && time > 946_684_800 && time < 7_258_118_400 }

    /// The token minted for `target`, if one is held (expired or not).
    public func minted(for target: TokenTarget) -> MintedToken? {
        minted.first { $0.target == target }
    }

    /// Holds `token` in place of the one for its target.
    public mutating func keep(_ token: MintedToken) {
        minted.removeAll { $0.target == token.target }
        if minted.count >= MintedToken.maximum, let soonest = minted.indices.min(by: { minted[$0].expiresAt < minted[$1].expiresAt }) {
            minted.remove(at: soonest) // bounded: the one that ends first is minted again when asked for
        }
        minted.append(token)
    }

    /// When the session ends on the wall clock: its window's end, or sooner the access token's
    /// expiry when the IdP gave no refresh token (nothing can renew it then, so no app could sign
    /// past it). Whether it has ended is ``SessionWindow``'s to say, not a comparison with it.
    public var endsAt: Double {
        refreshToken == nil ? min(sessionExpiresAt, accessTokenExpiresAt) : sessionExpiresAt
    }

    /// The session as a client may see it: times and names, no token; its state and end as
    /// `window` has them `now`.
    public func status(group: String, window: SessionWindow, now: Moment) -> SessionStatus {
        SessionStatus(group: group, state: window.isOpen(at: now) ? .valid : .expired, issuer: issuer,
                      username: username, loggedInAt: loggedInAt, sessionExpiresAt: window.wallEnd(at: now),
                      sessionMaxAt: sessionMaxAt, accessTokenExpiresAt: accessTokenExpiresAt)
    }
}

/// Whether a session's window is open: the one rule that `check`, `status`, both sign paths and the
/// expiry timers ask.
///
/// The window is stored as a wall-clock time (``Credential/endsAt``: a keyring item outlives the
/// daemon and the boot), but its length is elapsed time, and the wall clock can jump: set by hand
/// or by NTP, or put right at a resume. So it ends at whichever comes first: its stored end on the
/// wall clock, or as much elapsed time (CLOCK_BOOTTIME: a suspend counts) as was left of it when
/// this daemon set it or read it from the store. A jump forward past the end ends it then; a jump
/// back leaves it no longer than it had left. Once seen to end (``close(at:)``), it stays ended
/// for the daemon's life, whatever the wall clock does after.
public struct SessionWindow: Sendable, Equatable {
    /// The end on each clock: the stored one on the wall clock, and the elapsed clock's.
    public private(set) var end: Moment

    /// The window that ends at `wall` (a wall-clock time), measured from `now`.
    public init(endingAt wall: Double, measuredAt now: Moment) {
        end = Moment(wall: wall, elapsed: now.elapsed + (wall - now.wall))
    }

    public func isOpen(at now: Moment) -> Bool { !end.reached(by: now) }

    /// Seconds left, by the clock that ends it first (negative once it has ended).
    public func remaining(at now: Moment) -> Double { min(end.wall - now.wall, end.elapsed - now.elapsed) }

    /// When it ends, as a wall-clock time: what `status` shows and a notification counts down to.
    /// The stored end itself unless the elapsed clock ends it sooner by more than the two clocks'
    /// readings differ (a status read twice, or before and after a restart, shows the same time).
    public func wallEnd(at now: Moment) -> Double {
        let byElapsed = end.elapsed - now.elapsed
        return byElapsed < end.wall - now.wall - 0.001 ? now.wall + byElapsed : end.wall
    }

    /// `lead` seconds before it ends, on both clocks (when `Expiring` is sent).
    public func before(_ lead: Double) -> Moment { Moment(wall: end.wall - lead, elapsed: end.elapsed - lead) }

    /// Ends it on the elapsed clock at `now`, once it was seen to end: a jump back of the wall clock
    /// afterwards does not open it again.
    public mutating func close(at now: Moment) {
        end.elapsed = min(end.elapsed, now.elapsed)
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

/// What a minted token is for: one server of the group's `resources` (``Resources/entry(for:)``),
/// one app's narrower `scopes`, or both. The session's own token has neither.
public struct TokenTarget: Hashable, Codable, Sendable, CustomStringConvertible {
    /// The `resources` entry, as configured.
    public var resource: String?
    /// The scopes asked for, sorted; nil: the group's.
    public var scopes: [String]?

    public init(resource: String?, scopes: [String]? = nil) {
        self.resource = resource
        self.scopes = scopes?.sorted()
    }

    /// The session's own token.
    public static let session = TokenTarget(resource: nil)

    /// Whether this is the session's own token (nothing to mint).
    public var isSession: Bool { resource == nil && scopes == nil }

    /// For sentences and logs: `https://git.example.com/ (scopes read)`.
    public var description: String {
        [resource, scopes.map { "(scopes \($0.joined(separator: " ")))" }].compactMap { $0 }.joined(separator: " ")
    }
}

/// An access token minted from the session for one target (``TokenTarget``): used there alone,
/// renewed like the session's own (within `refresh_lead` of its expiry), and ended with it.
public struct MintedToken: Codable, Sendable, Equatable {
    public var resource: String?
    public var scopes: [String]?
    public var accessToken: String
    public var expiresAt: Double

    /// At most this many per session: 64 `resources` entries, a few scope sets among them.
    public static let maximum = 256

    public init(_ target: TokenTarget, accessToken: String, expiresAt: Double) {
        resource = target.resource
        scopes = target.scopes
        self.accessToken = accessToken
        self.expiresAt = expiresAt
    }

    public var target: TokenTarget { TokenTarget(resource: resource, scopes: scopes) }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        resource = try c.decodeIfPresent(String.self, forKey: .resource)
        scopes = try c.decodeIfPresent([String].self, forKey: .scopes)
        accessToken = try c.decode(String.self, forKey: .accessToken)
        expiresAt = try c.decode(Double.self, forKey: .expiresAt)
        guard !accessToken.isEmpty, accessToken.utf8.count <= 16384, (resource?.utf8.count ?? 0) <= 8192,
              (scopes?.count ?? 0) <= 64, resource != nil || scopes != nil else {
            throw DecodingError.dataCorruptedError(forKey: .accessToken, in: c, debugDescription: "not a minted token msso keeps")
        }
    }

    enum CodingKeys: String, CodingKey { case resource, scopes, accessToken, expiresAt }
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
    /// The string claims of the login's checked ID token, for the administrator's `account_claim`
    /// (empty without an ID token).
    public var claims: [String: String] = [:]
    /// The scopes granted, when the provider said (`scope` of its answer).
    public var scope: String?

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
