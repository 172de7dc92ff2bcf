extension Methods {
    /// The public half of a group's signing key (made on first use); `rotate` replaces the key.
    public enum Keys: BrokerMethod {
        public struct Arguments: Codable, Sendable, Equatable {
            public var group: String?
            public var rotate: Bool?
            public init(group: String? = nil, rotate: Bool = false) {
                self.group = group
                self.rotate = rotate ? true : nil
            }
        }
        public typealias Result = KeyDescription
    }
}

/// The public half of a group's signing key. The private half never leaves the broker.
public struct KeyDescription: Codable, Sendable, Equatable {
    public var group: String
    /// `p-256` or `ed25519`.
    public var kind: String
    /// The JWK thumbprint (RFC 7638): the `keyid` of message signatures, DPoP's `jkt`.
    public var keyID: String
    /// The public JWK.
    public var jwk: [String: String]
    /// The public key as PEM (SubjectPublicKeyInfo).
    public var pem: String

    public init(group: String, kind: String, keyID: String, jwk: [String: String], pem: String) {
        self.group = group
        self.kind = kind
        self.keyID = keyID
        self.jwk = jwk
        self.pem = pem
    }
}
