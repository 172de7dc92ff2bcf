import FoundationEssentials
import MSSOCore
import MSSOProtocol
import MSSOSigning

/// Tokens minted from a session for one server (`tokens = "per-resource"`) or one app's scopes:
/// RFC 8707 resource indicators on the refresh grant, or RFC 8693 token exchange.
extension OpenIDProvider {
    static let tokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
    static let accessTokenType = "urn:ietf:params:oauth:token-type:access_token"

    public func mintingMechanism(_ group: GroupConfig, for target: TokenTarget) async throws -> TokenRequest {
        let listed = try await discover(group).grantTypes?.contains(Self.tokenExchange) == true
        if target.scopes != nil {
            // A refresh with a narrower scope narrows the session's own refresh token at some
            // providers (django-oauth-toolkit, against RFC 6749 §6) and is ignored at others
            // (glewlwyd): only an exchange leaves the session as it was.
            guard listed || group.tokenRequest == .exchange else {
                throw BrokerError(.resourceRefused, "the identity provider of \"\(group.name)\" does not list token exchange (RFC 8693) in its discovery, the one way msso mints a token with fewer scopes (\(target)) without narrowing the session itself; remove `scopes` from the app's registration, or, if the provider offers the exchange unlisted, set `tokens = \"per-resource\"` and `token_request = \"exchange\"`")
            }
            return .exchange
        }
        if let configured = group.tokenRequest { return configured }
        return listed ? .exchange : .resource
    }

    /// The `resource` parameters a login sends: every entry of a per-resource group that asks
    /// by resource indicators (RFC 8707 §2: the refresh grant may then name any one of them).
    func loginResources(_ group: GroupConfig) async -> [(String, String)] {
        guard group.tokens == .perResource, let entries = group.resources?.entries,
              (try? await mintingMechanism(group, for: TokenTarget(resource: entries[0]))) == .resource else { return [] }
        return entries.map { ("resource", $0) }
    }

