import MSSOProtocol

/// Who may call what. The broker serves the user it runs as; root (the PAM module at session
/// start) may ask read-only questions, log the user in with the password they just typed, and log
/// them out when their session closes: nothing that returns a token.
public struct AccessPolicy: Sendable {
    public let owner: UInt32

    public init(owner: UInt32) { self.owner = owner }

    /// Methods root may call: none returns a token.
    static let forRoot: Set<String> = [Methods.Hello.name, Methods.Ping.name, Methods.Status.name, Methods.Check.name,
                                       Methods.Login.name, Methods.Logout.name]

    /// Whether a peer may connect at all.
    public func admits(_ peer: Peer) -> Bool { peer.uid == owner || peer.uid == 0 }

    public func refusal(for peer: Peer) -> BrokerError {
        BrokerError(.forbidden, "this broker serves uid \(owner) only; uid \(peer.uid) must use its own (is mssod running for that user?)")
    }

    /// Throws `Forbidden` when an admitted peer may not call `method`.
    public func authorize(_ method: String, for peer: Peer) throws(BrokerError) {
        guard peer.uid != owner else { return }
        guard Self.forRoot.contains(method) else {
            throw BrokerError(.forbidden, "root may only call status, check, login and logout on another user's broker")
        }
    }
}

extension AccessPolicy {
    /// Root logs a user in only with the password the user typed at session start (PAM).
    func authorize(_ flow: LoginFlow, for peer: Peer) throws(BrokerError) {
        guard peer.uid != owner, flow != .password else { return }
        throw BrokerError(.forbidden, "root may log a user in only with the password flow")
    }
}
