import MSSOCore
import MSSOProtocol

/// Who may call what, from what the kernel says about the process that sent each call: one table,
/// ``rule(for:)``, with a row per method; a method added to the protocol does not compile without
/// its row.
///
/// - The broker serves the user it runs as. Another uid is refused, at connect and at every call
///   (a socket handed to another user's process is judged as that process).
/// - **Root** (the PAM module at session start) may ask `status` and `check`, log the user in with
///   the password they just typed, to a group the administrator defined, and log them out: never
///   anything that returns a token.
/// - **The user's own tools** (`msso` and `msso-logout` installed beside `mssod`, run on the host,
///   not from a namespace of their own) manage every group: log in, extend, log out, status,
///   subscribe, `apps`, `audit`. Signing is not management: `msso sign` and `msso token` print a
///   token, so they need a registration like any app's.
/// - **Apps** use only the access groups they are registered for (`apps.d`).
/// - **A forwarded host** (a call on a socket `forward` made for an SSH session) is judged as
///   that host, never as the local ssh process that carries its bytes: the verbs and groups of
///   its `[forward."HOST"]` table, and never management (apps, audit, keys, diagnose, lock,
///   unlock, forward), a password or browser login, or `logout --all`.
public struct AccessPolicy: Sendable {
    public let owner: UInt32
    /// Executables of the user's own tools.
    public let ownTools: Set<String>

    public init(owner: UInt32, ownTools: Set<String> = []) {
        self.owner = owner
        self.ownTools = ownTools
    }

    public enum Role: Sendable, CaseIterable { case root, ownTool, app, forwarded }

    public func role(uid: UInt32, app: AppIdentity?) -> Role {
        if uid == 0 && owner != 0 { return .root }
        if let app, app.onHost, let executable = app.executable, ownTools.contains(executable) { return .ownTool }
        return .app
    }

    /// Whether a process of this uid may talk to the broker at all.
    public func admits(uid: UInt32) -> Bool { uid == owner || uid == 0 }

    public func refusal(uid: UInt32) -> BrokerError {
        BrokerError(.forbidden, "this broker serves uid \(owner) only; uid \(uid) must use its own (is mssod running for that user?)")
    }

    // MARK: The table

    /// What one role may do with one method.
    public enum Access: Sendable, Equatable {
        /// Not at all: refused before anything is looked at.
        case refused
        /// On any configured group, registered or not (management).
        case anyGroup
        /// On the groups a registration gives it; without a group argument, on those only.
        case registeredGroups
        /// Only when registered for at least one configured group (a suite's "lock" button): a
        /// program registered for none could set a lock whose passphrase the user does not know.
        case registeredForSomeGroup
        /// Root's login: the password flow, to a group the administrator defined.
        case passwordLoginToAdminGroups
        /// A forwarded host: when its `[forward."HOST"]` table names the verb, on the groups the
        /// table names (``ForwardRule``).
        case hostTable
    }

    /// One row of the table.
    public struct Rule: Sendable, Equatable {
        public var root: Access
        public var ownTool: Access
        public var app: Access
        public var forwarded: Access
        /// Whether the method works while msso is locked (`msso lock`). No call is refused from
        /// here: the broker refuses one with `requireUnlocked()` in each verb the lock stops,
        /// inside the actor turn that does the work, so a call that was waiting when the lock
        /// took effect is refused too. This column records which methods those are
        /// (`AccessPolicyTests` checks it against that list).
        public var whileLocked: Bool
        /// Whether a success hands the caller a token or a signature (what `confirm` guards).
        public var givesCredentials: Bool

        public func access(for role: Role) -> Access {
            switch role {
            case .root: root
            case .ownTool: ownTool
            case .app: app
            case .forwarded: forwarded
            }
        }

        init(root: Access, ownTool: Access, app: Access, forwarded: Access = .refused, whileLocked: Bool, givesCredentials: Bool) {
            (self.root, self.ownTool, self.app, self.forwarded) = (root, ownTool, app, forwarded)
            (self.whileLocked, self.givesCredentials) = (whileLocked, givesCredentials)
        }
    }

