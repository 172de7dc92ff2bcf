extension Methods {
    /// What `msso doctor` asks the daemon: the checks only the daemon can make (its keyring, its
    /// configuration files read again now, each group's IdP discovery, and the caller's
    /// registrations). The user's tools only.
    public enum Diagnose: BrokerMethod {
        public typealias Arguments = Empty
        public typealias Result = Diagnosis
    }
}

/// The outcome of one check: fine, or the error a verb would meet and its sentence.
public struct Finding: Codable, Sendable, Equatable {
    public var ok: Bool
    /// The error name a verb would get (absent when ok).
    public var error: ErrorName?
    /// A sentence for the user: what is wrong and what to do (absent when ok).
    public var message: String?

    public init(ok: Bool, error: ErrorName? = nil, message: String? = nil) {
        self.ok = ok
        self.error = error
        self.message = message
    }

    public static let fine = Finding(ok: true)
    public init(_ failure: BrokerError) { self.init(ok: false, error: failure.name, message: failure.message) }
}

/// One group's OpenID Connect discovery, fetched afresh (not from the daemon's cache).
public struct DiscoveryCheck: Codable, Sendable, Equatable {
    public var group: String
    public var issuer: String
    public var ok: Bool
    /// How long the fetch took (or until it failed).
    public var seconds: Double
    public var error: ErrorName?
    public var message: String?
    /// For a group that mints tokens per server or per app: how its provider is asked, or why
    /// it cannot be (then ``mintingFails``), and how the last request for each target went.
    public var minting: String?
    public var mintingFails: Bool?
    public var mints: [MintOutcome]?

    public init(group: String, issuer: String, seconds: Double, failure: BrokerError?) {
        self.group = group
        self.issuer = issuer
        self.seconds = seconds
        ok = failure == nil
        error = failure?.name
        message = failure?.message
    }
}

/// Where the audit log is, and whether its rows are being written.
public struct AuditHealth: Codable, Sendable, Equatable {
    /// The database file.
    public var path: String
    /// What keeps rows from it (a directory that cannot be written, a full disk), how many wait,
    /// and what to do; absent while rows are written.
    public var problem: String?

    public init(path: String, problem: String?) {
        self.path = path
        self.problem = problem
    }
}

/// The daemon's side of `msso doctor`.
public struct Diagnosis: Codable, Sendable, Equatable {
    /// The store in use (the Secret Service's default collection, or the kernel keyring): usable.
    public var keyring: Finding
    /// Which store that is, and why (absent from older daemons).
    public var store: StoreDescription?
    /// The configuration files, read again now: whether they parse (``Finding/message`` names the
    /// file, line and key when not).
    public var configuration: Finding
    /// Whether the files, as they read now, differ from the configuration in force (a reload,
    /// SIGHUP, is needed). False when they do not parse.
    public var configurationChanged: Bool
    /// What was ignored while reading (admin files not root's, user groups shadowing the admin's).
    public var configurationWarnings: [String]
    /// The configured access groups (in force).
    public var groups: [String]
    /// Each group's discovery, in group order.
    public var discovery: [DiscoveryCheck]
    /// How the daemon sees the caller; `groups` are those it is registered for (needed for
    /// `sign` and `token`, even by the user's own tools).
    public var caller: CallerDescription
    public var locked: Bool
    /// The `resources` of each group that names them (absent from older daemons).
    public var resources: [String: [String]]?
    /// The audit log (absent from older daemons, and from a daemon that keeps none).
    public var audit: AuditHealth?

    public init(keyring: Finding, configuration: Finding, configurationChanged: Bool, configurationWarnings: [String],
                groups: [String], discovery: [DiscoveryCheck], caller: CallerDescription, locked: Bool,
                resources: [String: [String]]? = nil, store: StoreDescription? = nil, audit: AuditHealth? = nil) {
        self.resources = resources
        self.audit = audit
        self.store = store
        self.keyring = keyring
        self.configuration = configuration
        self.configurationChanged = configurationChanged
        self.configurationWarnings = configurationWarnings
        self.groups = groups
        self.discovery = discovery
        self.caller = caller
        self.locked = locked
    }
}

/// How the last request for one minted token went (`msso doctor`).
public struct MintOutcome: Codable, Sendable, Equatable {
    /// What it was for: the `resources` entry, an app's scopes.
    public var target: String
    public var ok: Bool
    public var at: Double
    /// Why it failed.
    public var message: String?

    public init(target: String, ok: Bool, at: Double, message: String?) {
        self.target = target
        self.ok = ok
        self.at = at
        self.message = message
    }
}
