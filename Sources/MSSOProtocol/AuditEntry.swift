/// One row of the audit log: who (as the kernel saw them) asked for what, and how it ended.
/// Never holds a token, a password or any argument value beyond the group's name.
public struct AuditEntry: Codable, Sendable, Equatable {
    /// Seconds since the Unix epoch.
    public var time: Double
    public var uid: UInt32
    public var pid: Int32
    public var executable: String?
    /// The registered app (or Flatpak app id) the caller was recognised as, if any.
    public var app: String?
    public var group: String?
    public var verb: String
    /// `ok`, or `error` with `error` naming it.
    public var outcome: String
    public var error: String?
    /// What else explains the outcome, never a secret (e.g. a pinned and a running digest).
    public var detail: String?
    /// The remote host a call came from, through an SSH forward (`msso ssh`): then `pid` is the
    /// local ssh process that carried it, and `executable` is absent. On a `forward` call, the
    /// host the forward was asked for.
    public var host: String?
    /// On a `sign` or `token` of a minted token: what it was minted for (the `resources` entry,
    /// an app's scopes).
    public var resource: String?
    /// The account of the group the call was about (``AccountName``), when it was about one.
    public var account: String?

    public init(time: Double, uid: UInt32, pid: Int32, executable: String?, app: String?, group: String?,
                verb: String, outcome: String, error: String?, detail: String? = nil, host: String? = nil, resource: String? = nil,
                account: String? = nil) {
        self.resource = resource
        self.account = account
        self.time = time
        self.uid = uid
        self.pid = pid
        self.executable = executable
        self.app = app
        self.group = group
        self.verb = verb
        self.outcome = outcome
        self.error = error
        self.detail = detail
        self.host = host
    }
}
