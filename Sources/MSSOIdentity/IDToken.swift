import Crypto
import FoundationEssentials
import MSSOCore
import MSSOProtocol

/// ID token validation as OpenID Connect Core §3.1.3.7 asks of a client: the signature with a key
/// the provider publishes (or, for HS256/384/512, with the client secret), then the issuer, the
/// audience, the authorized party, the times and the nonce. Pure: no network, no clock of its
/// own; the caller fetches the JWKS and says what time it is.
///
/// The signature is checked before any claim is read, so that every claim error is about a token
/// the provider did sign. Strings are compared byte for byte (Swift's `==` on `String` would take
/// canonically equivalent Unicode as equal, which "identical" does not allow).
public enum IDToken {
    /// The longest token read, in bytes: a real ID token is a few KiB at most.
    public static let maximumSize = 16 * 1024

    /// The claims of `jwt` once it is found to be the provider's ID token for this client and this
    /// login; else the error that says what is wrong.
    ///
    /// - Parameters:
    ///   - keys: the provider's JWKS. On ``IDTokenError/unknownKey(_:)`` the caller fetches it
    ///     again, once, and validates again (the provider may have rotated its keys).
    ///   - issuer: the configured issuer, which `iss` must equal exactly.
    ///   - clientID: which `aud` must contain (and `azp`, when present, equal).
    ///   - nonce: the nonce the login sent (browser login), which the token must carry; nil when
    ///     none was sent (password, device, refresh), and then the token's nonce is not looked at.
    ///   - clientSecret: the client secret, which keys HS256/384/512 (OpenID Connect Core §10.1);
    ///     nil for a public client, and then an HMAC-signed token is refused.
    ///   - now: the time, in seconds since 1970.
    ///   - leeway: how far the clocks of this machine and the provider may disagree, in seconds.
    public static func validate(_ jwt: String, keys: JSONWebKeySet, issuer: String, clientID: String, nonce: String?,
                                clientSecret: String?, now: Double, leeway: Double = 300) throws(IDTokenError) -> IDTokenClaims {
        guard jwt.utf8.count <= maximumSize else { throw .tooLarge(bytes: jwt.utf8.count) }
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3 else { throw .malformed("not three base64url parts separated by dots") }
        guard let headerBytes = JOSEBase64.decode(parts[0]),
              let header = try? JSONDecoder().decode(Header.self, from: headerBytes) else {
            throw .malformed("a header that is not base64url JSON with an \"alg\"")
        }
        // RFC 7515 §4.1.11: a token whose `crit` names any extension must be refused by a
        // verifier that understands none of them, as msso does.
        guard !header.critical else { throw .criticalHeader }
        guard let algorithm = JWSAlgorithm(rawValue: header.alg) else { throw .unsupportedAlgorithm(String(header.alg.prefix(64))) }
        guard let signature = JOSEBase64.decode(parts[2]) else { throw .malformed("a signature that is not base64url") }
        // The signing input is the first two parts as sent, not as decoded (RFC 7515 §5.2).
        let input = Data(jwt.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        if algorithm.isSymmetric {
            // Only ever with the client secret: an HS token "signed" with a published public key's
            // bytes (the classic confusion attack) finds no key here to be checked against.
            guard let clientSecret, !clientSecret.isEmpty else { throw .needsClientSecret(algorithm) }
            guard Self.isValidMAC(signature, algorithm: algorithm, for: input, secret: clientSecret) else { throw .badSignature }
        } else {
            let key = try keys.key(id: header.kid, for: algorithm)
            guard key.isValidSignature(signature, algorithm: algorithm, for: input) else { throw .badSignature }
        }
        guard let payload = JOSEBase64.decode(parts[1]),
              let claims = try? JSONDecoder().decode(Claims.self, from: payload) else {
            throw .malformed("claims that are not base64url JSON")
        }
        return try claims.checked(issuer: issuer, clientID: clientID, nonce: nonce, now: now, leeway: leeway)
    }

    static func isValidMAC(_ mac: Data, algorithm: JWSAlgorithm, for input: Data, secret: String) -> Bool {
        let key = SymmetricKey(data: Data(secret.utf8))
        switch algorithm { // each compares in constant time
        case .hs256: return HMAC<SHA256>.isValidAuthenticationCode(mac, authenticating: input, using: key)
        case .hs384: return HMAC<SHA384>.isValidAuthenticationCode(mac, authenticating: input, using: key)
        case .hs512: return HMAC<SHA512>.isValidAuthenticationCode(mac, authenticating: input, using: key)
        default: return false
        }
    }

    /// The JOSE header members msso reads. `jwk`, `jku`, `x5u`, `x5c` are ignored on purpose: a
    /// key the token brings along proves nothing.
    struct Header: Decodable {
        var alg: String
        var kid: String?
        /// Whether the header has a `crit` member at all.
        var critical: Bool

        private enum Member: String, CodingKey { case alg, kid, crit }

        init(from decoder: Decoder) throws {
            let object = try decoder.container(keyedBy: Member.self)
            alg = try object.decode(String.self, forKey: .alg)
            kid = try object.decodeIfPresent(String.self, forKey: .kid)
            critical = object.contains(.crit)
        }
    }

    /// The claims as sent; a claim of the wrong JSON type reads as absent.
    struct Claims: Decodable {
        var iss: String?
        var sub: String?
        var aud: [String]?
        var azp: String?
        var exp: Double?
        var iat: Double?
        var nbf: Double?
        var nonce: String?
        var preferredUsername: String?
        var email: String?
        var name: String?
        /// Every top-level claim whose value is a string (at most ``maximumStrings``), by name.
        var strings: [String: String] = [:]
        static let maximumStrings = 256

        private enum Member: String, CodingKey {
            case iss, sub, aud, azp, exp, iat, nbf, nonce, preferred_username, email, name
        }

        private struct AnyMember: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        init(from decoder: Decoder) throws {
            let object = try decoder.container(keyedBy: Member.self)
            func text(_ member: Member) -> String? { (try? object.decodeIfPresent(String.self, forKey: member)) ?? nil }
            func time(_ member: Member) -> Double? { ((try? object.decodeIfPresent(Double.self, forKey: member)) ?? nil).flatMap { $0.isFinite ? $0 : nil } }
            iss = text(.iss)
            sub = text(.sub)
            // `aud` is one string or an array of strings (OpenID Connect Core §2).
            aud = text(.aud).map { [$0] } ?? ((try? object.decodeIfPresent([String].self, forKey: .aud)) ?? nil)
            azp = text(.azp)
            exp = time(.exp)
            iat = time(.iat)
            nbf = time(.nbf)
            nonce = text(.nonce)
            preferredUsername = text(.preferred_username)
            email = text(.email)
            name = text(.name)
            let all = try decoder.container(keyedBy: AnyMember.self)
            for key in all.allKeys.prefix(Self.maximumStrings) {
                if let value = (try? all.decodeIfPresent(String.self, forKey: key)) ?? nil { strings[key.stringValue] = value }
            }
        }

        /// OpenID Connect Core §3.1.3.7, steps 2–11 (the signature, step 6, is already checked).
        func checked(issuer: String, clientID: String, nonce expected: String?, now: Double, leeway: Double) throws(IDTokenError) -> IDTokenClaims {
            guard let iss else { throw .missingClaim("iss") }
            guard let sub, !sub.isEmpty else { throw .missingClaim("sub") }
            guard let aud, !aud.isEmpty else { throw .missingClaim("aud") }
            guard let exp else { throw .missingClaim("exp") }
            guard let iat else { throw .missingClaim("iat") }
            guard iss.utf8.elementsEqual(issuer.utf8) else { throw .issuer(String(iss.prefix(200))) }
            guard aud.contains(where: { $0.utf8.elementsEqual(clientID.utf8) }) else { throw .audience(clientID) }
            // Several audiences: the token must say which of them it was issued to (`azp`); an
            // `azp` present must name this client in any case.
            if aud.count > 1 || azp != nil {
                guard let azp, azp.utf8.elementsEqual(clientID.utf8) else { throw .authorizedParty(clientID) }
            }
            guard exp > now - leeway else { throw .expired(at: exp) }
            guard iat <= now + leeway else { throw .issuedInFuture(at: iat) }
            if let nbf, nbf > now + leeway { throw .notYetValid(at: nbf) }
            if let expected {
                guard let nonce, nonce.utf8.elementsEqual(expected.utf8) else { throw .nonce }
            }
            return IDTokenClaims(subject: sub, preferredUsername: preferredUsername, email: email, name: name,
                                 issuedAt: iat, expiresAt: exp, strings: strings)
        }
    }
}

/// The claims of an ID token that passed ``IDToken/validate(_:keys:issuer:clientID:nonce:clientSecret:now:leeway:)``.
public struct IDTokenClaims: Equatable, Sendable {
    /// `sub`: the user, as the provider names them for good.
    public var subject: String
    public var preferredUsername: String?
    public var email: String?
    public var name: String?
    /// `iat` and `exp`, in seconds since 1970.
    public var issuedAt: Double
    public var expiresAt: Double
    /// Every claim whose value is a string, by name (what an administrator's `account_claim` names).
    public var strings: [String: String]

