extension Methods {
    /// Starts a session with the group's identity provider.
    public enum Login: BrokerMethod {
        public typealias Arguments = LoginArguments
        public typealias Result = SessionStatus
    }

    /// Slides the session window to now + timeout (never past the absolute cap).
    public enum Extend: BrokerMethod {
        public typealias Arguments = GroupArguments
        public typealias Result = SessionStatus
    }

    /// Ends a group's session (or every group's with `all`).
    public enum Logout: BrokerMethod {
        public struct Arguments: Codable, Sendable, Equatable {
            public var group: String?
            /// One account of the group (nil: its default account); with `all`, ignored.
            public var account: String?
            /// Every account of every group the caller may use (or of `group`, when named).
            public var all: Bool?
            public init(group: String? = nil, account: String? = nil, all: Bool = false) {
                self.group = group
                self.account = account
                self.all = all ? true : nil
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            /// The groups whose session this call ended (empty when nothing was logged in), once each.
            public var loggedOut: [String]
            /// Each session this call ended: its group and account.
            public var sessions: [AccountName]?
            /// Whether the identity provider was made to forget every ended session's tokens
            /// (RFC 7009): false when one of them stays valid there (``notRevoked`` says which and
            /// why); absent when no session ended.
            public var revoked: Bool?
            /// The ended sessions whose tokens the identity provider still honours.
            public var notRevoked: [NotRevoked]?

            public init(sessions: [AccountName], notRevoked: [NotRevoked] = []) {
                var groups: [String] = []
                for session in sessions where !groups.contains(session.group) { groups.append(session.group) }
                loggedOut = groups
                self.sessions = sessions.isEmpty ? nil : sessions
                revoked = sessions.isEmpty ? nil : notRevoked.isEmpty
                self.notRevoked = notRevoked.isEmpty ? nil : notRevoked
            }

            /// Joins the results of several logouts (`--all` as a user's own apps may use it).
            public static func + (lhs: Result, rhs: Result) -> Result {
                Result(sessions: (lhs.sessions ?? []) + (rhs.sessions ?? []), notRevoked: (lhs.notRevoked ?? []) + (rhs.notRevoked ?? []))
            }
        }

        /// A session ended here whose tokens the identity provider was not made to forget: the
        /// local copy is gone and every app was told, but a copy of the token taken earlier still
        /// works at the provider until it expires.
        public struct NotRevoked: Codable, Sendable, Equatable {
            public var group: String
            public var account: String?
            /// Why, in a sentence: the provider offers no revocation, or refused, or did not answer.
            public var reason: String
            /// Until when the last access token stays valid (Unix seconds).
            public var accessTokenExpiresAt: Double?
            /// Whether a refresh token stays valid too (until the provider expires it).
            public var refreshToken: Bool
            /// How many tokens minted for one server or one app stay valid too (until
            /// ``accessTokenExpiresAt`` at the latest); absent when none.
            public var mintedTokens: Int?

            public init(group: String, account: String? = nil, reason: String, accessTokenExpiresAt: Double?, refreshToken: Bool,
                        mintedTokens: Int? = nil) {
                self.group = group
                self.account = account
                self.mintedTokens = mintedTokens
                self.reason = reason
                self.accessTokenExpiresAt = accessTokenExpiresAt
                self.refreshToken = refreshToken
            }
        }
    }

    /// Describes every configured group's session, or one group's.
    public enum Status: BrokerMethod {
        public typealias Arguments = GroupArguments
        public struct Result: Codable, Sendable, Equatable {
            public var groups: [SessionStatus]
            /// True while the broker is locked (`lock`); absent otherwise.
            public var locked: Bool?
            /// When the lock took effect.
            public var lockedAt: Double?
            /// Where every group's session is kept, and why there (absent from older daemons).
            public var store: StoreDescription?
            /// The audit log, only while its rows are not being written (``AuditHealth/problem``).
            public var audit: AuditHealth?
            public init(groups: [SessionStatus], locked: Bool? = nil, lockedAt: Double? = nil, store: StoreDescription? = nil,
                        audit: AuditHealth? = nil) {
                self.groups = groups
                self.locked = locked
                self.lockedAt = lockedAt
                self.store = store
                self.audit = audit
            }
        }
    }

    /// Answers "is this group's session valid?" for scripts and the PAM module.
    public enum Check: BrokerMethod {
        public typealias Arguments = GroupArguments
        public typealias Result = SessionStatus
    }
}

/// Where the daemon keeps every group's credential and signing key (`store` in msso.toml(5)).
public struct StoreDescription: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        /// The desktop keyring, through the freedesktop Secret Service.
        case secretService = "secret-service"
        /// The kernel's key retention service: the user's persistent keyring, in memory.
        case kernel
    }
    public var kind: Kind
    /// Where exactly, in a sentence (which keyring, how long it keeps what it holds).
    public var place: String
    /// Why this store: the configuration's choice, or what `auto` found.
    public var reason: String

    public init(kind: Kind, place: String, reason: String) {
        self.kind = kind
        self.place = place
        self.reason = reason
    }
}

