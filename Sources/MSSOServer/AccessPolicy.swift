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
public struct AccessPolicy: Sendable {
    public let owner: UInt32
    /// Executables of the user's own tools.
    public let ownTools: Set<String>

    public init(owner: UInt32, ownTools: Set<String> = []) {
        self.owner = owner
        self.ownTools = ownTools
    }

    public enum Role: Sendable, CaseIterable { case root, ownTool, app }

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
    }

    /// One row of the table.
    public struct Rule: Sendable, Equatable {
        public var root: Access
        public var ownTool: Access
        public var app: Access
        /// Whether the method works while msso is locked (`msso lock`). The broker enforces a
        /// `false` inside the actor turn that does the work, so a call that was waiting when the
        /// lock took effect is refused too (``Broker``'s `requireUnlocked`).
        public var whileLocked: Bool
        /// Whether a success hands the caller a token or a signature (what `confirm` guards).
        public var givesCredentials: Bool

        public func access(for role: Role) -> Access {
            switch role {
            case .root: root
            case .ownTool: ownTool
            case .app: app
            }
        }
    }

    /// The table: every method, every role.
    public static func rule(for kind: CallArguments.Kind) -> Rule {
        switch kind {
        case .hello, .ping:
            Rule(root: .anyGroup, ownTool: .anyGroup, app: .anyGroup, whileLocked: true, givesCredentials: false)
        case .status, .check, .logout:
            Rule(root: .anyGroup, ownTool: .anyGroup, app: .registeredGroups, whileLocked: true, givesCredentials: false)
        case .login:
            Rule(root: .passwordLoginToAdminGroups, ownTool: .anyGroup, app: .registeredGroups, whileLocked: false, givesCredentials: false)
        case .extend:
            Rule(root: .refused, ownTool: .anyGroup, app: .registeredGroups, whileLocked: false, givesCredentials: false)
        case .subscribe:
            Rule(root: .refused, ownTool: .anyGroup, app: .registeredGroups, whileLocked: true, givesCredentials: false)
        case .sign, .token:
            Rule(root: .refused, ownTool: .registeredGroups, app: .registeredGroups, whileLocked: false, givesCredentials: true)
        case .apps, .audit, .keys, .diagnose:
            // Rotating keys is management; reading a public key is not, but apps have no use for it.
            Rule(root: .refused, ownTool: .anyGroup, app: .refused, whileLocked: true, givesCredentials: false)
        case .lock, .unlock:
            Rule(root: .refused, ownTool: .anyGroup, app: .registeredForSomeGroup, whileLocked: true, givesCredentials: false)
        }
    }

    // MARK: Applying it

    /// Throws `Forbidden` when the caller's role may not call `kind` at all, or (for
    /// ``Access/registeredForSomeGroup``) the caller is registered for no configured group.
    public func authorize(_ kind: CallArguments.Kind, role: Role, registered: @autoclosure () -> Bool,
                          who: @autoclosure () -> String) throws(BrokerError) {
        switch Self.rule(for: kind).access(for: role) {
        case .refused where role == .root:
            throw BrokerError(.forbidden, "root may only call status, check, login and logout on another user's broker")
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
    func authorize(_ flow: LoginFlow, role: Role, group: GroupConfig) throws(BrokerError) {
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
        Self.rule(for: kind).access(for: role) == .registeredGroups
    }
}
