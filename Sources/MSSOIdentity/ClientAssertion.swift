import Crypto
import CryptoExtras
import FoundationEssentials
import MSSOCore
import MSSOProtocol
import MSSOSigning

/// The `private_key_jwt` client authentication (OpenID Connect Core §9, RFC 7523 §2.2): a short
/// JWT the client signs with its private key, which the identity provider checks against the
/// public key registered for the client. No shared secret crosses the wire.
///
/// The key is the administrator's PEM file (`client_key`): EC P-256 (ES256) or RSA (RS256, the one
/// every provider takes), read for each request like a client secret file, and never kept; or,
/// without one, the group's own key, which the broker made and keeps in the keyring (`msso keys`
/// shows its public half, to register at the provider).
enum ClientAssertion {
    /// How long an assertion is good for: long enough for one request, too short to replay later.
    static let lifetime: Double = 60

    /// A signed assertion for a request to `audience`, the endpoint it is sent to.
    static func make(group: GroupConfig, key: ClientKey, audience: URL, now: Double = Date().timeIntervalSince1970) throws(BrokerError) -> String {
        struct Header: Encodable { var alg: String, typ = "JWT", kid: String }
        struct Claims: Encodable { var iss: String, sub: String, aud: String, jti: String, iat: Int, exp: Int }
        let issuedAt = Int(now)
        let claims = Claims(iss: group.clientID, sub: group.clientID, aud: audience.absoluteString,
                            jti: OpenIDProvider.random(16), iat: issuedAt, exp: issuedAt + Int(lifetime))
        guard let header = try? JSONEncoder().encode(Header(alg: key.algorithm, kid: key.keyID)),
              let payload = try? JSONEncoder().encode(claims) else {
            throw BrokerError(.internal, "could not make the client assertion")
        }
        let input = Base64URL.encode(header) + "." + Base64URL.encode(payload)
        return input + "." + Base64URL.encode(try key.sign(Data(input.utf8)))
    }
}

/// A client's private key as the administrator gave it.
struct ClientKey {
    private enum Key {
        case p256(P256.Signing.PrivateKey)
        case rsa(_RSA.Signing.PrivateKey)
        /// The group's own key (P-256 or Ed25519).
        case broker(SigningKey)
    }

    private let key: Key
    let algorithm: String
    /// The RFC 7638 thumbprint of the public half: the `kid` an IdP finds the key by in a JWKS
    /// registered for the client.
    let keyID: String

    /// The group's own key, as `msso keys` shows it.
    init(broker key: SigningKey) {
        self.key = .broker(key)
        algorithm = key.kind == .ed25519 ? "EdDSA" : "ES256"
        keyID = key.thumbprint
    }

    /// The administrator's key file (`client_key`).
    init(file group: GroupConfig) throws(BrokerError) {
        guard let path = group.clientKeyFile, let data = FileManager.default.contents(atPath: path), data.count <= 16384 else {
            throw BrokerError(.configInvalid, "cannot read the client key file \(group.clientKeyFile ?? "(none)") of \"\(group.name)\"; `client_key` names the PEM private key registered for the client (private_key_jwt)")
        }
        let pem = String(decoding: data, as: UTF8.self)
        if let key = try? P256.Signing.PrivateKey(pemRepresentation: pem) {
            self.key = .p256(key)
            algorithm = "ES256"
            let point = key.publicKey.rawRepresentation
            keyID = Self.thumbprint("{\"crv\":\"P-256\",\"kty\":\"EC\",\"x\":\"\(Base64URL.encode(point.prefix(32)))\",\"y\":\"\(Base64URL.encode(point.suffix(32)))\"}")
        } else if let key = try? _RSA.Signing.PrivateKey(pemRepresentation: pem), key.keySizeInBits >= 2048,
                  let primitives = try? key.publicKey.getKeyPrimitives() {
            self.key = .rsa(key)
            algorithm = "RS256"
            keyID = Self.thumbprint("{\"e\":\"\(Base64URL.encode(primitives.publicExponent))\",\"kty\":\"RSA\",\"n\":\"\(Base64URL.encode(primitives.modulus))\"}")
        } else {
            throw BrokerError(.configInvalid, "the client key file \(path) of \"\(group.name)\" is not a PEM EC P-256 or RSA (2048 bits or more) private key")
        }
    }

    func sign(_ data: Data) throws(BrokerError) -> Data {
        do {
            switch key {
            case .p256(let key): return try key.signature(for: data).rawRepresentation // JOSE: r || s
            case .rsa(let key): return try key.signature(for: data, padding: .insecurePKCS1v1_5).rawRepresentation // RS256 is PKCS #1 v1.5
            case .broker(let key): return try key.signature(for: data)
            }
        } catch {
            throw BrokerError(.internal, "could not sign the client assertion")
        }
    }

    private static func thumbprint(_ canonicalJWK: String) -> String {
        Base64URL.encode(Data(SHA256.hash(data: Data(canonicalJWK.utf8))))
    }
}
