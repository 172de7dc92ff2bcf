import Crypto
import FoundationEssentials

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

    /// A JSON string literal (RFC 8259 §7), without a JSONEncoder per claim: this is the sign path.
    static func json(_ text: String) -> String {
        // Most values (a UUID, a method, a URL, a base64url hash) need no escape: copy them whole.
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5C }) { return "\"" + text + "\"" }
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = Array("0123456789abcdef")
                out += "\\u00" + String(hex[Int(scalar.value >> 4)]) + String(hex[Int(scalar.value & 0xF)])
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