    /// The table: every method, every role.
    public static func rule(for kind: CallArguments.Kind) -> Rule {
        switch kind {
        case .hello, .ping:
            Rule(root: .anyGroup, ownTool: .anyGroup, app: .anyGroup, forwarded: .anyGroup, whileLocked: true, givesCredentials: false)
        case .status, .check, .logout:
            Rule(root: .anyGroup, ownTool: .anyGroup, app: .registeredGroups, forwarded: .hostTable, whileLocked: true, givesCredentials: false)
        case .login:
            Rule(root: .passwordLoginToAdminGroups, ownTool: .anyGroup, app: .registeredGroups, forwarded: .hostTable, whileLocked: false,
                 givesCredentials: false)
        case .extend:
            Rule(root: .refused, ownTool: .anyGroup, app: .registeredGroups, forwarded: .hostTable, whileLocked: false, givesCredentials: false)
        case .subscribe:
            Rule(root: .refused, ownTool: .anyGroup, app: .registeredGroups, forwarded: .hostTable, whileLocked: true, givesCredentials: false)
        case .sign, .token:
            Rule(root: .refused, ownTool: .registeredGroups, app: .registeredGroups, forwarded: .hostTable, whileLocked: false, givesCredentials: true)
        case .apps, .audit, .keys, .diagnose:
            // Rotating keys is management; reading a public key is not, but apps have no use for it.
            Rule(root: .refused, ownTool: .anyGroup, app: .refused, whileLocked: true, givesCredentials: false)
        case .lock, .unlock:
            Rule(root: .refused, ownTool: .anyGroup, app: .registeredForSomeGroup, whileLocked: true, givesCredentials: false)
        case .forward:
            // Only the user, at this machine, opens the broker to another one (`msso ssh`).
            Rule(root: .refused, ownTool: .anyGroup, app: .refused, whileLocked: true, givesCredentials: false)
        }
    }

    // MARK: Applying it

    /// Throws `Forbidden` when the caller's role may not call `kind` at all, or (for
    /// ``Access/registeredForSomeGroup``) the caller is registered for no configured group, or
    /// (for ``Access/hostTable``) the forwarded host's table, `forward`, does not name `kind`.
    public func authorize(_ kind: CallArguments.Kind, role: Role, registered: @autoclosure () -> Bool,
                          who: @autoclosure () -> String, forward: ForwardRule? = nil) throws(BrokerError) {
        switch Self.rule(for: kind).access(for: role) {
        case .refused where role == .root:
            throw BrokerError(.forbidden, "root may only call status, check, login and logout on another user's broker")
        case .refused where role == .forwarded:
            throw BrokerError(.forbidden, "\(who()) may not call \(kind.rawValue) through an SSH forward: that is for the msso command on this machine")
        case .hostTable:
            guard let forward else {
                throw BrokerError(.forbidden, "\(who()) has no [forward] table in the configuration any more, so it may no longer use msso; add one and reload mssod")
            }
            guard forward.verbs.contains(kind) else {
                let allowed = forward.verbs.map(\.rawValue).sorted().joined(separator: ", ")
                throw BrokerError(.forbidden, "\(who()) may not call \(kind.rawValue): its [forward.\"\(forward.host)\"] table (\(forward.source)) allows \(allowed.isEmpty ? "nothing" : allowed); add \"\(kind.rawValue)\" to its `verbs` there")
            }
        case .refused:
            throw BrokerError(.forbidden, "only the msso command may call \(kind.rawValue)")
        case .registeredForSomeGroup where !registered():
            throw BrokerError(.forbidden, "\(who()) is not registered for any access group, so it may not \(kind.rawValue) msso; use `msso \(kind.rawValue)`")
        default:
            return
        }
    }

    /// Root logs a user in only with the password the user typed at session start (PAM), and
    /// only to a group the administrator defined: a group from the user's own file names an
    /// issuer anyone who can write that file chose, and must never receive the password.
    /// A forwarded host logs in with the device flow only: a password would be typed on the remote
    /// host and cross it, and a browser login's redirect comes back to this machine's loopback,
    /// which a browser there cannot reach.
    ///
    /// Only the user's own tools ask for a new account (`newAccount`): an app (a sandboxed one
    /// above all), a remote host or root never change which account a group acts as.
    func authorize(_ flow: LoginFlow, role: Role, group: GroupConfig, newAccount: Bool = false) throws(BrokerError) {
        if newAccount, role != .ownTool {
            throw BrokerError(.forbidden, "only the msso command may log \"\(group.name)\" in as a new account (`msso login --group \(group.name) --new-account`); a login from here must come back as the group's account")
        }
        if role == .forwarded, flow != .device {
            throw BrokerError(.forbidden, "through an SSH forward only a device login works (msso login --device): a password is never sent from a remote host, and a browser login's redirect comes back to the machine mssod runs on")
        }
        guard Self.rule(for: .login).access(for: role) == .passwordLoginToAdminGroups else { return }
        guard flow == .password else {
            throw BrokerError(.forbidden, "root may log a user in only with the password flow")
        }
        guard group.admin else {
            throw BrokerError(.forbidden, "the login password is given only to groups the administrator defined; \"\(group.name)\" comes from the user's own configuration")
        }
    }

    /// Whether the role's use of `kind` is limited to the groups its registrations give: a group
    /// it names must be one of them, and naming none means those (status, subscribe, logout --all).
    func needsEntitlement(_ kind: CallArguments.Kind, role: Role) -> Bool {
        [.registeredGroups, .hostTable].contains(Self.rule(for: kind).access(for: role))
    }
}