    public init(subject: String, preferredUsername: String? = nil, email: String? = nil, name: String? = nil,
                issuedAt: Double, expiresAt: Double, strings: [String: String] = [:]) {
        self.strings = strings
        self.subject = subject
        self.preferredUsername = preferredUsername
        self.email = email
        self.name = name
        self.issuedAt = issuedAt
        self.expiresAt = expiresAt
    }

    /// The name people know the user by: `preferred_username`, else `email`, else `name`, the first
    /// of them that is ``isDisplayable(_:)``; nil when none is. `sub` is not one: often a number or
    /// a long hash, it is shown only when nothing better is known (the name the user typed first).
    public var displayName: String? {
        [preferredUsername, email, name].lazy.compactMap { $0 }.first(where: Self.isDisplayable)
    }

    /// Whether `text` may be shown as it is: not empty, at most 255 UTF-8 bytes, and without a
    /// character a terminal could act on (the control characters, the bidi controls, the line
    /// and paragraph separators: what ``TerminalText`` would replace).
    public static func isDisplayable(_ text: String) -> Bool {
        guard !text.isEmpty, text.utf8.count <= 255 else { return false }
        return !text.unicodeScalars.contains { scalar in
            switch scalar.value {
            case 0x00..<0x20, 0x7F...0x9F, 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069, 0x2028, 0x2029: return true
            default: return false
            }
        }
    }
}

/// Why an ID token was refused. ``unknownKey(_:)`` is the one a caller acts on (it fetches the
/// JWKS again, once, and validates again); every other one ends the login.
public enum IDTokenError: Error, Equatable, Sendable {
    /// Longer than ``IDToken/maximumSize`` bytes.
    case tooLarge(bytes: Int)
    /// Not a compact JWS, or a part that does not decode; says which.
    case malformed(String)
    /// The header has a `crit` member: extensions msso does not understand.
    case criticalHeader
    /// `alg` is none, or not one msso verifies (at most 64 characters of it).
    case unsupportedAlgorithm(String)
    /// An HMAC algorithm, and no client secret to key it with.
    case needsClientSecret(JWSAlgorithm)
    /// The JWKS has no key of this `kid` (nil: the token names none, and no key fits its `alg`).
    case unknownKey(String?)
    /// The key of this `kid` cannot verify this algorithm (another type, another curve, or a
    /// key that names another `alg`).
    case keyMismatch(JWSAlgorithm, kid: String)
    /// The token names no `kid`, and several keys of the set fit its algorithm.
    case ambiguousKey(JWSAlgorithm)
    /// The signature does not verify.
    case badSignature
    /// A required claim is absent, or not of its JSON type.
    case missingClaim(String)
    /// `iss` is not the configured issuer (at most 200 characters of it).
    case issuer(String)
    /// `aud` does not contain this client id.
    case audience(String)
    /// Several audiences and no `azp`, or an `azp` that is not this client id.
    case authorizedParty(String)
    /// `exp` is past, by more than the leeway.
    case expired(at: Double)
    /// `iat` is ahead, by more than the leeway.
    case issuedInFuture(at: Double)
    /// `nbf` is ahead, by more than the leeway.
    case notYetValid(at: Double)
    /// The login sent a nonce, and the token carries another or none.
    case nonce

