import MSSOProtocol

/// Who may do what: one table, ``rule(for:)``, with a row per action a call can ask for (a
/// method, or a method with the argument that makes it another thing: `keys --rotate`, `logout
/// --all`, a login's flow, a new account). An action added does not compile without its row. The
/// gate (`Gate`, in the server) applies it to every call, once; the broker reads its lock column
/// again where a lock can take effect while a call waits (``Broker/requireUnlocked(for:)``).
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
///   unlock, forward), a password or browser login, a new account, or `logout --all`.
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

    // MARK: The rows

    /// What a call asks for: its method, told apart by the arguments that change who may call it.
    public enum Action: String, Sendable, CaseIterable {
        case hello, ping, status, check
        case passwordLogin = "login --password", deviceLogin = "login --device", browserLogin = "login --browser"
        /// A login that may put the group into another account (`--new-account`), whatever its flow.
        case newAccountLogin = "login --new-account"
        case extend, logout
        case logoutAll = "logout --all"
        case subscribe, sign, token, apps, audit, keys
        case rotateKeys = "keys --rotate"
        case diagnose, lock, unlock, forward

        public init(_ arguments: CallArguments) {
            switch arguments {
            case .login(let args): self = Self.login(args)
            case .logout(let args): self = args.all == true ? .logoutAll : .logout
            case .keys(let args): self = args.rotate == true ? .rotateKeys : .keys
            // Spelled out (no lookup by name: this runs for every call, `sign` first).
            case .sign: self = .sign
            case .token: self = .token
            case .hello: self = .hello
            case .ping: self = .ping
            case .status: self = .status
            case .check: self = .check
            case .extend: self = .extend
            case .subscribe: self = .subscribe
            case .apps: self = .apps
            case .audit: self = .audit
            case .diagnose: self = .diagnose
            case .lock: self = .lock
            case .unlock: self = .unlock
            case .forward: self = .forward
            }
        }

        public static func login(_ args: LoginArguments) -> Action {
            if args.newAccount == true { return .newAccountLogin }
            switch args.flow {
            case .password: return .passwordLogin
            case .device: return .deviceLogin
            case .browser: return .browserLogin
            }
        }

        /// The method that asks for it (what a host's `verbs` name).
        public var method: CallArguments.Kind {
            switch self {
            case .passwordLogin, .deviceLogin, .browserLogin, .newAccountLogin: .login
            case .logoutAll: .logout
            case .rotateKeys, .keys: .keys
            case .hello: .hello
            case .ping: .ping
            case .status: .status
            case .check: .check
            case .extend: .extend
            case .logout: .logout
            case .subscribe: .subscribe
            case .sign: .sign
            case .token: .token
            case .apps: .apps
            case .audit: .audit
            case .diagnose: .diagnose
            case .lock: .lock
            case .unlock: .unlock
            case .forward: .forward
            }
        }
    }

    /// What one role may do with one action.
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
        /// Root's login: to a group the administrator defined (a group from the user's own file
        /// names an issuer anyone who can write that file chose, and must never get the password).
        case adminGroups
        /// A forwarded host: when its `[forward."HOST"]` table names the method, on the groups the
        /// table names (``ForwardRule``).
        case hostTable
    }

    /// Who is asked first, on the desktop, before a call runs.
    public enum Confirm: Sendable, Equatable {
        /// Nobody (asking about sessions, management).
        case never
        /// A host whose `[forward."HOST"]` table has `confirm` (the default).
        case hosts
        /// That, and a registration with `confirm = true` giving the caller the group.
        case hostsAndRegistrations
    }

    /// One row of the table.
    public struct Rule: Sendable, Equatable {
        public var root: Access
        public var ownTool: Access
        public var app: Access
        public var forwarded: Access
        /// Whether it works while msso is locked (`msso lock`).
        public var whileLocked: Bool
        /// Whether a success hands the caller a token or a signature (within `resources`).
        public var givesCredentials: Bool
        public var confirm: Confirm

        public func access(for role: Role) -> Access {
            switch role {
            case .root: root
            case .ownTool: ownTool
            case .app: app
            case .forwarded: forwarded
            }
        }

        init(root: Access = .refused, ownTool: Access = .anyGroup, app: Access, forwarded: Access = .refused, whileLocked: Bool,
             givesCredentials: Bool = false, confirm: Confirm = .never) {
            (self.root, self.ownTool, self.app, self.forwarded) = (root, ownTool, app, forwarded)
            (self.whileLocked, self.givesCredentials, self.confirm) = (whileLocked, givesCredentials, confirm)
        }
    }

    /// The table: every action, every role.
    public static func rule(for action: Action) -> Rule {
        switch action {
        case .hello, .ping:
            Rule(root: .anyGroup, app: .anyGroup, forwarded: .anyGroup, whileLocked: true)
        case .status, .check:
            Rule(root: .anyGroup, app: .registeredGroups, forwarded: .hostTable, whileLocked: true)
        case .subscribe:
            Rule(app: .registeredGroups, forwarded: .hostTable, whileLocked: true)
        case .logout:
            Rule(root: .anyGroup, app: .registeredGroups, forwarded: .hostTable, whileLocked: true, confirm: .hosts)
        case .logoutAll:
            // An app's `--all` is its own groups; a host names the group (its table's may be many).
            Rule(root: .anyGroup, app: .registeredGroups, whileLocked: true)
        case .passwordLogin:
            // A password is never sent from a remote host.
            Rule(root: .adminGroups, app: .registeredGroups, whileLocked: false)
        case .deviceLogin:
            Rule(app: .registeredGroups, forwarded: .hostTable, whileLocked: false, confirm: .hosts)
        case .browserLogin:
            // Its redirect comes back to this machine's loopback, which a remote browser cannot reach.
            Rule(app: .registeredGroups, whileLocked: false)
        case .newAccountLogin:
            // An app (a sandboxed one above all), a host or root never changes a group's account.
            Rule(app: .refused, whileLocked: false)
        case .extend:
            Rule(app: .registeredGroups, forwarded: .hostTable, whileLocked: false, confirm: .hosts)
        case .sign, .token:
            Rule(ownTool: .registeredGroups, app: .registeredGroups, forwarded: .hostTable, whileLocked: false, givesCredentials: true,
                 confirm: .hostsAndRegistrations)
        case .apps, .audit, .keys, .diagnose:
            // Reading a public key is not management, but apps have no use for it.
            Rule(app: .refused, whileLocked: true)
        case .rotateKeys:
            // A new key is made in the keyring, and ends a session whose tokens the old one bound.
            Rule(app: .refused, whileLocked: false)
        case .lock, .unlock:
            Rule(app: .registeredForSomeGroup, whileLocked: true)
        case .forward:
            // Only the user, at this machine, opens the broker to another one (`msso ssh`).
            Rule(app: .refused, whileLocked: true)
        }
    }

    // MARK: Refusals, in the user's words

    /// Why `role` may not ask for `action` (its access is ``Access/refused``). `who`: the caller
    /// in words; `group`: the group the call named, if any.
    public static func refusal(_ action: Action, role: Role, who: String, group: String?) -> BrokerError {
        let method = action.method.rawValue
        switch (action, role) {
        case (.newAccountLogin, _):
            let named = group.map { "\"\($0)\"" } ?? "a group"
            return BrokerError(.forbidden, "only the msso command may log \(named) in as a new account (`msso login --group \(group ?? "GROUP") --new-account`); a login from here must come back as the group's account")
        case (.deviceLogin, .root), (.browserLogin, .root):
            return BrokerError(.forbidden, "root may log a user in only with the password flow")
        case (_, .root):
            return BrokerError(.forbidden, "root may only call status, check, login and logout on another user's broker")
        case (.passwordLogin, .forwarded), (.browserLogin, .forwarded):
            return BrokerError(.forbidden, "through an SSH forward only a device login works (msso login --device): a password is never sent from a remote host, and a browser login's redirect comes back to the machine mssod runs on")
        case (.logoutAll, .forwarded):
            return BrokerError(.forbidden, "\(who) may not log out of every group through an SSH forward; name the group (msso logout --group G)")
        case (_, .forwarded):
            return BrokerError(.forbidden, "\(who) may not call \(method) through an SSH forward: that is for the msso command on this machine")
        default:
            return BrokerError(.forbidden, "only the msso command may call \(method)")
        }
    }

    /// Refuses what the lock stops (``Rule/whileLocked``).
    public static let lockedRefusal = BrokerError(.locked, "msso is locked: nothing signs or hands out tokens until you run `msso unlock`")
}
