import Crypto
import CryptoExtras
import FoundationEssentials
import MSSOCore
import MSSOProtocol
import MSSOSigning

/// A JWS signature algorithm (RFC 7518 §3, RFC 8037 §3.1) msso verifies an ID token with.
///
/// `none` is not among them, nor is any algorithm a token may name that is not listed here: a
/// header's `alg` that does not parse into one of these is refused.
public enum JWSAlgorithm: String, Sendable, CaseIterable {
    case rs256 = "RS256", rs384 = "RS384", rs512 = "RS512"
    case ps256 = "PS256", ps384 = "PS384", ps512 = "PS512"
    case es256 = "ES256", es384 = "ES384", es512 = "ES512"
    case edDSA = "EdDSA"
    /// HMAC keyed with the client secret (OpenID Connect Core §10.1): never with a key of the JWKS.
    case hs256 = "HS256", hs384 = "HS384", hs512 = "HS512"

    /// Whether the algorithm is an HMAC, keyed with the client secret rather than a published key.
    public var isSymmetric: Bool { self == .hs256 || self == .hs384 || self == .hs512 }
}

/// One verifying key of a provider's JWKS (RFC 7517 §4), as msso can use it.
public struct JSONWebKey: Sendable {
    /// The public key, by type and curve: the type decides which algorithms it can verify.
    public enum Material: Sendable {
        case rsa(_RSA.Signing.PublicKey)
        case p256(P256.Signing.PublicKey)
        case p384(P384.Signing.PublicKey)
        case p521(P521.Signing.PublicKey)
        case ed25519(Curve25519.Signing.PublicKey)
    }

    /// The key's `kid`, if it has one.
    public let id: String?
    /// The key's `alg`, if it names one: then the key verifies that algorithm only (RFC 7517 §4.4).
    public let algorithm: JWSAlgorithm?
    public let material: Material

    /// Whether this key can verify a signature made with `algorithm`: the key's type must fit it
    /// (an RSA key never verifies an HMAC or an ECDSA token, a P-384 key never an ES256 one), and
    /// a key that names its algorithm verifies that one only.
    public func fits(_ algorithm: JWSAlgorithm) -> Bool {
        if let own = self.algorithm, own != algorithm { return false }
        switch (material, algorithm) {
        case (.rsa, .rs256), (.rsa, .rs384), (.rsa, .rs512), (.rsa, .ps256), (.rsa, .ps384), (.rsa, .ps512): return true
        case (.p256, .es256), (.p384, .es384), (.p521, .es512), (.ed25519, .edDSA): return true
        default: return false
        }
    }

    /// Whether `signature` is this key's signature with `algorithm` over `input` (the JWS signing
    /// input, `header.payload` as sent). False when the key does not fit the algorithm.
    func isValidSignature(_ signature: Data, algorithm: JWSAlgorithm, for input: Data) -> Bool {
        guard fits(algorithm) else { return false }
        switch material {
        case .rsa(let key):
            let rsa = _RSA.Signing.RSASignature(rawRepresentation: signature)
            // PSS as RFC 7518 §3.5 defines it: MGF1 with the same hash, salt as long as the hash,
            // which is what CryptoExtras' `.PSS` verifies.
            switch algorithm {
            case .rs256: return key.isValidSignature(rsa, for: SHA256.hash(data: input), padding: .insecurePKCS1v1_5)
            case .rs384: return key.isValidSignature(rsa, for: SHA384.hash(data: input), padding: .insecurePKCS1v1_5)
            case .rs512: return key.isValidSignature(rsa, for: SHA512.hash(data: input), padding: .insecurePKCS1v1_5)
            case .ps256: return key.isValidSignature(rsa, for: SHA256.hash(data: input), padding: .PSS)
            case .ps384: return key.isValidSignature(rsa, for: SHA384.hash(data: input), padding: .PSS)
            case .ps512: return key.isValidSignature(rsa, for: SHA512.hash(data: input), padding: .PSS)
            default: return false
            }
        // JWS carries ECDSA signatures as raw r || s, each as long as the curve's order (RFC 7518
        // §3.4), not DER: the raw form has one length per curve, checked before parsing.
        case .p256(let key):
            guard signature.count == 64, let ecdsa = try? P256.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
            return key.isValidSignature(ecdsa, for: SHA256.hash(data: input))
        case .p384(let key):
            guard signature.count == 96, let ecdsa = try? P384.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
            return key.isValidSignature(ecdsa, for: SHA384.hash(data: input))
        case .p521(let key):
            guard signature.count == 132, let ecdsa = try? P521.Signing.ECDSASignature(rawRepresentation: signature) else { return false }
            return key.isValidSignature(ecdsa, for: SHA512.hash(data: input))
        case .ed25519(let key):
            return signature.count == 64 && key.isValidSignature(signature, for: input)
        }
    }
}