/// The state of one group's SSO session. Times are seconds since the Unix epoch.
public struct SessionStatus: Codable, Sendable, Equatable {
    // State (valid, expired, notLoggedIn, corrupt) is in WireNames.swift (generated).

    public var group: String
    /// Which of the group's accounts (``AccountName/defaultName`` for the one a login names none).
    public var account: String?
    /// True for the account a call that names none gets (``AccountName``).
    public var isDefault: Bool?
    public var state: State
    public var issuer: String?
    public var username: String?
    public var loggedInAt: Double?
    /// The end of the sliding window (`extend` moves it).
    public var sessionExpiresAt: Double?
    /// The absolute cap: `extend` never moves the window past it.
    public var sessionMaxAt: Double?
    /// When the current access token expires (refreshed silently while the session is valid).
    public var accessTokenExpiresAt: Double?
    /// Whether the administrator defined the group (so the session-start module may give it the
    /// login password); false for a group of the user's own configuration.
    public var admin: Bool?
    /// True while the broker is locked (`lock`): the session may be valid, but nothing signs
    /// until `unlock`. Absent otherwise.
    public var locked: Bool?
    /// Only in the answer to the `login` that did it, and its `LoggedIn` signal: true when that
    /// login made its account the group's (the group's first, or a change asked for with
    /// `newAccount`). Absent otherwise.
    public var newAccount: Bool?
    /// With ``newAccount``: the name of the account it replaced, when the group had one.
    public var previousAccount: String?
    /// In `status` only: the tokens minted from the session for one server (`tokens =
    /// "per-resource"`) or one app's scopes, and until when; never a token.
    public var tokens: [MintedTokenStatus]?

    public init(group: String, state: State, issuer: String? = nil, username: String? = nil,
                loggedInAt: Double? = nil, sessionExpiresAt: Double? = nil, sessionMaxAt: Double? = nil,
                accessTokenExpiresAt: Double? = nil, admin: Bool? = nil) {
        self.group = group
        self.state = state
        self.issuer = issuer
        self.username = username
        self.loggedInAt = loggedInAt
        self.sessionExpiresAt = sessionExpiresAt
        self.sessionMaxAt = sessionMaxAt
        self.accessTokenExpiresAt = accessTokenExpiresAt
        self.admin = admin
    }
}

/// How a login proves the user's identity to the identity provider.
public enum LoginFlow: String, Codable, Sendable {
    /// OAuth 2.0 resource owner password grant: `username` and `password` are required.
    case password
    /// RFC 8628 device authorization grant: the user approves on another screen.
    case device
    /// Authorization code with PKCE (RFC 7636) and a loopback redirect (RFC 8252): the user logs
    /// in in their browser on this machine.
    case browser
}

public struct LoginArguments: Codable, Sendable {
    public var group: String?
    /// The account to log in (nil: the group's default account).
    public var account: String?
    public var flow: LoginFlow
    public var username: String?
    /// Only for the password flow. Sent once over the socket, never stored or logged.
    public var password: String?
    /// The login may end in another account than the group's: it becomes the group's account
    /// (announced). Without it, a login that comes back as another account is refused. For the
    /// user's own tools only.
    public var newAccount: Bool?

    public init(group: String? = nil, account: String? = nil, flow: LoginFlow, username: String? = nil, password: String? = nil,
                newAccount: Bool? = nil) {
        self.group = group
        self.account = account
        self.flow = flow
        self.username = username
        self.password = password
        self.newAccount = newAccount
    }
}

/// What a device login asks the user to do.
public struct DevicePrompt: Codable, Sendable, Equatable {
    public var verificationURI: String
    /// The verification URI with the code filled in, when the IdP offers one.
    public var verificationURIComplete: String?
    public var userCode: String
    /// When the code stops working, seconds since the Unix epoch.
    public var expiresAt: Double

    public init(verificationURI: String, verificationURIComplete: String?, userCode: String, expiresAt: Double) {
        self.verificationURI = verificationURI
        self.verificationURIComplete = verificationURIComplete
        self.userCode = userCode
        self.expiresAt = expiresAt
    }
}

/// What a browser login asks the user to open.
public struct BrowserPrompt: Codable, Sendable, Equatable {
    /// The identity provider's authorization URL, to open in a browser on this machine.
    public var url: String
    /// When the broker stops waiting for the browser, seconds since the Unix epoch.
    public var expiresAt: Double

    public init(url: String, expiresAt: Double) {
        self.url = url
        self.expiresAt = expiresAt
    }
}

/// A token minted from a session (``SessionStatus/tokens``): what it is for and until when.
public struct MintedTokenStatus: Codable, Sendable, Equatable {
    /// The group's `resources` entry it was minted for; absent for one app's scopes alone.
    public var resource: String?
    /// The scopes it was minted with; absent: the group's.
    public var scopes: [String]?
    public var expiresAt: Double

    public init(resource: String?, scopes: [String]?, expiresAt: Double) {
        self.resource = resource
        self.scopes = scopes
        self.expiresAt = expiresAt
    }
}
