import FoundationEssentials
import MSSOCore
import MSSOProtocol
import MSSOSigning

/// Tokens minted from a session for one server (`tokens = "per-resource"`) or one app's scopes:
/// RFC 8707 resource indicators on the refresh grant, or RFC 8693 token exchange.
extension OpenIDProvider {
    static let tokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"
    static let accessTokenType = "urn:ietf:params:oauth:token-type:access_token"

    public func mintingMechanism(_ group: GroupConfig, for target: TokenTarget) async throws(BrokerError) -> TokenRequest {
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
        // Not "neither": discovery documents leave out grants they serve (glewlwyd lists no
        // refresh_token grant), so a login without a refresh token is what says so (Broker.login).
        return listed ? .exchange : .resource
    }

    /// The `resource` parameters a login sends: every entry of a per-resource group that asks
    /// by resource indicators (RFC 8707 §2: the refresh grant may then name any one of them).
    /// A discovery that fails fails the login: it must not go out without the resources.
    func loginResources(_ group: GroupConfig) async throws(BrokerError) -> [(String, String)] {
        guard group.tokens == .perResource, let entries = group.resources?.entries,
              try await mintingMechanism(group, for: TokenTarget(resource: entries[0])) == .resource else { return [] }
        return entries.filter { group.resourceScopes[$0] == nil }.map { ("resource", $0) }
    }