/// A provider's JSON Web Key Set (RFC 7517 §5): the keys it signs ID tokens with.
///
/// Keys msso cannot use are skipped, not refused: encryption keys (`use` other than `sig`, or
/// `key_ops` without `verify`), symmetric keys (`oct`: an ID token's HMAC key is the client
/// secret, never a published one), unknown types and curves, and keys whose numbers are out of
/// bounds or not a valid key. The document itself is bounded, so that an identity provider (or
/// whoever answers in its name) cannot make the broker hold or compute without limit: at most
/// ``maximumDocumentSize`` bytes and ``maximumKeys`` keys, RSA moduli of 2048 to 8192 bits with
/// an exponent of at most 32 bits (the cost of a verification grows with both).
public struct JSONWebKeySet: Sendable {
    /// The keys msso can verify with, in the document's order.
    public let keys: [JSONWebKey]

    /// The largest JWKS document read, in bytes.
    public static let maximumDocumentSize = 64 * 1024
    /// The most keys a JWKS document may list (usable or not).
    public static let maximumKeys = 100
    /// RSA modulus sizes accepted, in bits: below is breakable, above only costs time.
    public static let rsaBits = 2048...8192

    /// The keys `keys`, already checked (for tests and for a caller that builds a set itself).
    public init(keys: [JSONWebKey]) {
        self.keys = keys
    }

    /// Reads a JWKS document; the error names what is wrong with the document as a whole. A key
    /// msso cannot use is left out, not an error.
    public init(json body: Data) throws(JSONWebKeySetError) {
        guard body.count <= Self.maximumDocumentSize else { throw .tooLarge(bytes: body.count) }
        let document: Document
        do {
            document = try JSONDecoder().decode(Document.self, from: body)
        } catch {
            throw .notAKeySet
        }
        guard document.keys.count <= Self.maximumKeys else { throw .tooManyKeys(document.keys.count) }
        keys = document.keys.compactMap(\.key)
    }

    /// The key to verify a token of `algorithm` with, found by the token's `kid`.
    ///
    /// With a `kid`, the key of that id that fits the algorithm; a `kid` the set does not hold is
    /// ``IDTokenError/unknownKey(_:)`` (the provider may have rotated its keys: the caller fetches
    /// the JWKS again once). Without a `kid`, the only key of the set that fits the algorithm;
    /// none is `unknownKey(nil)`, several are ``IDTokenError/ambiguousKey``.
    public func key(id: String?, for algorithm: JWSAlgorithm) throws(IDTokenError) -> JSONWebKey {
        guard let id else {
            let fitting = keys.filter { $0.fits(algorithm) }
            guard fitting.count <= 1 else { throw .ambiguousKey(algorithm) }
            guard let only = fitting.first else { throw .unknownKey(nil) }
            return only
        }
        let named = keys.filter { $0.id.map { $0.utf8.elementsEqual(id.utf8) } ?? false }
        // The error keeps a bounded part of the kid: enough to name it, never the whole of a token's text.
        guard !named.isEmpty else { throw .unknownKey(String(id.prefix(256))) }
        guard let key = named.first(where: { $0.fits(algorithm) }) else { throw .keyMismatch(algorithm, kid: String(id.prefix(256))) }
        return key
    }

    // MARK: Reading

    private struct Document: Decodable {
        var keys: [Entry]
    }

    /// One member of `keys`, read leniently: a member of the wrong type, or a key that is not an
    /// object at all, makes the key unusable (`key` nil), never the document unreadable.
    private struct Entry: Decodable {
        var key: JSONWebKey?

        private enum Member: String, CodingKey {
            case kty, use, key_ops, alg, kid, crv, n, e, x, y
        }

        init(from decoder: Decoder) {
            guard let object = try? decoder.container(keyedBy: Member.self) else { return }
            func text(_ member: Member) -> String? { (try? object.decodeIfPresent(String.self, forKey: member)) ?? nil }
            func bytes(_ member: Member) -> Data? { text(member).flatMap(JOSEBase64.decode) }
            // A key for encryption, or for some operation other than verifying, is not for us.
            if object.contains(.use), text(.use) != "sig" { return }
            if object.contains(.key_ops) {
                guard let operations = (try? object.decode([String].self, forKey: .key_ops)), operations.contains("verify") else { return }
            }
            var algorithm: JWSAlgorithm?
            if object.contains(.alg) {
                // A key for an algorithm msso does not verify with (or for "none") is not for us.
                guard let named = text(.alg).flatMap(JWSAlgorithm.init(rawValue:)), !named.isSymmetric else { return }
                algorithm = named
            }
            if object.contains(.kid), text(.kid) == nil { return } // a kid that is not a string
            let id = text(.kid)
            let material: JSONWebKey.Material
            switch (text(.kty), text(.crv)) {
            case ("RSA", _):
                guard let n = bytes(.n), let e = bytes(.e), let key = Self.rsa(n: n, e: e) else { return }
                material = .rsa(key)
            case ("EC", "P-256"):
                guard let point = Self.point(bytes(.x), bytes(.y), size: 32),
                      let key = try? P256.Signing.PublicKey(rawRepresentation: point) else { return }
                material = .p256(key)
            case ("EC", "P-384"):
                guard let point = Self.point(bytes(.x), bytes(.y), size: 48),
                      let key = try? P384.Signing.PublicKey(rawRepresentation: point) else { return }
                material = .p384(key)
            case ("EC", "P-521"):
                guard let point = Self.point(bytes(.x), bytes(.y), size: 66),
                      let key = try? P521.Signing.PublicKey(rawRepresentation: point) else { return }
                material = .p521(key)
            case ("OKP", "Ed25519"):
                guard let x = bytes(.x), x.count == 32, let key = try? Curve25519.Signing.PublicKey(rawRepresentation: x) else { return }
                material = .ed25519(key)
            default:
                return // "oct" (symmetric), Ed448, secp256k1, a type msso does not know
            }
            let key = JSONWebKey(id: id, algorithm: algorithm, material: material)
            // A key that names an algorithm its type cannot verify (RS256 on an EC key) is broken.
            if let algorithm, !key.fits(algorithm) { return }
            self.key = key
        }

