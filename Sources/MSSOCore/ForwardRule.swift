import MSSOProtocol

/// What a remote host reached through an SSH forward (`msso ssh HOST`) may do: a
/// `[forward."HOST"]` table of config.toml. Calls on the forward's socket are judged as the host,
/// never as the local ssh process that carries them; without a table, no forward is made.
public struct ForwardRule: Sendable, Equatable {
    /// The host, as tables and `forward` name it (lowercase: ``ForwardHost/normalized(_:)``).
    public var host: String
    /// The access groups the host may use.
    public var groups: [String]
    /// The methods the host may call (`hello` and `ping` always work).
    public var verbs: Set<CallArguments.Kind>
    /// Whether each new (group, verb) from the host waits for the user's answer in a desktop
    /// notification (Allow once, Allow for 1 hour, Deny), for the verbs the access table says a
    /// host is asked about (``AccessPolicy/Rule/confirm``: not those that only say how sessions stand).
    public var confirm = true
    /// The accounts of its groups the host may use (nil: any): a call naming none gets the first.
    public var accounts: [String]?
    /// Where the table is: `FILE:LINE`.
    public var source: String
    /// Whether the administrator wrote it (in a root-owned file).
    public var admin: Bool

    public init(host: String, groups: [String], verbs: Set<CallArguments.Kind> = ForwardRule.defaultVerbs, confirm: Bool = true,
                source: String = "", admin: Bool = false) {
        (self.host, self.groups, self.verbs, self.confirm, self.source, self.admin) = (host, groups, verbs, confirm, source, admin)
    }

    /// What a table without `verbs` allows: tokens and signatures, and asking about sessions.
    public static let defaultVerbs: Set<CallArguments.Kind> = [.token, .sign, .status, .check]

    /// Every verb a table may allow: those the access table lets a host call at all
    /// (``AccessPolicy/Access/hostTable``). `login` is a device login only (the password would be
    /// typed on the remote host; a browser login's redirect comes back to this machine's loopback);
    /// `logout` ends the named group's session only, never `--all`.
    public static let allowedVerbs: Set<CallArguments.Kind> = Set(AccessPolicy.Action.allCases.filter {
        AccessPolicy.rule(for: $0).forwarded == .hostTable
    }.map(\.method))
}