    /// How a server of `resources` is named to the provider: by the scope of
    /// `[groups."NAME".resource_scopes]` (sent in place of `resource` and `audience`), else by
    /// the `audience` of `[groups."NAME".audiences]` beside its `resource`; and the audience its
    /// token must then carry: the `audiences` entry, else the scope's server (the scope without
    /// its last segment, Entra's `api://app/.default` → `api://app`), else the entry itself.
    static func serverNames(_ group: GroupConfig, _ resource: String) -> (scope: String?, audience: String?, expected: String) {
        let scope = group.resourceScopes[resource], audience = group.audiences[resource]
        let server = scope.map { scope in
            guard scope.contains("://"), let slash = scope.lastIndex(of: "/"),
                  scope[..<slash].hasSuffix("/") == false, scope[..<slash].contains("://") else { return scope }
            return String(scope[..<slash])
        }
        return (scope, audience, audience ?? server ?? resource)
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
            if let elsewhere = await RescuedRefresh.answerElsewhere(group, rescueScope, spending: refreshToken, within: requestTimeout + IdPHTTP.grace),
               let rotated = try await keptTokens(elsewhere.body, askedAt: elsewhere.askedAt, group: group).refreshToken {
                logger.notice("took the refresh token of a request an earlier mssod had under way", metadata: ["group": "\(group.name)"])
                refreshToken = rotated
            }
            form = [("grant_type", "refresh_token"), ("refresh_token", refreshToken)]
            rescue = RescuedRefresh.rescue(group, rescueScope, spent: refreshToken, at: Date().timeIntervalSince1970, minting: true)
        case .exchange:
            form = [("grant_type", Self.tokenExchange), ("subject_token", accessToken), ("subject_token_type", Self.accessTokenType),
                    ("requested_token_type", Self.accessTokenType)]
        }
        let named = target.resource.map { Self.serverNames(group, $0) }
        if let resource = target.resource, named?.scope == nil { form.append(("resource", resource)) }
        if let audience = named?.audience, named?.scope == nil { form.append(("audience", audience)) }
        switch (target.scopes, named?.scope) {
        case (let scopes?, let scope?):
            throw BrokerError(.configInvalid, "\(target) is named by the scope \"\(scope)\" in [groups.\"\(group.name)\".resource_scopes] and the app's registration names scopes of its own: msso cannot ask for both in one scope; remove `scopes` from the registration, or name the server by `audiences` instead (\(scopes.joined(separator: " ")))")
        case (let scopes?, nil): form.append(("scope", scopes.joined(separator: " ")))
        case (nil, let scope?): form.append(("scope", scope))
        case (nil, nil): break
        }
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
            if let problem = await refusal(of: tokens, for: target, audience: named.flatMap { $0.expected == target.resource ? nil : $0.expected }, how: how, mechanism: mechanism, group: group) {
                // Not handed out; but a refresh token the provider rotated is the session's now.
                throw MintRefused(error: problem, refreshToken: tokens.refreshToken)
            }
            return tokens
        // As a refresh's: the IdP refuses the refresh token (glewlwyd with a bare 400): the session is over.
        case .refused(let error) where mechanism == .resource
                && (error.code == "invalid_grant" || (error.code.isEmpty && (error.status == 400 || error.status == 401))):
            throw BrokerError(.expired, "the identity provider of \"\(group.name)\" ended the session; run `msso login --group \(group.name)`")
        case .refused(let error) where error.code == "invalid_target" || error.code == "invalid_scope" || error.code == "invalid_request"
                                    || error.code == "unauthorized_client" || error.code == "unsupported_grant_type" || error.code == "invalid_grant":
            let narrowed = mechanism == .resource && error.code == "invalid_target"
                ? " A refresh token names the servers its login asked for: a password login's may name none (glewlwyd ignores `resource` on the password grant: log in with `msso login` or `--browser`), and a provider may have narrowed it to the server it minted for last: glewlwyd does with one-use refresh tokens (let them be used more than once), django-oauth-toolkit whenever it rotates them (its default; without rotation each token it mints ends the one it minted before, so with it use `tokens = \"shared\"`); a provider that offers token exchange mints without narrowing (`token_request = \"exchange\"`)." : ""
            throw BrokerError(.resourceRefused, "the identity provider of \"\(group.name)\" refused a token for \(target) by \(how) (\(error.code)); the session is kept.\(narrowed)\(error.said)")
        case .refused(let error):
            throw IdPBusy(Self.refusal(error, group: group, doing: "mint a token for \(target)", grant: mechanism == .resource ? "refresh token" : "token exchange"))
        case .unavailable(let error, let retryAfter):
            throw IdPBusy(error, retryAfter: retryAfter)
        }
    }

    /// Why msso does not hand out the token a mint got, or nil. For a server, the token's audience
    /// must name it (or its `audiences` name): read from the JWT, else from the provider's
    /// introspection (RFC 7662, as the client); a token that names none there is refused, and only
    /// an opaque token from a provider without introspection goes unchecked (docs/SECURITY.md). For
    /// an app's scopes, no scope beyond them in the answer, the JWT (`scope`, `scp`) or the
    /// introspection; none said at all is the scopes asked for (RFC 8693 §2.2.1).
    func refusal(of tokens: TokenSet, for target: TokenTarget, audience asked: String?, how: String, mechanism: TokenRequest,
                 group: GroupConfig) async -> BrokerError? {
        let idp = "the identity provider of \"\(group.name)\""
        var facts = Self.jwtClaims(tokens.accessToken)
        let opaque = facts == nil
        if (target.resource != nil && facts?.aud == nil) || (target.scopes != nil && tokens.scope == nil && facts?.scopes == nil) {
            if let introspected = await introspection(of: tokens.accessToken, group: group) {
                if introspected.active == false {
                    return BrokerError(.resourceRefused, "\(idp) says the token it just minted for \(target) by \(how) is not active; msso does not hand it out")
                }
                facts = Claims(aud: facts?.aud ?? introspected.aud, scopes: (facts?.scopes ?? []).union(introspected.scopes ?? []), active: true)
            }
        }
        if let wanted = target.scopes {
            var granted = facts?.scopes ?? []
            for scope in (tokens.scope ?? "").split(separator: " ") { granted.insert(String(scope)) }
            if let beyond = granted.sorted().first(where: { !wanted.contains($0) }) {
                return BrokerError(.resourceRefused, "\(idp) answered a request for a token with the scopes \(wanted.joined(separator: " ")) by \(how) with one that also has \"\(TerminalText.safe(String(beyond.prefix(200))))\", so msso does not hand it out; the provider does not narrow scopes this way")
            }
        }
        if let resource = target.resource {
            let wanted = asked ?? resource
            let what = "a token for \(resource)\(asked.map { " (audience \"\($0)\")" } ?? "") by \(how)"
            guard let named = facts?.aud else {
                if opaque, (try? await introspectionEndpoint(group)) == nil { return nil } // nothing to ask: said in SECURITY.md
                return BrokerError(.resourceRefused, "\(idp) answered a request for \(what) with one that names no audience, so any server would take it and msso does not hand it out; use `tokens = \"shared\"` with this provider")
            }
            if !named.contains(wanted) {
                return BrokerError(.resourceRefused, "\(idp) answered a request for \(what) with one for \(named.map { "\"\(TerminalText.safe(String($0.prefix(200))))\"" }.joined(separator: ", ")), so msso does not send it there; if the provider knows the server by another name, give it in [groups.\"\(group.name)\".audiences], else try `token_request = \"\(mechanism == .resource ? "exchange" : "resource")\"` or `tokens = \"shared\"`")
            }
            // A token for this server alone: one that another entry's server would take too is
            // not (found by an outside test: ["git", "kubernetes"] was handed out as git's).
            let others = (group.resources?.entries ?? []).filter { $0 != resource }.map { Self.serverNames(group, $0).expected }
            if let shared = named.first(where: { $0 != wanted && others.contains($0) }) {
                return BrokerError(.resourceRefused, "\(idp) answered a request for \(what) with one that \"\(TerminalText.safe(String(shared.prefix(200))))\", another entry of the group's `resources`, takes too, so msso does not hand it out (a token for one server must open no other); ask the provider for one audience per token, or use `tokens = \"shared\"`")
            }
        }
        return nil
    }

    /// The claims of a JWT access token, nil for a token that is not one (opaque).
    static func jwtClaims(_ token: String) -> Claims? {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[1].utf8.count <= 16384, let payload = JOSEBase64.decode(parts[1]) else { return nil }
        return try? JSONDecoder().decode(Claims.self, from: payload)
    }

    /// The provider's RFC 7662 answer on `token`, asked as the client; nil when it offers none or
    /// does not answer.
    func introspection(of token: String, group: GroupConfig) async -> Claims? {
        guard let endpoint = try? await introspectionEndpoint(group),
              case .answered(let body)? = try? await exchange(endpoint, group: group, form: [("token", token), ("token_type_hint", "access_token")]) else {
            return nil
        }
        return try? JSONDecoder().decode(Claims.self, from: body)
    }

    /// What a JWT's claims or an introspection's answer say of a token: `aud` (a string or a list;
    /// anything else is none), its scopes (`scope`, space-separated, and `scp`, a string or a
    /// list: providers write either), and `active`.
    struct Claims: Decodable {
        var aud: [String]?
        var scopes: Set<String>?
        var active: Bool?
        enum CodingKeys: CodingKey { case aud, scope, scp, active }
        init(aud: [String]?, scopes: Set<String>?, active: Bool?) {
            (self.aud, self.scopes, self.active) = (aud, scopes, active)
        }
        init(from decoder: Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            aud = Self.strings(c, .aud)
            let listed = (Self.strings(c, .scope) ?? []).flatMap { $0.split(separator: " ").map(String.init) } + (Self.strings(c, .scp) ?? [])
            scopes = c.contains(.scope) || c.contains(.scp) ? Set(listed.prefix(256)) : nil
            active = try? c.decode(Bool.self, forKey: .active)
        }
        static func strings(_ c: KeyedDecodingContainer<CodingKeys>, _ key: CodingKeys) -> [String]? {
            if let one = try? c.decode(String.self, forKey: key) { return [String(one.prefix(4096))] }
            return (try? c.decode([String].self, forKey: key)).map { Array($0.prefix(256)) }
        }
    }
}