    /// Whether the caller should fetch the JWKS again and retry once.
    public var isUnknownKey: Bool {
        if case .unknownKey = self { return true }
        return false
    }

    /// The error for the user: the cause, and the fix. It never quotes the token; what it quotes
    /// of it (a `kid`, an `alg`, an `iss`) is cut short and made safe for a terminal.
    ///
    /// The names, by who can fix the cause:
    /// - `ConfigInvalid` when the configuration (msso's or the client's registration at the
    ///   provider) is what disagrees: the issuer, the audience, the authorized party, an
    ///   algorithm msso does not accept (`none`; an HMAC for a client without a secret). Logging
    ///   in again cannot help until someone changes a setting, as for an issuer mismatch in
    ///   discovery.
    /// - `LoginDenied` for a nonce that does not match: this login's answer was not for this
    ///   login (a replay or a mix-up); the provider and the configuration may be fine, and a new
    ///   login is the way on.
    /// - `IdPUnavailable` for everything else: a token msso cannot read or whose signature it
    ///   cannot verify with the keys the provider publishes, or whose times disagree with this
    ///   machine's clock. The provider answered with something that cannot be trusted, as for any
    ///   other answer it cannot read; no setting of msso's fixes it.
    public func brokerError(group: GroupConfig) -> BrokerError {
        let sent = "the identity provider of \"\(group.name)\" sent an ID token"
        func shown(_ text: String, _ limit: Int) -> String { TerminalText.safe(String(text.prefix(limit))) }
        switch self {
        case .tooLarge(let bytes):
            return BrokerError(.idpUnavailable, "\(sent) of \(bytes) bytes, more than the \(IDToken.maximumSize) msso reads: it cannot be verified; ask the provider's administrator to put fewer claims in it")
        case .malformed(let what):
            return BrokerError(.idpUnavailable, "\(sent) that is not a signed JWT (\(what)): it cannot be verified; check that \(group.issuer) is an OpenID Connect provider")
        case .criticalHeader:
            return BrokerError(.idpUnavailable, "\(sent) whose header names critical extensions (crit) msso does not understand: it cannot be verified; ask the provider's administrator to sign ID tokens with plain RS256 or ES256")
        case .unsupportedAlgorithm(let alg):
            return BrokerError(.configInvalid, "\(sent) signed with \"\(shown(alg, 32))\", which msso does not accept (it accepts RS, PS, ES 256/384/512, EdDSA, and HS with a client secret): set the client's ID token signature algorithm at the provider to RS256 or ES256")
        case .needsClientSecret(let algorithm):
            return BrokerError(.configInvalid, "\(sent) signed with \(algorithm.rawValue), which is keyed with the client secret, and \"\(group.name)\" has none in the config: set the client's ID token signature algorithm at the provider to RS256 or ES256, or configure the client secret")
        case .unknownKey(let kid):
            let which = kid.map { "kid \"\(shown($0, 64))\"" } ?? "no kid, and no published key fits its algorithm"
            return BrokerError(.idpUnavailable, "\(sent) signed with a key it does not publish (\(which)): it cannot be verified; if the provider just changed its keys, log in again, else ask its administrator to publish the signing key in its jwks_uri")
        case .keyMismatch(let algorithm, let kid):
            return BrokerError(.idpUnavailable, "\(sent) signed with \(algorithm.rawValue), which its key \"\(shown(kid, 64))\" is not for: refusing it (a key of one type is never used for another algorithm); ask the provider's administrator to check its signing keys")
        case .ambiguousKey(let algorithm):
            return BrokerError(.idpUnavailable, "\(sent) signed with \(algorithm.rawValue) without naming its key (kid), and the provider publishes several such keys: it cannot be verified; ask the provider's administrator to include kid in ID tokens")
        case .badSignature:
            return BrokerError(.idpUnavailable, "\(sent) whose signature does not verify with the key it names: refusing it (it was altered, or not signed by the provider); if it happens again, report it to the provider's administrator")
        case .missingClaim(let claim):
            return BrokerError(.idpUnavailable, "\(sent) without the \"\(claim)\" claim OpenID Connect requires: refusing it; ask the provider's administrator to fix its ID tokens")
        case .issuer(let iss):
            return BrokerError(.configInvalid, "\(sent) from issuer \"\(shown(iss, 200))\", not the configured \(group.issuer): refusing it (OpenID Connect requires them to be identical; check `issuer` in the config)")
        case .audience(let clientID):
            return BrokerError(.configInvalid, "\(sent) whose audience is not client_id \"\(shown(clientID, 200))\": refusing it (it was issued to another client); check client_id in the config and the client's audience settings at the provider")
        case .authorizedParty(let clientID):
            return BrokerError(.configInvalid, "\(sent) for several audiences whose authorized party (azp) is not client_id \"\(shown(clientID, 200))\": refusing it (it may have been issued to another client); check client_id in the config and the client's audience settings at the provider")
        case .expired(let at):
            return BrokerError(.idpUnavailable, "\(sent) that expired at \(Self.utc(at)): refusing it; check that the clocks of this machine and the provider are right, then log in again")
        case .issuedInFuture(let at):
            return BrokerError(.idpUnavailable, "\(sent) issued at \(Self.utc(at)), in the future: refusing it; check that the clocks of this machine and the provider are right, then log in again")
        case .notYetValid(let at):
            return BrokerError(.idpUnavailable, "\(sent) not valid before \(Self.utc(at)): refusing it; check that the clocks of this machine and the provider are right, then log in again")
        case .nonce:
            return BrokerError(.loginDenied, "\(sent) whose nonce does not match the login's: the answer was not for this login; run `msso login --browser --group \(group.name)` again")
        }
    }

    /// `time` (seconds since 1970) as RFC 3339 in UTC, `2026-11-23T14:03:12Z`, by the civil
    /// calendar (days to year, month, day as in H. Hinnant's `civil_from_days`).
    static func utc(_ time: Double) -> String {
        guard time.isFinite, time >= 0, time < 253_402_300_800 else { return "\(time) s after 1970" }
        let seconds = Int(time), days = seconds / 86400, rest = seconds % 86400
        let z = days + 719_468, era = z / 146_097, dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func two(_ n: Int) -> String { n < 10 ? "0\(n)" : "\(n)" }
        let paddedYear = String(repeating: "0", count: max(0, 4 - String(year).count)) + String(year)
        return "\(paddedYear)-\(two(month))-\(two(day))T\(two(rest / 3600)):\(two(rest % 3600 / 60)):\(two(rest % 60))Z"
    }
}
