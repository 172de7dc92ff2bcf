import MSSOCore
import MSSOProtocol

/// Who may call what, from what the kernel says about the caller.
///
/// - The broker serves the user it runs as. Another uid is refused at connect.
/// - **Root** (the PAM module at session start) may ask `status` and `check`, log the user in with
///   the password they just typed, and log them out: never anything that returns a token.
/// - **The user's own tools** (`msso` and `msso-logout` installed beside `mssod`) manage every
///   group: log in, extend, log out, status, subscribe, `apps`, `audit`. Signing is not
///   management: `msso sign` prints a token, so it needs a registration like any app.
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

    public func role(of peer: Peer) -> Role {
        if peer.uid == 0 && owner != 0 { return .root }
        if let executable = peer.executable, ownTools.contains(executable) { return .ownTool }
        return .app
    }

    /// Whether a peer may connect at all.
    public func admits(_ peer: Peer) -> Bool { peer.uid == owner || peer.uid == 0 }

    public func refusal(for peer: Peer) -> BrokerError {
        BrokerError(.forbidden, "this broker serves uid \(owner) only; uid \(peer.uid) must use its own (is mssod running for that user?)")
    }

    static let forRoot: Set<String> = [Methods.Hello.name, Methods.Ping.name, Methods.Status.name, Methods.Check.name,
                                       Methods.Login.name, Methods.Logout.name]
    /// Rotating keys is management; reading a public key is not, but apps have no use for it.
    static let forOwnToolsOnly: Set<String> = [Methods.Apps.name, Methods.Audit.name, Methods.Keys.name]

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

    /// Root logs a user in only with the password the user typed at session start (PAM).
    func authorize(_ flow: LoginFlow, role: Role) throws(BrokerError) {
        guard role == .root, flow != .password else { return }
        throw BrokerError(.forbidden, "root may log a user in only with the password flow")
    }

    /// Whether the role's use of a group verb must be backed by a registration.
    func needsEntitlement(_ method: String, role: Role) -> Bool {
        switch role {
        case .app: return true
        case .ownTool: return method == Methods.Sign.name
        case .root: return false
        }
    }
}
