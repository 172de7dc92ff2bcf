import Crypto
import FoundationEssentials

/// A private key the broker signs with. It never leaves the broker: only `publicJWK` and
/// `publicPEM` describe it to the outside.
///
/// What derives from the public half (JWK, thumbprint) is computed once, here: it goes into every
/// proof and every signature's `keyid`.
public struct SigningKey: Sendable {
    public enum Kind: String, Codable, Sendable, CaseIterable {
        case ed25519
        case p256 = "p-256"
    }

    private enum Backing: Sendable {
        case ed25519(Curve25519.Signing.PrivateKey)
        case p256(P256.Signing.PrivateKey)
    }

    private let backing: Backing
    /// The public half as a JWK (RFC 7517/8037), members in the order RFC 7638 hashes them.
    public let publicJWK: [(String, String)]
    /// `{"crv":…,"kty":…,…}`: the JWK as compact JSON with sorted members (RFC 7638's form).
    public let publicJWKJSON: String
    /// The JWK SHA-256 thumbprint (RFC 7638), base64url: DPoP's `jkt`, and our key id.
    public let thumbprint: String

    private init(_ backing: Backing) {
        self.backing = backing
        switch backing {
        case .ed25519(let key):
            publicJWK = [("crv", "Ed25519"), ("kty", "OKP"), ("x", Base64URL.encode(key.publicKey.rawRepresentation))]
        case .p256(let key):
            let point = key.publicKey.rawRepresentation // x || y
            publicJWK = [("crv", "P-256"), ("kty", "EC"), ("x", Base64URL.encode(point.prefix(32))), ("y", Base64URL.encode(point.suffix(32)))]
        }
        publicJWKJSON = "{" + publicJWK.map { "\"\($0.0)\":\"\($0.1)\"" }.joined(separator: ",") + "}"
        thumbprint = Base64URL.encode(Data(SHA256.hash(data: Data(publicJWKJSON.utf8))))
    }

    /// A new random key.
    public static func generate(_ kind: Kind) -> SigningKey {
        switch kind {
        case .ed25519: return SigningKey(.ed25519(Curve25519.Signing.PrivateKey()))
        case .p256: return SigningKey(.p256(P256.Signing.PrivateKey()))
        }
    }

    public init(kind: Kind, rawPrivate: Data) throws {
        switch kind {
        case .ed25519: self.init(.ed25519(try Curve25519.Signing.PrivateKey(rawRepresentation: rawPrivate)))
        case .p256: self.init(.p256(try P256.Signing.PrivateKey(rawRepresentation: rawPrivate)))
        }
    }

    public var kind: Kind {
        switch backing {
        case .ed25519: return .ed25519
        case .p256: return .p256
        }
    }

    /// The private key's raw bytes, for the keyring only.
    public var rawPrivate: Data {
        switch backing {
        case .ed25519(let key): return key.rawRepresentation
        case .p256(let key): return key.rawRepresentation
        }
    }

    /// A signature over `data`: Ed25519, or ECDSA P-256 with SHA-256 as raw `r || s` (64 bytes),
    /// the form both RFC 9421 and JWS (RFC 7518) use.
    public func signature(for data: Data) throws -> Data {
        switch backing {
        case .ed25519(let key): return try key.signature(for: data)
        case .p256(let key): return try key.signature(for: data).rawRepresentation
        }
    }

    /// Whether `signature` over `data` verifies with the public half.
    public func isValidSignature(_ signature: Data, for data: Data) -> Bool {
        switch backing {
        case .ed25519(let key): return key.publicKey.isValidSignature(signature, for: data)
        case .p256(let key):
            guard let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
            return key.publicKey.isValidSignature(ecdsa, for: data)
        }
    }

    /// The RFC 9421 algorithm name.
    public var httpSignatureAlgorithm: String { kind == .ed25519 ? "ed25519" : "ecdsa-p256-sha256" }

    /// The JWS algorithm name.
    public var jwsAlgorithm: String { kind == .ed25519 ? "EdDSA" : "ES256" }

    /// The public half as PEM (SubjectPublicKeyInfo).
    public var publicPEM: String {
        switch backing {
        case .p256(let key):
            return key.publicKey.pemRepresentation
        case .ed25519(let key):
            // SPKI for Ed25519 (RFC 8410): a fixed 12-byte prefix, then the 32-byte key.
            let der = Data([0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00]) + key.publicKey.rawRepresentation
            return "-----BEGIN PUBLIC KEY-----\n" + der.base64EncodedString() + "\n-----END PUBLIC KEY-----\n"
        }
    }
}

/// Base64url without padding (RFC 4648 §5), as JOSE uses it.
public enum Base64URL {
    public static func encode(_ data: some DataProtocol) -> String {
        // One pass over the standard encoding's bytes (this runs several times per signed request).
        var bytes = Array(Data(data).base64EncodedString().utf8)
        while bytes.last == UInt8(ascii: "=") { bytes.removeLast() }
        for index in bytes.indices {
            if bytes[index] == UInt8(ascii: "+") { bytes[index] = UInt8(ascii: "-") }
            else if bytes[index] == UInt8(ascii: "/") { bytes[index] = UInt8(ascii: "_") }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The bytes of base64url text (padding optional), or nil when it is not base64url.
    public static func decode(_ text: some StringProtocol) -> Data? {
        var standard = String(text).map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 }.reduce(into: "") { $0.append($1) }
        standard += String(repeating: "=", count: (4 - standard.count % 4) % 4)
        return Data(base64Encoded: standard)
    }
}
