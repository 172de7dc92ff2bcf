import FoundationEssentials
import MSSOProtocol

/// HTTP Message Signatures (RFC 9421) for requests, with Content-Digest (RFC 9530).
public enum MessageSignature {
    /// What is being signed.
    public struct Request: Sendable {
        public var method: String
        public var url: URL
        /// Header names are matched case-insensitively; repeated headers are combined (RFC 9421 §2.1).
        public var headers: [(name: String, value: String)]

        public init(method: String, url: URL, headers: [(name: String, value: String)]) {
            self.method = method
            self.url = url
            self.headers = headers
        }
    }

    /// The signature's parameters, serialised in the order given here.
    public struct Parameters: Sendable {
        public var created: Int?
        public var expires: Int?
        public var nonce: String?
        public var algorithm: String?
        public var keyID: String?
        public var tag: String?

        public init(created: Int? = nil, expires: Int? = nil, nonce: String? = nil, algorithm: String? = nil,
                    keyID: String? = nil, tag: String? = nil) {
            self.created = created
            self.expires = expires
            self.nonce = nonce
            self.algorithm = algorithm
            self.keyID = keyID
            self.tag = tag
        }

        /// Appends `;created=…;keyid="…"`, a structured-field parameter list (RFC 8941).
        func serialise(into out: inout String) {
            if let created { out += ";created="; out += String(created) }
            if let expires { out += ";expires="; out += String(expires) }
            if let nonce { out += ";nonce="; appendQuoted(nonce, to: &out) }
            if let algorithm { out += ";alg="; appendQuoted(algorithm, to: &out) }
            if let keyID { out += ";keyid="; appendQuoted(keyID, to: &out) }
            if let tag { out += ";tag="; appendQuoted(tag, to: &out) }
        }
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// `sha-256=:BASE64:`, the Content-Digest field value for a body's SHA-256.
    public static func contentDigest(sha256: Data) -> String {
        "sha-256=:" + Base64.encode(sha256, alphabet: Base64.standardAlphabet, padded: true) + ":"
    }

    /// The signature base (RFC 9421 §2.5): one line per covered component, then the parameters.
    public static func base(_ request: Request, components: [String], parameters: Parameters) throws -> String {
        try base(request, components: components, signatureParams: signatureParams(components, parameters))
    }

    static func base(_ request: Request, components: [String], signatureParams: String) throws -> String {
        guard let parts = URLComponents(url: request.url, resolvingAgainstBaseURL: false), parts.host != nil else {
            throw Failure(description: "the URL has no authority")
        }
        var base = ""
        base.reserveCapacity(512)
        for component in components {
            appendQuoted(component, to: &base)
            base += ": "
            base += try value(of: component, in: request, parts: parts)
            base += "\n"
        }
        base += "\"@signature-params\": "
        base += signatureParams
        return base
    }

    /// The `Signature-Input` and `Signature` field values for one signature labelled `label`.
    public static func sign(_ request: Request, components: [String], parameters: Parameters, label: String = "sig1",
                            key: SigningKey) throws -> (signatureInput: String, signature: String) {
        let params = signatureParams(components, parameters) // in the base and in Signature-Input
        let base = try base(request, components: components, signatureParams: params)
        let signature = try key.signature(for: Data(base.utf8))
        return (label + "=" + params, label + "=:" + Base64.encode(signature, alphabet: Base64.standardAlphabet, padded: true) + ":")
    }

    static func signatureParams(_ components: [String], _ parameters: Parameters) -> String {
        var out = "("
        out.reserveCapacity(256)
        for (index, component) in components.enumerated() {
            if index > 0 { out += " " }
            appendQuoted(component, to: &out)
        }
        out += ")"
        parameters.serialise(into: &out)
        return out
    }

    /// A component's value (RFC 9421 §2.1 for fields, §2.2 for derived components).
    static func value(of component: String, in request: Request, parts: URLComponents) throws -> String {
        let host = parts.host ?? ""
        switch component {
        case "@method":
            return request.method.uppercased()
        case "@target-uri":
            return request.url.absoluteString
        case "@authority":
            let scheme = parts.scheme?.lowercased()
            let defaultPort = (scheme == "https" && parts.port == 443) || (scheme == "http" && parts.port == 80)
            return host.lowercased() + (parts.port.map { defaultPort ? "" : ":\($0)" } ?? "")
        case "@scheme":
            return (parts.scheme ?? "").lowercased()
        case "@path":
            return parts.percentEncodedPath.isEmpty ? "/" : parts.percentEncodedPath
        case "@query":
            return "?" + (parts.percentEncodedQuery ?? "")
        case "@request-target":
            let path = parts.percentEncodedPath.isEmpty ? "/" : parts.percentEncodedPath
            return path + (parts.percentEncodedQuery.map { "?" + $0 } ?? "")
        default:
            guard !component.hasPrefix("@") else { throw Failure(description: "unsupported derived component \(component)") }
            let values = request.headers.filter { $0.name.lowercased() == component }
                .map { $0.value.trimmed() }
            guard !values.isEmpty else { throw Failure(description: "the request has no \(component) header to cover") }
            return values.joined(separator: ", ")
        }
    }
}

/// Appends `text` as a structured-field string (RFC 8941 §3.3.3): backslash and quote escaped.
/// The values quoted here (component names, a UUID nonce, a base64url key id, the tag) are
/// printable ASCII and almost never hold either, so they are copied whole unless one is there
/// (looked for on the UTF-8 bytes: both are ASCII, and no byte of a longer character is one).
func appendQuoted(_ text: String, to out: inout String) {
    out += "\""
    if text.utf8.contains(where: { $0 == 0x5C || $0 == 0x22 }) {
        for scalar in text.unicodeScalars {
            if scalar == "\\" || scalar == "\"" { out += "\\" }
            out.unicodeScalars.append(scalar)
        }
    } else {
        out += text
    }
    out += "\""
}
