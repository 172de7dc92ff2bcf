import CMSSOSystem
import Crypto
import FoundationEssentials
import Glibc
import MSSOCore
import MSSOProtocol
import MSSOSigning

/// A refresh's answer kept by mssod-idp in the kernel keyring (``IdPHTTP/Rescue``): the refresh
/// token an IdP rotates is good once, so an answer lost between the IdP and the store would lose
/// the session. One per session (group and account), tagged with a fingerprint of the refresh token
/// it answered and the time it was asked; mssod removes it once it has stored the answer, and a
/// later mssod takes it when the stored session is still the one it answered.
enum RescuedRefresh {
    /// `msso:rescue:SCOPE:SESSION` (SESSION: ``AccountName/storeName``); SCOPE names the daemon's state directory (a digest of its path),
    /// so that mssods of one uid with state directories of their own (a user's test runs, several
    /// HOMEs) neither take nor drop, and revoke, each other's answers, as they did when the key
    /// named the group alone.
    static func key(_ group: GroupConfig, _ scope: String) -> String { "msso:rescue:\(scope):\(group.session.storeName)" }

    /// The SCOPE of the keys of a daemon whose state directory is `directory`.
    static func scope(stateDirectory directory: String) -> String {
        String(BodyDigest.hexSHA256(directory.utf8).prefix(12))
    }

    /// What the request asks mssod-idp to keep with the answer. A mint's answer (a token for one
    /// server or one app's scopes) says so: its access token is not the session's.
    static func rescue(_ group: GroupConfig, _ scope: String, spent refreshToken: String, at time: Double, minting: Bool = false) -> IdPHTTP.Rescue {
        IdPHTTP.Rescue(key: key(group, scope), tag: "\(fingerprint(refreshToken)) \(Int(time))\(minting ? " \(mintMark)" : "")")
    }

    /// The tag's third word on a mint's answer.
    static let mintMark = "minted"

    /// Not the token: a reader of the keyring learns nothing it could use from it.
    static func fingerprint(_ refreshToken: String) -> String {
        Base64URL.encode(Data(SHA256.hash(data: Data(refreshToken.utf8))))
    }

    /// What is kept for the group: an answer, or a request still under way elsewhere.
    enum Kept {
        /// The fingerprint of the token it answered, when it was asked, the IdP's body, and
        /// whether it answered a mint.
        case answer(fingerprint: String, askedAt: Double, body: Data, minted: Bool)
        /// A `mssod-idp` (of this mssod, or of one that died or stopped) spending that token now.
        case underWay(fingerprint: String, askedAt: Double, pid: Int32)
    }

    /// What is kept for the group; nil when nothing is, or it cannot be read as either.
    static func read(_ group: GroupConfig, _ scope: String) -> Kept? {
        guard let (_, key) = find(group, scope) else { return nil }
        var buffer = [UInt8](repeating: 0, count: 32768)
        let length = buffer.withUnsafeMutableBytes { cmsso_keys_read(key, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
        defer { buffer.withUnsafeMutableBytes { explicit_bzero($0.baseAddress!, $0.count) } }
        guard length > 0, length <= buffer.count, let newline = buffer[..<length].firstIndex(of: 10) else { return nil }
        var tag = String(decoding: buffer[..<newline], as: UTF8.self).split(separator: " ")
        let minted = tag.count >= 3 && tag[2] == mintMark
        if minted { tag.remove(at: 2) }
        guard tag.count >= 2, let askedAt = Double(tag[1]), askedAt.isFinite else { return nil }
        if tag.count == 3, newline + 1 == length, let pid = Int32(tag[2]), pid > 0 {
            return .underWay(fingerprint: String(tag[0]), askedAt: askedAt, pid: pid)
        }
        guard tag.count == 2 else { return nil }
        return .answer(fingerprint: String(tag[0]), askedAt: askedAt, body: Data(buffer[(newline + 1)..<length]), minted: minted)
    }

    /// Whether `pid` is still a `mssod-idp` (its name; it is not dumpable, so not its executable).
    static func running(_ pid: Int32) -> Bool {
        guard kill(pid, 0) == 0 || errno == EPERM,
              let name = try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8) else { return false }
        return name == "mssod-idp\n"
    }

    /// Before a refresh of `refreshToken`: the answer of a request that is spending it already (a
    /// mssod that died or stopped left it under way), waited for while its `mssod-idp` runs, at
    /// most `seconds`. Nil when there is none: the token is then this refresh's to spend.
    static func answerElsewhere(_ group: GroupConfig, _ scope: String, spending refreshToken: String, within seconds: Double) async -> (askedAt: Double, body: Data, minted: Bool)? {
        let fingerprint = fingerprint(refreshToken)
        let end = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        while true {
            switch read(group, scope) {
            case .answer(fingerprint, let askedAt, let body, let minted)?:
                return (askedAt, body, minted)
            case .underWay(fingerprint, _, let pid)? where running(pid) && ContinuousClock.now < end:
                try? await Task.sleep(for: .milliseconds(20))
            default:
                return nil
            }
        }
    }

    /// Removes the group's kept answer, if any.
    static func forget(_ group: GroupConfig, _ scope: String) {
        if let (home, key) = find(group, scope) { _ = cmsso_keys_delete(home, key) }
    }

    /// The keyring the kernel store uses and the group's key in it, when there is one.
    private static func find(_ group: GroupConfig, _ scope: String) -> (home: Int32, key: Int32)? {
        var persistent: Int32 = 0
        let home = cmsso_keys_home(&persistent)
        guard home > 0, group.name.utf8.allSatisfy({ $0 != 0 }) else { return nil }
        let key = cmsso_keys_find(home, key(group, scope))
        return key > 0 ? (home, key) : nil
    }
}

extension OpenIDProvider {
    public func rescuedRefresh(_ group: GroupConfig, spent refreshToken: String?) async -> RescuedTokens? {
        // One still under way is waited for by the refresh that would spend its token.
        guard case .answer(let fingerprint, let askedAt, let body, let minted)? = RescuedRefresh.read(group, rescueScope) else { return nil }
        let matches = refreshToken.map { RescuedRefresh.fingerprint($0) == fingerprint } ?? false
        do {
            return RescuedTokens(tokens: try await keptTokens(body, askedAt: askedAt, group: group), answersStored: matches, minted: minted)
        } catch {
            logger.warning("a kept refresh answer could not be read; it is dropped", metadata: ["group": "\(group.name)", "error": "\(error)"])
            RescuedRefresh.forget(group, rescueScope)
            return nil
        }
    }

    public func forgetRescuedRefresh(_ group: GroupConfig) {
        RescuedRefresh.forget(group, rescueScope)
    }

    /// The tokens of a kept answer; their lifetime counts from when it was asked, not from now.
    func keptTokens(_ body: Data, askedAt: Double, group: GroupConfig) async throws(BrokerError) -> TokenSet {
        var tokens = try await refreshedTokens(body, group: group, dpop: group.signing.token == .dpop)
        tokens.expiresIn = max(0, askedAt + tokens.expiresIn - Date().timeIntervalSince1970)
        return tokens
    }
}
