import Crypto
import FoundationEssentials
import MSSOProtocol

/// DPoP proofs (RFC 9449): a JWT, signed with the broker's key, binding one request (and, with
/// `ath`, one access token) to that key.
public enum DPoPProof {
    /// `htu`: the URL without query and fragment (RFC 9449 §4.2).
    public static func target(_ url: URL) -> String {
        let text = url.absoluteString
        return text.utf8.firstIndex(where: { $0 == 0x3F || $0 == 0x23 }).map { String(text[..<$0]) } ?? text // ? or #
    }

    /// A compact JWS proof for `method` on `url`.
    /// - Parameters:
    ///   - accessToken: the token the request carries (resource requests): hashed into `ath`.
    ///   - nonce: the newest `DPoP-Nonce` the server sent, if it demands one.
    ///   - jti: unique per proof; a random UUID unless a test needs a fixed one.
    public static func make(key: SigningKey, method: String, url: URL, accessToken: String? = nil, nonce: String? = nil,
                            issuedAt: Int = Int(Date().timeIntervalSince1970), jti: String = UUID.random().uuidString) throws -> String {
        var claims = [("jti", json(jti)), ("htm", json(method.uppercased())), ("htu", json(target(url))), ("iat", String(issuedAt))]
        if let accessToken {
            claims.append(("ath", json(Base64URL.encode(Data(SHA256.hash(data: Data(accessToken.utf8)))))))
        }
        if let nonce { claims.append(("nonce", json(nonce))) }
        let payload = "{" + claims.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
        let input = key.dpopHeader + "." + Base64URL.encode(Data(payload.utf8))
        return input + "." + Base64URL.encode(try key.signature(for: Data(input.utf8)))
    }

    /// A JSON string literal, without a JSONEncoder per claim: this is the sign path.
    static func json(_ text: String) -> String { JSONString.literal(text) }
}
