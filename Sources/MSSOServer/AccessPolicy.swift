import MSSOCore
import MSSOProtocol

/// Who may call what, from what the kernel says about the process that sent each call.
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

    public enum Role: Sendable { case root, ownTool, app }

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

    static let forRoot: Set<String> = [Methods.Hello.name, Methods.Ping.name, Methods.Status.name, Methods.Check.name,
                                       Methods.Login.name, Methods.Logout.name]
    /// Rotating keys is management; reading a public key is not, but apps have no use for it.
    static let forOwnToolsOnly: Set<String> = [Methods.Apps.name, Methods.Audit.name, Methods.Keys.name, Methods.Diagnose.name]

    /// Throws `Forbidden` when the caller's role may not call `method` at all.
    public func authorize(_ method: String, role: Role) throws(BrokerError) {
        switch role {
        case .root where !Self.forRoot.contains(method):
            throw BrokerError(.forbidden, "root may only call status, check, login and logout on another user's broker")
        case .app where Self.forOwnToolsOnly.contains(method):
            throw BrokerError(.forbidden, "only the msso command may call \(method)")
        default:
            return
        }
    }

    /// Root logs a user in only with the password the user typed at session start (PAM), and
    /// only to a group the administrator defined: a group from the user's own file names an
    /// issuer anyone who can write that file chose, and must never receive the password.
    func authorize(_ flow: LoginFlow, role: Role, group: GroupConfig) throws(BrokerError) {
        guard role == .root else { return }
        guard flow == .password else {
            throw BrokerError(.forbidden, "root may log a user in only with the password flow")
        }
        guard group.admin else {
            throw BrokerError(.forbidden, "the login password is given only to groups the administrator defined; \"\(group.name)\" comes from the user's own configuration")
        }
    }

    /// Whether the role's use of a group verb must be backed by a registration.
    func needsEntitlement(_ method: String, role: Role) -> Bool {
        switch role {
        case .app: return true
        case .ownTool: return method == Methods.Sign.name || method == Methods.Token.name
        case .root: return false
        }
    }
}
