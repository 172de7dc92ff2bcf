import FoundationEssentials
import MSSOProtocol
import MSSOSigning

extension SigningProfile {
    /// The headers that authenticate `request` under this profile.
    /// - Parameters:
    ///   - key: the group's key (required when `needsKey`).
    ///   - dpopNonce: the newest nonce the request's origin asked for, if any.
    public func headers(for request: SignRequest, url: URL, accessToken: String, key: SigningKey?, dpopNonce: String?,
                        now: Double) throws -> [Header] {
        var added: [Header]
        switch token {
        case .bearer:
            added = [Header("Authorization", "Bearer " + accessToken)]
        case .header(let name):
            added = [Header(name, accessToken)]
        case .dpop:
            let proof = try DPoPProof.make(key: key!, method: request.method, url: url, accessToken: accessToken,
                                           nonce: dpopNonce, issuedAt: Int(now))
            added = [Header("Authorization", "DPoP " + accessToken), Header("DPoP", proof)]
        }
        guard messageSignature, let key else { return added }

        // RFC 9421 over the request as it will be sent: its own headers plus the ones added here.
        if let digest = request.bodySHA256 {
            guard let bytes = Data(base64Encoded: digest), bytes.count == 32 else {
                throw BrokerError(.badRequest, "`bodySHA256` must be the base64 of a SHA-256 digest")
            }
            added.append(Header("Content-Digest", MessageSignature.contentDigest(sha256: bytes)))
        }
        let replaced = Set(added.map { $0.name.lowercased() })
        let given = (request.headers ?? []).filter { !replaced.contains($0.name.lowercased()) }
        let all = given + added
        let present = replaced.union(given.map { $0.name.lowercased() })
        var components = ["@method", "@authority", "@target-uri"]
        for name in ["content-type", "content-digest", "authorization", "dpop"] where present.contains(name) {
            components.append(name)
        }
        if case .header(let name) = token { components.append(name.lowercased()) }
        let created = Int(now)
        let parameters = MessageSignature.Parameters(created: created, expires: created + 300, nonce: UUID.random().uuidString,
                                                     algorithm: key.httpSignatureAlgorithm, keyID: key.thumbprint, tag: "msso")
        let signed: (signatureInput: String, signature: String)
        do {
            signed = try MessageSignature.sign(.init(method: request.method, url: url, headers: all.map { ($0.name, $0.value) }),
                                               components: components, parameters: parameters, key: key)
        } catch {
            throw BrokerError(.badRequest, "cannot sign the request: \(error)")
        }
        return added + [Header("Signature-Input", signed.signatureInput), Header("Signature", signed.signature)]
    }
}