        /// `x || y`, each `size` bytes; whether the point is on the curve is for the key's
        /// initializer to check. RFC 7518 §6.2.1.2 asks for each coordinate at its full length,
        /// but glewlwyd (through rhonabwy) drops a coordinate's leading zero bytes, for about one
        /// key in 128: the same integer, so leading zeros are taken off and put back to `size`.
        static func point(_ x: Data?, _ y: Data?, size: Int) -> Data? {
            guard let x = x.flatMap({ coordinate($0, size: size) }), let y = y.flatMap({ coordinate($0, size: size) }) else { return nil }
            return x + y
        }

        /// The big-endian integer `bytes` in exactly `size` bytes; nil when it does not fit.
        static func coordinate(_ bytes: Data, size: Int) -> Data? {
            let significant = bytes.drop { $0 == 0 }
            guard significant.count <= size else { return nil }
            return Data(repeating: 0, count: size - significant.count) + significant
        }

        /// An RSA key of ``JSONWebKeySet/rsaBits`` bits with an odd exponent of at most 32 bits.
        static func rsa(n: Data, e: Data) -> _RSA.Signing.PublicKey? {
            let modulus = n.drop { $0 == 0 }, exponent = e.drop { $0 == 0 }
            guard let top = modulus.first, let last = exponent.last, exponent.count <= 4, last & 1 == 1,
                  exponent.count > 1 || last > 1 else { return nil }
            let bits = modulus.count * 8 - top.leadingZeroBitCount
            guard JSONWebKeySet.rsaBits.contains(bits) else { return nil }
            return try? _RSA.Signing.PublicKey(n: Data(modulus), e: Data(exponent))
        }
    }
}

/// What makes a whole JWKS document unusable.
public enum JSONWebKeySetError: Error, Equatable, Sendable {
    /// Larger than ``JSONWebKeySet/maximumDocumentSize``.
    case tooLarge(bytes: Int)
    /// Not JSON, or no `keys` array.
    case notAKeySet
    /// More than ``JSONWebKeySet/maximumKeys`` keys.
    case tooManyKeys(Int)

    /// The error for the user: the provider's key set cannot be used, so no ID token of it can be
    /// trusted. `IdPUnavailable`, as for any other answer of the provider msso cannot read: the
    /// configuration is not at fault, and the provider may answer properly later.
    public func brokerError(group: GroupConfig) -> BrokerError {
        let idp = "the identity provider of \"\(group.name)\""
        switch self {
        case .tooLarge(let bytes):
            return BrokerError(.idpUnavailable, "\(idp) publishes a key set (jwks_uri) of \(bytes) bytes, more than the \(JSONWebKeySet.maximumDocumentSize) msso reads: its ID tokens cannot be verified; ask its administrator to remove old keys")
        case .notAKeySet:
            return BrokerError(.idpUnavailable, "\(idp) publishes a key set (jwks_uri) that is not a JSON Web Key Set (no \"keys\" array): its ID tokens cannot be verified; check the provider's jwks_uri")
        case .tooManyKeys(let count):
            return BrokerError(.idpUnavailable, "\(idp) publishes \(count) keys (jwks_uri), more than the \(JSONWebKeySet.maximumKeys) msso reads: its ID tokens cannot be verified; ask its administrator to remove old keys")
        }
    }
}

/// Base64url as JOSE writes it (RFC 7515 §2): the URL-safe alphabet, no padding, nothing else.
/// ``Base64URL/decode(_:)`` also takes padding and the standard alphabet; a token or key in
/// either is not JOSE's, and is refused rather than guessed at.
enum JOSEBase64 {
    static func decode(_ text: some StringProtocol) -> Data? {
        guard text.utf8.allSatisfy({ byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"): return true
            default: return false
            }
        }), text.utf8.count % 4 != 1 else { return nil }
        return Base64URL.decode(text)
    }
}