    public func mint(_ group: GroupConfig, target: TokenTarget, by mechanism: TokenRequest, refreshToken: String?,
                     accessToken: String, dpop: SigningKey?) async throws -> TokenSet {
        var form: [(String, String)]
        var rescue: IdPHTTP.Rescue?
        switch mechanism {
        case .resource:
            guard var refreshToken else {
                throw BrokerError(.resourceRefused, "the identity provider of \"\(group.name)\" gave the session no refresh token, so msso cannot ask it for a token for \(target) (resource indicators need one); log in again, or use `token_request = \"exchange\"` if the provider offers it")
            }
            // As a refresh: an earlier mssod's request may be spending this token already.
            if let elsewhere = await RescuedRefresh.answerElsewhere(group, spending: refreshToken, within: requestTimeout + IdPHTTP.grace),
               let rotated = try await keptTokens(elsewhere.body, askedAt: elsewhere.askedAt, group: group).refreshToken {
                logger.notice("took the refresh token of a request an earlier mssod had under way", metadata: ["group": "\(group.name)"])
                refreshToken = rotated
            }
            form = [("grant_type", "refresh_token"), ("refresh_token", refreshToken)]
            rescue = RescuedRefresh.rescue(group, spent: refreshToken, at: Date().timeIntervalSince1970, minting: true)
        case .exchange:
            form = [("grant_type", Self.tokenExchange), ("subject_token", accessToken), ("subject_token_type", Self.accessTokenType),
                    ("requested_token_type", Self.accessTokenType)]
        }
        let asked = target.resource.flatMap { group.audiences[$0] }
        if let resource = target.resource { form.append(("resource", resource)) }
        if let asked { form.append(("audience", asked)) }
        if let scopes = target.scopes { form.append(("scope", scopes.joined(separator: " "))) }
        let how = mechanism == .resource ? "resource indicators (RFC 8707)" : "token exchange (RFC 8693)"
        let outcome: Exchange
        do {
            outcome = try await exchange(try await discover(group).token, group: group, dpop: dpop, rescue: rescue, form: form)
        } catch {
            throw IdPBusy(error)
        }
        switch outcome {
        case .answered(let body):
            var tokens = try await refreshedTokens(body, group: group, dpop: dpop != nil)
            if mechanism == .exchange { tokens.refreshToken = nil } // the session's stays the session's
            let claims = await claims(of: tokens.accessToken, group: group, needed: target.resource != nil || (target.scopes != nil && tokens.scope == nil))
            if let wanted = target.scopes, let granted = (tokens.scope ?? claims?.scope)?.split(separator: " ").map(String.init),
               let beyond = granted.first(where: { !wanted.contains($0) }) {
                throw BrokerError(.resourceRefused, "the identity provider of \"\(group.name)\" answered a request for a token with the scopes \(wanted.joined(separator: " ")) by \(how) with one that also has \"\(TerminalText.safe(String(beyond.prefix(200))))\", so msso does not hand it out; the provider does not narrow scopes this way")
            }
            if let resource = target.resource, let named = claims?.aud, !named.contains(asked ?? resource) {
                // A provider that ignores `resource` answers with a token for everywhere: not one to send to one server.
                throw BrokerError(.resourceRefused, "the identity provider of \"\(group.name)\" answered a request for a token for \(resource)\(asked.map { " (audience \"\($0)\")" } ?? "") by \(how) with one for \(named.map { "\"\(TerminalText.safe(String($0.prefix(200))))\"" }.joined(separator: ", ")), so msso does not send it there; if the provider knows the server by another name, give it in [groups.\"\(group.name)\".audiences], else try `token_request = \"\(mechanism == .resource ? "exchange" : "resource")\"` or `tokens = \"shared\"`")
            }
            return tokens
        // As a refresh's: the IdP refuses the refresh token (glewlwyd with a bare 400): the session is over.
        case .refused(let error) where mechanism == .resource
                && (error.code == "invalid_grant" || (error.code.isEmpty && (error.status == 400 || error.status == 401))):
            throw BrokerError(.expired, "the identity provider of \"\(group.name)\" ended the session; run `msso login --group \(group.name)`")
        case .refused(let error) where error.code == "invalid_target" || error.code == "invalid_scope" || error.code == "invalid_request"
                                    || error.code == "unauthorized_client" || error.code == "unsupported_grant_type" || error.code == "invalid_grant":
            let narrowed = mechanism == .resource && error.code == "invalid_target"
                ? " A refresh token names the servers its login asked for: a password login's may name none (glewlwyd ignores `resource` on the password grant: log in with `msso login` or `--browser`), and a provider may have narrowed it to the server it minted for last (glewlwyd does with one-use refresh tokens, django-oauth-toolkit always: let its refresh tokens be used more than once, or use `token_request = \"exchange\"`)." : ""
            throw BrokerError(.resourceRefused, "the identity provider of \"\(group.name)\" refused a token for \(target) by \(how) (\(error.code)); the session is kept.\(narrowed)\(error.said)")
        case .refused(let error):
            throw IdPBusy(Self.refusal(error, group: group, doing: "mint a token for \(target)", grant: mechanism == .resource ? "refresh token" : "token exchange"))
        case .unavailable(let error, let retryAfter):
            throw IdPBusy(error, retryAfter: retryAfter)
        }
    }

    /// Whom a minted token is for (`aud`) and its scopes: read from a JWT, else asked of the
    /// provider's introspection endpoint (RFC 7662, as the client); nil when neither says, which
    /// msso then cannot check (a provider that ignores `resource` and issues opaque tokens
    /// without introspection goes unnoticed: docs/SECURITY.md).
    func claims(of token: String, group: GroupConfig, needed: Bool) async -> Claims? {
        guard needed else { return nil }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        if parts.count == 3, parts[1].utf8.count <= 16384, let payload = JOSEBase64.decode(parts[1]),
           let claims = try? JSONDecoder().decode(Claims.self, from: payload), claims.aud != nil || claims.scope != nil {
            return claims
        }
        guard let endpoint = try? await discover(group).introspection,
              case .answered(let body)? = try? await exchange(endpoint, group: group, form: [("token", token), ("token_type_hint", "access_token")]),
              var answer = try? JSONDecoder().decode(Claims.self, from: body) else { return nil }
        if answer.active == false { answer.aud = [] } // not a token anyone would take
        return answer
    }

    /// `aud` (a string or a list) and `scope` of a JWT's claims or an introspection's answer.
    struct Claims: Decodable {
        var aud: [String]?
        var scope: String?
        var active: Bool?
        enum CodingKeys: CodingKey { case aud, scope, active }
        init(from decoder: Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            if let one = try? c.decode(String.self, forKey: .aud) { aud = [one] } else { aud = try? c.decode([String].self, forKey: .aud) }
            scope = (try? c.decode(String.self, forKey: .scope)).map { String($0.prefix(4096)) }
            active = try? c.decode(Bool.self, forKey: .active)
        }
    }
}
