import CMSSOSystem
import Crypto
import FoundationEssentials
import Glibc
import MSSOCore
import MSSOProtocol
import MSSOSigning

/// A refresh's answer kept by mssod-idp in the kernel keyring (``IdPHTTP/Rescue``): the refresh
/// token an IdP rotates is good once, so an answer lost between the IdP and the store would lose
/// the session. One per group, `msso:rescue:GROUP`, tagged with a fingerprint of the refresh token
/// it answered and the time it was asked; mssod removes it once it has stored the answer, and a
/// later mssod takes it when the stored session is still the one it answered.
enum RescuedRefresh {
    static func key(_ group: GroupConfig) -> String { "msso:rescue:\(group.name)" }

    /// What the request asks mssod-idp to keep with the answer.
    static func rescue(_ group: GroupConfig, spent refreshToken: String, at time: Double) -> IdPHTTP.Rescue {
        IdPHTTP.Rescue(key: key(group), tag: "\(fingerprint(refreshToken)) \(Int(time))")
    }

    /// Not the token: a reader of the keyring learns nothing it could use from it.
    static func fingerprint(_ refreshToken: String) -> String {
        Base64URL.encode(Data(SHA256.hash(data: Data(refreshToken.utf8))))
    }

    /// The kept answer of the group: the fingerprint of the token it answered, when it was asked,
    /// and the IdP's body. Nil when there is none, or it cannot be read as one.
    static func read(_ group: GroupConfig) -> (fingerprint: String, askedAt: Double, body: Data)? {
        var persistent: Int32 = 0
        let home = cmsso_keys_home(&persistent)
        guard home > 0, group.name.utf8.allSatisfy({ $0 != 0 }) else { return nil }
        let key = cmsso_keys_find(home, key(group))
        guard key > 0 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 32768)
        let length = buffer.withUnsafeMutableBytes { cmsso_keys_read(key, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
        defer { buffer.withUnsafeMutableBytes { explicit_bzero($0.baseAddress!, $0.count) } }
        guard length > 0, length <= buffer.count, let newline = buffer[..<length].firstIndex(of: 10) else { return nil }
        let tag = String(decoding: buffer[..<newline], as: UTF8.self).split(separator: " ")
        guard tag.count == 2, let askedAt = Double(tag[1]), askedAt.isFinite else { return nil }
        return (String(tag[0]), askedAt, Data(buffer[(newline + 1)..<length]))
    }

    /// Removes the group's kept answer, if any.
    static func forget(_ group: GroupConfig) {
        var persistent: Int32 = 0
        let home = cmsso_keys_home(&persistent)
        guard home > 0, group.name.utf8.allSatisfy({ $0 != 0 }) else { return }
        let key = cmsso_keys_find(home, key(group))
        if key > 0 { _ = cmsso_keys_delete(home, key) }
    }
}

extension OpenIDProvider {
    public func rescuedRefresh(_ group: GroupConfig, spent refreshToken: String?) async -> RescuedTokens? {
        guard let kept = RescuedRefresh.read(group) else { return nil }
        let matches = refreshToken.map { RescuedRefresh.fingerprint($0) == kept.fingerprint } ?? false
        do {
            var tokens = try await refreshedTokens(kept.body, group: group, dpop: group.signing.token == .dpop)
            // Its lifetime counts from when it was asked, not from now.
            tokens.expiresIn = max(0, kept.askedAt + tokens.expiresIn - Date().timeIntervalSince1970)
            return RescuedTokens(tokens: tokens, answersStored: matches)
        } catch {
            logger.warning("a kept refresh answer could not be read; it is dropped", metadata: ["group": "\(group.name)", "error": "\(error)"])
            RescuedRefresh.forget(group)
            return nil
        }
    }

    public func forgetRescuedRefresh(_ group: GroupConfig) {
        RescuedRefresh.forget(group)
    }
}
