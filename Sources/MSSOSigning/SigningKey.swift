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
    /// A DPoP proof's protected header, base64url: it names only the key, so it is the same in
    /// every proof.
    let dpopHeader: String

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
        let algorithm = if case .ed25519 = backing { "EdDSA" } else { "ES256" } // the JWS algorithm
        dpopHeader = Base64URL.encode(Data("{\"typ\":\"dpop+jwt\",\"alg\":\"\(algorithm)\",\"jwk\":\(publicJWKJSON)}".utf8))
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
    /// Encoded by hand in one pass: this runs several times per DPoP proof, and Foundation's way
    /// (copy the bytes, encode, strip the padding, translate two characters) took four.
    public static func encode(_ data: some DataProtocol) -> String {
        Base64.encode(data, alphabet: Base64.urlAlphabet, padded: false)
    }

    /// The bytes of base64url text (padding optional), or nil when it is not base64url.
    public static func decode(_ text: some StringProtocol) -> Data? {
        var standard = String(text).map { $0 == "-" ? "+" : $0 == "_" ? "/" : $0 }.reduce(into: "") { $0.append($1) }
        standard += String(repeating: "=", count: (4 - standard.count % 4) % 4)
        return Data(base64Encoded: standard)
    }
}

/// RFC 4648 base64 in both alphabets, for the signing path (see ``Base64URL/encode(_:)``).
enum Base64 {
    static let standardAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
    static let urlAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// `data` encoded with `alphabet`, with `=` padding (§4) or without (§5 as JOSE uses it).
    static func encode(_ data: some DataProtocol, alphabet: [UInt8], padded: Bool) -> String {
        let input = Array(data)
        let whole = input.count / 3 * 3, rest = input.count - whole
        let length = input.count / 3 * 4 + (rest == 0 ? 0 : padded ? 4 : rest + 1)
        return String(unsafeUninitializedCapacity: length) { out in
            var o = 0
            func put(_ bits: UInt32) {
                out[o] = alphabet[Int(bits & 63)]
                o += 1
            }
            var i = 0
            while i < whole {
                let n = UInt32(input[i]) << 16 | UInt32(input[i + 1]) << 8 | UInt32(input[i + 2])
                put(n >> 18); put(n >> 12); put(n >> 6); put(n)
                i += 3
            }
            if rest > 0 {
                let n = UInt32(input[i]) << 16 | (rest == 2 ? UInt32(input[i + 1]) << 8 : 0)
                put(n >> 18); put(n >> 12)
                if rest == 2 { put(n >> 6) }
                while padded && o < length { out[o] = UInt8(ascii: "="); o += 1 }
            }
            return o
        }
    }
}
