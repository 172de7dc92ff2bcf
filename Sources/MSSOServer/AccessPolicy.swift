import MSSOProtocol

/// Who may call what. The broker serves the user it runs as; root (the PAM module at session
/// start) may only ask read-only questions.
public struct AccessPolicy: Sendable {
    public let owner: UInt32

    public init(owner: UInt32) { self.owner = owner }

    /// Methods root may call: nothing that reveals or changes a credential.
    static let readOnly: Set<String> = [Methods.Hello.name, Methods.Ping.name, Methods.Status.name, Methods.Check.name]

    /// Whether a peer may connect at all.
    public func admits(_ peer: Peer) -> Bool { peer.uid == owner || peer.uid == 0 }

    public func refusal(for peer: Peer) -> BrokerError {
        BrokerError(.forbidden, "this broker serves uid \(owner) only; uid \(peer.uid) must use its own (is mssod running for that user?)")
    }

    /// Throws `Forbidden` when an admitted peer may not call `method`.
    public func authorize(_ method: String, for peer: Peer) throws(BrokerError) {
        guard peer.uid != owner else { return }
        guard Self.readOnly.contains(method) else {
            throw BrokerError(.forbidden, "root may only call status and check on another user's broker")
        }
    }
}
