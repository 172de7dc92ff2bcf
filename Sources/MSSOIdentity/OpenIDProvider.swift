import Crypto
import FoundationEssentials
import Logging
import MSSOCore
import MSSOProtocol
import MSSOSigning
import Synchronization

/// An OpenID Connect provider: discovery, password grant, device authorization grant (RFC 8628),
/// authorization code with PKCE and a loopback redirect (RFC 7636, 8252), refresh with rotation,
/// revocation (RFC 7009), DPoP proofs on token requests (RFC 9449).
///
/// Every request is bounded in time and size; errors become `BrokerError`s whose sentences carry
/// the IdP's error code but never a token, a password or a client secret. A refresh the IdP
/// cannot answer now (408, 429, 5xx, no answer) is ``IdPBusy``, so the session is kept; only an
/// explicit refusal (`invalid_grant`, or a bare 400/401 as glewlwyd sends) ends it.
public final class OpenIDProvider: IdentityProvider {
    private let http: IdPHTTP
    /// Names this daemon's kept answers apart from another's of the same uid (``RescuedRefresh``).
    let rescueScope: String
    let logger: Logger
    let requestTimeout: Double
    private let revokeTimeout: Double
    /// Discovery documents by everything that decided their fetch (``IdPRoute``: issuer, CA,
    /// proxy, admin or not), never by issuer alone: a user's group naming an administrator's
    /// issuer, with a CA and a proxy of its choosing, gets a document of its own.
    private let discoveries = Mutex([IdPRoute: (endpoints: IdPEndpoints, fetched: Double)]())
    /// Revocation endpoints found in OAuth metadata (RFC 8414) for providers whose discovery
    /// names none, by route like discovery; nil inside when the metadata names none either.
    /// The endpoints of each provider's OAuth metadata (RFC 8414) that its discovery left out.
    private let metadataEndpoints = Mutex([IdPRoute: (revocation: URL?, introspection: URL?, fetched: Double)]())
    /// The providers' published keys (JWKS), per route like discovery.
    private let keySets = Mutex([IdPRoute: (keys: JSONWebKeySet, fetched: Double)]())
    /// The newest DPoP nonce each token endpoint's origin asked for, per route.
    private let dpopNonces = Mutex([NonceKey: String]())

    struct NonceKey: Hashable {
        var route: IdPRoute
        var origin: String
    }

    /// A discovery document (and a key set) is fetched again after this many seconds.
    static let discoveryLifetime: Double = 3600

    /// Where the groups' own keys are (the keyring): a `private_key_jwt` group without `client_key`
    /// signs its client assertions with its key.
    private let keys: (any KeyStore)?

    public init(logger: Logger, requestTimeout: Double = 10, revokeTimeout: Double = 3,
                environment: [String: String] = [:], keys: (any KeyStore)? = nil) {
        http = IdPHTTP(environment: environment)
        rescueScope = RescuedRefresh.scope(stateDirectory: Configuration.stateDirectory(environment: environment))
        self.keys = keys
        self.logger = logger
        self.requestTimeout = requestTimeout
        self.revokeTimeout = revokeTimeout
    }

    /// Ends the requests to identity providers under way (before the process ends): their mssod-idp
    /// helpers are killed, but for those whose answer is kept (``IdPHTTP/shutdown()``).
    public func shutdown() async {
        await http.shutdown()
    }

    // MARK: IdentityProvider

    public func passwordLogin(_ group: GroupConfig, username: String, password: String, dpop: SigningKey?) async throws(BrokerError) -> TokenSet {
        let endpoints = try await discover(group)
        switch try await post(endpoints.token, group: group, dpop: dpop, form: [
            ("grant_type", "password"), ("username", username), ("password", password),
            ("scope", group.scopes.joined(separator: " ")),
        ] + (try await loginResources(group))) {
        case .success(let body): return try await loginTokens(body, group: group, dpop: dpop != nil, nonce: nil, typed: username)
        // Some IdPs (glewlwyd) refuse a user with a bare 403 instead of `invalid_grant`.
        case .failure(let error) where error.code == "invalid_grant" || (error.code.isEmpty && error.bare && error.status == 403):
            throw BrokerError(.invalidCredentials, "the identity provider of \"\(group.name)\" refused the username or password.\(error.said)")
        case .failure(let error): throw Self.refusal(error, group: group, doing: "log in", grant: "password")
        }
    }

    public func deviceLogin(_ group: GroupConfig, dpop: SigningKey?, prompt: @Sendable (DevicePrompt) -> Void) async throws(BrokerError) -> TokenSet {
        let endpoints = try await discover(group)
        guard let endpoint = endpoints.deviceAuthorization else {
            throw BrokerError(.badRequest, "the identity provider of \"\(group.name)\" does not offer device login; use `msso login --username` or `--browser`")
        }
        let start: DeviceAuthorization
        switch try await post(endpoint, group: group, form: [("scope", group.scopes.joined(separator: " "))] + (try await loginResources(group))) {
        case .success(let body): start = try decode(DeviceAuthorization.self, body, group)
        case .failure(let error): throw Self.refusal(error, group: group, doing: "start a device login", grant: "device authorization")
        }
        let expiresAt = Date().timeIntervalSince1970 + start.lifetime
        prompt(DevicePrompt(verificationURI: start.verification_uri, verificationURIComplete: start.verification_uri_complete,
                            userCode: start.user_code, expiresAt: expiresAt))
        var interval = start.pollInterval
        while Date().timeIntervalSince1970 < expiresAt {
            do { try await Task.sleep(nanoseconds: UInt64(interval * 1_000_000_000)) } catch {
                throw BrokerError(.loginDenied, "the device login was cancelled: the program that asked for it has gone")
            }
            switch try await post(endpoints.token, group: group, dpop: dpop, form: [
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", start.device_code),
            ]) {
            case .success(let body): return try await loginTokens(body, group: group, dpop: dpop != nil, nonce: nil)
            case .failure(let error) where error.code == "authorization_pending": continue
            case .failure(let error) where error.code == "slow_down": interval = min(interval + 5, 60) // RFC 8628 §3.5
            case .failure(let error) where error.code == "access_denied":
                throw BrokerError(.loginDenied, "the device login for \"\(group.name)\" was denied")
            case .failure(let error) where error.code == "expired_token":
                throw BrokerError(.loginDenied, "the device code for \"\(group.name)\" expired before it was approved; run `msso login` again")
            case .failure(let error): throw Self.refusal(error, group: group, doing: "finish the device login", grant: "device code")
            }
        }
        throw BrokerError(.loginDenied, "the device code for \"\(group.name)\" expired before it was approved; run `msso login` again")
    }

    public func browserLogin(_ group: GroupConfig, dpop: SigningKey?, prompt: @Sendable (BrowserPrompt) -> Void) async throws(BrokerError) -> TokenSet {
        let endpoints = try await discover(group)
        guard let authorization = endpoints.authorization, let redirect = URLComponents(string: group.redirectURI) else {
            throw BrokerError(.badRequest, "the identity provider of \"\(group.name)\" offers no browser login; use `msso login` (device) instead")
        }
        let verifier = Self.random(32), state = Self.random(16), nonce = Self.random(16)
        let listener = try await LoopbackRedirect.start(port: redirect.port ?? 0, path: redirect.path, state: state)
        // The redirect URI sent must match the registered one exactly, port included.
        let redirectURI = "http://127.0.0.1:\(listener.port)\(redirect.path)"
        var url = URLComponents(url: authorization, resolvingAgainstBaseURL: false)!
        url.queryItems = (url.queryItems ?? []) + [
            URLQueryItem(name: "response_type", value: "code"), URLQueryItem(name: "client_id", value: group.clientID),
            URLQueryItem(name: "redirect_uri", value: redirectURI), URLQueryItem(name: "scope", value: group.scopes.joined(separator: " ")),
            URLQueryItem(name: "state", value: state), URLQueryItem(name: "nonce", value: nonce),
            URLQueryItem(name: "code_challenge", value: Base64URL.encode(Data(SHA256.hash(data: Data(verifier.utf8))))),
            URLQueryItem(name: "code_challenge_method", value: "S256"),
        ] + (group.effectivePrompt.map { [URLQueryItem(name: "prompt", value: $0)] } ?? [])
          + (try await loginResources(group)).map { URLQueryItem(name: $0.0, value: $0.1) }
        do {
            try await checkAuthorizationRequest(url.url!, group: group, redirectURI: redirectURI)
        } catch {
            await listener.close()
            throw error
        }
        prompt(BrowserPrompt(url: url.url!.absoluteString, expiresAt: Date().timeIntervalSince1970 + group.browserTimeout))
        let callback = await listener.wait(timeout: group.browserTimeout)
        await listener.close()
        guard let callback else {
            if Task.isCancelled { throw BrokerError(.loginDenied, "the browser login was cancelled: the program that asked for it has gone") }
            // A provider that does not know the redirect URI shows an error page and never sends
            // the browser back (it must not: RFC 6749 §4.1.2.1), so the wait is all msso sees.
            throw BrokerError(.loginDenied, "no answer from the browser within \(SessionDuration.format(group.browserTimeout)); if the identity provider showed an error page instead of sending you back, it most likely does not accept redirect_uri \(redirectURI) for client \"\(group.clientID)\": register exactly that URI at the IdP, or set `redirect_uri` in the config to the one registered; else run `msso login --browser` again")
        }
        if let error = callback["error"] {
            throw BrokerError(.loginDenied, "the identity provider of \"\(group.name)\" refused the browser login (\(error.prefix(64)))")
        }
        guard let code = callback["code"] else {
            throw BrokerError(.loginDenied, "the browser came back without an authorization code")
        }
        switch try await post(endpoints.token, group: group, dpop: dpop, form: [
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI), ("code_verifier", verifier),
        ] + (try await loginResources(group))) {
        case .success(let body): return try await loginTokens(body, group: group, dpop: dpop != nil, nonce: nonce)
        case .failure(let error): throw Self.refusal(error, group: group, doing: "finish the browser login", grant: "authorization code")
        }
    }

    /// Asks the authorization endpoint, before the user is sent there, what the browser would be
    /// shown: a provider that refuses the request outright (an unknown redirect URI or client)
    /// answers with an error page (400; glewlwyd: a bare 403), and never sends the browser back.
    /// Saying so now spares the user a wait that could only end in a timeout. Any other answer (a
    /// login page, a redirect to one) or none at all is left to the browser.
    private func checkAuthorizationRequest(_ url: URL, group: GroupConfig, redirectURI: String) async throws(BrokerError) {
        guard let answer = try? await http.send(url, method: .get, headers: [("Accept", "text/html, application/json")], body: nil,
                                                route: IdPRoute(group), timeout: min(requestTimeout, 5)),
              answer.status == 400 || answer.status == 403 else { return }
        let page = String(decoding: answer.body.prefix(65536), as: UTF8.self)
        let said = (try? JSONDecoder().decode(OAuthErrorBody.self, from: Data(page.utf8))).flatMap { OAuthError.shown($0.error_description ?? $0.error) }
            .map { " The identity provider said: \"\($0)\"." } ?? ""
        let idp = "the identity provider of \"\(group.name)\""
        if page.lowercased().contains("redirect") {
            throw BrokerError(.configInvalid, "\(idp) refused the browser login's request (HTTP \(answer.status)) and speaks of its redirect URI: it does not accept redirect_uri \(redirectURI) for client \"\(group.clientID)\"; register exactly that URI at the IdP, or set `redirect_uri` in the config to the one registered.\(said)")
        }
        throw BrokerError(.configInvalid, "\(idp) refused the browser login's request (HTTP \(answer.status)) before the browser was opened; check client_id \"\(group.clientID)\", `scopes`, and that redirect_uri \(redirectURI) is registered for the client.\(said)")
    }

    /// A login's tokens, once its ID token, when the provider sent one, is found to be the
    /// provider's for this client and this login (OpenID Connect Core §3.1.3.7): the name shown
    /// comes from it (``IDTokenClaims/displayName``, else the name `typed` at a password login,
    /// else `sub` when it can be shown at all), and a token that fails stores no session. A
    /// provider that sends none (an OAuth-only password grant) leaves the name to the broker.
    private func loginTokens(_ body: Data, group: GroupConfig, dpop: Bool, nonce: String?, typed: String? = nil) async throws(BrokerError) -> TokenSet {
        let response = try decode(TokenResponse.self, body, group)
        var tokens = try response.tokens(group: group, dpop: dpop)
        if let idToken = response.id_token {
            let claims = try await verifiedClaims(idToken, group: group, nonce: nonce)
            tokens.username = claims.displayName ?? typed ?? (IDTokenClaims.isDisplayable(claims.subject) ? claims.subject : nil)
            tokens.subject = claims.subject
            tokens.claims = claims.strings
        } else if nonce != nil, group.scopes.contains("openid") {
            // OpenID Connect Core §3.1.3.3: the code flow's answer carries an ID token. Without
            // it, nothing ties the tokens to this login (the nonce is in the ID token alone).
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" finished the browser login without an ID token, which OpenID Connect requires: refusing the tokens, since nothing ties them to this login; if the provider is OAuth only, remove \"openid\" from `scopes`")
        }
        return tokens
    }

    /// The claims of a valid ID token; the error that says why it is not one.
    private func verifiedClaims(_ idToken: String, group: GroupConfig, nonce: String?) async throws(BrokerError) -> IDTokenClaims {
        let jwksURL = try await discover(group).jwks
        // HS256/384/512 tokens are keyed with the client secret (OpenID Connect Core §10.1).
        let secret = group.clientSecret == .none ? nil : try? clientSecret(group)
        func validate(_ keys: JSONWebKeySet) throws(IDTokenError) -> IDTokenClaims {
            try IDToken.validate(idToken, keys: keys, issuer: group.issuer, clientID: group.clientID, nonce: nonce,
                                 clientSecret: secret, now: Date().timeIntervalSince1970)
        }
        let known = try await keySet(group, at: jwksURL, fresh: false)
        do {
            return try validate(known.keys)
        } catch where error.isUnknownKey && !known.fetchedNow {
            // The provider may have rotated its keys since they were fetched: once more, anew
            // (at most once per login, so a token naming unknown keys cannot make msso fetch in a loop).
        } catch {
            throw error.brokerError(group: group)
        }
        let fetchedAgain = try await keySet(group, at: jwksURL, fresh: true)
        do { return try validate(fetchedAgain.keys) } catch { throw error.brokerError(group: group) }
    }

    /// The provider's published keys (`jwks_uri`), cached per route like discovery (`fresh`: fetched
    /// now whatever is cached), and whether they were fetched just now. No `jwks_uri`: no keys.
    private func keySet(_ group: GroupConfig, at url: URL?, fresh: Bool) async throws(BrokerError) -> (keys: JSONWebKeySet, fetchedNow: Bool) {
        guard let url else { return (JSONWebKeySet(keys: []), true) }
        let route = IdPRoute(group), now = Date().timeIntervalSince1970
        if !fresh, let known = keySets.withLock({ $0[route] }), now - known.fetched < Self.discoveryLifetime {
            return (known.keys, false)
        }
        let answer = try await send(url, group: group, method: .get, headers: [("Accept", "application/json")], body: nil)
        guard answer.status == 200 else {
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" did not give its keys at \(url.absoluteString.prefix(200)) (HTTP \(answer.status)), so its ID token cannot be checked; try again later")
        }
        let keys: JSONWebKeySet
        do { keys = try JSONWebKeySet(json: Data(answer.body)) } catch { throw error.brokerError(group: group) }
        keySets.withLock { $0[route] = (keys, now) }
        return (keys, true)
    }

    /// `bytes` random bytes, base64url: PKCE verifiers (43 characters from 32 bytes), states, nonces.
    static func random(_ bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return Base64URL.encode(Data((0..<bytes).map { _ in UInt8.random(in: 0...255, using: &generator) }))
    }

    public func refresh(_ group: GroupConfig, refreshToken: String, dpop: SigningKey?) async throws -> TokenSet {
        // The token may be being spent already, by the request of a mssod that died or stopped
        // (its mssod-idp goes on): its answer is this refresh's, for spending it twice would end
        // the session at a provider that rotates refresh tokens.
        var refreshToken = refreshToken
        if let elsewhere = await RescuedRefresh.answerElsewhere(group, rescueScope, spending: refreshToken, within: requestTimeout + IdPHTTP.grace) {
            logger.notice("took the answer of a refresh an earlier mssod had under way", metadata: ["group": "\(group.name)"])
            let kept = try await keptTokens(elsewhere.body, askedAt: elsewhere.askedAt, group: group)
            // A mint's answer: its access token is for one server, its refresh token is the one to spend.
            guard elsewhere.minted, let rotated = kept.refreshToken else { return kept }
            refreshToken = rotated
        }
        let outcome: Exchange
        do {
            // Its answer is kept where it outlives this process until the broker has stored it.
            let rescue = RescuedRefresh.rescue(group, rescueScope, spent: refreshToken, at: Date().timeIntervalSince1970)
            outcome = try await exchange(try await discover(group).token, group: group, dpop: dpop, rescue: rescue, form: [
                ("grant_type", "refresh_token"), ("refresh_token", refreshToken),
            ])
        } catch {
            throw IdPBusy(error) // no answer, a redirect, a discovery that failed: nothing said about the session
        }
        switch outcome {
        case .answered(let body):
            return try await refreshedTokens(body, group: group, dpop: dpop != nil)
        // The IdP refuses the refresh token: the session is over. glewlwyd says so with a bare 400.
        case .refused(let error) where error.code == "invalid_grant" || (error.code.isEmpty && (error.status == 400 || error.status == 401)):
            throw BrokerError(.expired, "the identity provider of \"\(group.name)\" ended the session; run `msso login --group \(group.name)`")
        case .refused(let error):
            // Any other refusal says nothing about the user's session either: keep it, and retry.
            throw IdPBusy(Self.refusal(error, group: group, doing: "refresh the access token", grant: "refresh token"))
        case .unavailable(let error, let retryAfter):
            throw IdPBusy(error, retryAfter: retryAfter) // 408, 429, 5xx
        }
    }

    /// The tokens of a refresh's answer (200).
    func refreshedTokens(_ body: Data, group: GroupConfig, dpop: Bool) async throws(BrokerError) -> TokenSet {
        let response = try decode(TokenResponse.self, body, group)
        var tokens = try response.tokens(group: group, dpop: dpop)
        if let idToken = response.id_token {
            // Checked like a login's (no nonce): its `sub` must be the session's, which the broker
            // compares. One that fails is set aside, not fatal (some providers send the login's
            // own, expired, again), as an answer without one would be.
            do {
                tokens.subject = try await verifiedClaims(idToken, group: group, nonce: nil).subject
            } catch {
                logger.warning("the refresh's ID token is not used", metadata: ["group": "\(group.name)", "error": "\(error.message)"])
            }
        }
        return tokens
    }

    public func revoke(_ group: GroupConfig, token: String, hint: TokenKind) async -> Revocation {
        // One bound for all of it (looking for the endpoint included): a logout waits no longer.
        let deadline = Date().timeIntervalSince1970 + revokeTimeout
        let left = { max(0.001, deadline - Date().timeIntervalSince1970) }
        while true {
            do {
                guard let endpoint = try await revocationEndpoint(group, timeout: left) else { return .notOffered }
                switch try await post(endpoint, group: group, timeout: left(), form: [("token", token), ("token_type_hint", hint.rawValue)]) {
                case .success: return .revoked
                case .failure(let error):
                    logger.warning("revocation refused", metadata: ["group": "\(group.name)", "error": "\(error.code.prefix(64))", "status": "\(error.status)"])
                    let said = error.description.map { ": \"\($0)\"" } ?? ""
                    return .failed("the identity provider of \"\(group.name)\" refused to revoke the tokens (\(error.code.isEmpty ? "HTTP \(error.status)" : error.code))\(said)")
                }
            } catch where error.name == .busy && left() > 0.1 {
                // As many requests to the provider as may run at once are under way (a logout's own
                // revocations among them: found by an outside test, those past the cap were skipped
                // and their tokens left valid): wait for one to end, within the bound.
                try? await Task.sleep(nanoseconds: 25_000_000)
            } catch {
                logger.warning("revocation failed", metadata: ["group": "\(group.name)", "error": "\(error)"])
                return .failed(error.message)
            }
        }
    }

    /// The provider's RFC 7009 endpoint: from its OpenID discovery, else from its OAuth metadata
    /// (RFC 8414), which some providers alone fill in; nil when neither names one.
    func revocationEndpoint(_ group: GroupConfig, timeout: () -> Double) async throws(BrokerError) -> URL? {
        if let endpoint = try await discover(group).revocation { return endpoint }
        return try await metadata(group, timeout: timeout).revocation
    }

    /// The provider's RFC 7662 endpoint, found as ``revocationEndpoint(_:timeout:)`` is
    /// (django-oauth-toolkit names it in its OAuth metadata alone).
    func introspectionEndpoint(_ group: GroupConfig) async throws(BrokerError) -> URL? {
        if let endpoint = try await discover(group).introspection { return endpoint }
        let timeout = requestTimeout
        return try await metadata(group, timeout: { timeout }).introspection
    }

    private func metadata(_ group: GroupConfig, timeout: () -> Double) async throws(BrokerError) -> (revocation: URL?, introspection: URL?) {
        let route = IdPRoute(group), now = Date().timeIntervalSince1970
        if let known = metadataEndpoints.withLock({ $0[route] }), now - known.fetched < Self.discoveryLifetime {
            return (known.revocation, known.introspection)
        }
        var found: IdPEndpoints?
        for url in IdPEndpoints.metadataURLs(issuer: group.issuer) {
            let answer = try await send(url, group: group, method: .get, headers: [("Accept", "application/json")], body: nil, timeout: timeout())
            guard answer.status == 200 else { continue }
            // Held to discovery's rules: the same issuer, https (or loopback) endpoints.
            found = try IdPEndpoints(discovery: Data(answer.body), group: group, metadata: true)
            break
        }
        metadataEndpoints.withLock { $0[route] = (found?.revocation, found?.introspection, now) }
        return (found?.revocation, found?.introspection)
    }

    // MARK: Requests

    struct OAuthError: Error {
        var status: Int
        /// The OAuth error code (RFC 6749 §5.2), empty when the IdP sent none.
        var code: String
        /// Its body was empty (glewlwyd's refusal of a user), rather than a page of something
        /// else (a firewall's or a proxy's).
        var bare = false
        /// The provider's own words (`error_description`), control characters replaced and cut
        /// to ``maximumDescription`` bytes: shown to the user beside msso's sentence.
        var description: String? = nil

        static let maximumDescription = 300

        /// The provider's words as a sentence to append (" The identity provider said: …"), or "".
        var said: String { description.map { " The identity provider said: \"\($0)\"." } ?? "" }

        /// `text` as it may be shown: its lines joined, no control characters (``TerminalText``),
        /// at most ``maximumDescription`` bytes, nil when nothing is left.
        static func shown(_ text: String?) -> String? {
            guard let text else { return nil }
            let oneLine = String(String.UnicodeScalarView(text.unicodeScalars.map { "\t\n\r".unicodeScalars.contains($0) ? " " : $0 }))
            var out = ""
            for character in TerminalText.safe(oneLine) {
                guard out.utf8.count + character.utf8.count <= maximumDescription else { break }
                out.append(character)
            }
            let trimmed = out.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed()
            return trimmed.isEmpty ? nil : String(trimmed)
        }
    }

    /// How an IdP answered a form.
    enum Exchange {
        /// 200, with the body.
        case answered(Data)
        /// A 4xx (but 408 and 429): the IdP refused, with its error code.
        case refused(OAuthError)
        /// 408, 429, 5xx: it cannot answer now; maybe it said when to ask again.
        case unavailable(BrokerError, retryAfter: Double?)
    }

    /// ``exchange(_:group:timeout:dpop:form:)`` for a login or a revocation, where an IdP that
    /// cannot answer now is simply an error.
    private func post(_ url: URL, group: GroupConfig, timeout: Double? = nil, dpop: SigningKey? = nil,
                      form: [(String, String)]) async throws(BrokerError) -> Result<Data, OAuthError> {
        switch try await exchange(url, group: group, timeout: timeout, dpop: dpop, form: form) {
        case .answered(let body): return .success(body)
        case .refused(let error): return .failure(error)
        case .unavailable(let error, _): throw error
        }
    }

    /// POSTs a form to an endpoint with the group's client authentication. No answer at all, or a
    /// redirect, throws `IdPUnavailable`. With `dpop`, the request carries a DPoP proof; a
    /// `use_dpop_nonce` refusal is retried once with the nonce the IdP sent (RFC 9449 §8).
    func exchange(_ url: URL, group: GroupConfig, timeout: Double? = nil, dpop: SigningKey? = nil,
                          rescue: IdPHTTP.Rescue? = nil, form: [(String, String)]) async throws(BrokerError) -> Exchange {
        let first = try await exchange(url, group: group, timeout: timeout, dpop: dpop, rescue: rescue, form: form, attempt: 1)
        if case .refused(let error) = first, error.code == "use_dpop_nonce", dpop != nil {
            return try await exchange(url, group: group, timeout: timeout, dpop: dpop, rescue: rescue, form: form, attempt: 2)
        }
        return first
    }

    private func exchange(_ url: URL, group: GroupConfig, timeout: Double?, dpop: SigningKey?, rescue: IdPHTTP.Rescue?,
                          form: [(String, String)], attempt: Int) async throws(BrokerError) -> Exchange {
        var headers = [("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json")]
        let nonceKey = NonceKey(route: IdPRoute(group), origin: url.origin)
        if let dpop {
            let nonce = dpopNonces.withLock { $0[nonceKey] }
            guard let proof = try? DPoPProof.make(key: dpop, method: "POST", url: url, nonce: nonce) else {
                throw BrokerError(.internal, "could not make a DPoP proof")
            }
            headers.append(("DPoP", proof))
        }
        var fields = form
        switch try await discover(group).clientAuthentication(group) {
        case .clientSecretBasic:
            // RFC 6749 §2.3.1: both parts are form-encoded before they are joined and base64-encoded.
            let credentials = Self.formEncode(group.clientID) + ":" + Self.formEncode(try clientSecret(group))
            headers.append(("Authorization", "Basic " + Data(credentials.utf8).base64EncodedString()))
        case .clientSecretPost:
            fields += [("client_id", group.clientID), ("client_secret", try clientSecret(group))]
        case .privateKeyJWT:
            fields += [("client_id", group.clientID),
                       ("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"),
                       // The audience is the endpoint called (the token endpoint for a token, as
                       // OpenID Connect says; the revocation endpoint for a revocation, as Okta
                       // and glewlwyd require).
                       ("client_assertion", try ClientAssertion.make(group: group, key: try await clientKey(group), audience: url))]
        case .none:
            fields.append(("client_id", group.clientID))
        }
        let body = Array(fields.map { Self.formEncode($0.0) + "=" + Self.formEncode($0.1) }.joined(separator: "&").utf8)
        // What this request sent that must not come back in the provider's words (a hostile or
        // careless provider may echo a token in its error_description, which msso shows).
        var secrets = fields.filter { Self.secretFields.contains($0.0) }.map(\.1)
        if case .clientSecretBasic = try await discover(group).clientAuthentication(group) { secrets.append(try clientSecret(group)) }
        let answer = try await send(url, group: group, method: .post, headers: headers, body: body, timeout: timeout, rescue: rescue)
        if let nonce = answer.dpopNonce, nonce.utf8.count <= 1024 { dpopNonces.withLock { $0[nonceKey] = nonce } }
        let data = Data(answer.body)
        switch answer.status {
        case 200: return .answered(data) // RFC 7009: a revocation endpoint answers 200 with an empty body
        case 400..<500 where answer.status != 408 && answer.status != 429:
            let body = try? JSONDecoder().decode(OAuthErrorBody.self, from: data)
            let code = body?.error ?? ""
            let plausible = code.utf8.count <= 64 && code.utf8.allSatisfy { (97...122).contains($0) || $0 == UInt8(ascii: "_") }
            return .refused(OAuthError(status: answer.status, code: plausible ? code : "", bare: answer.body.allSatisfy { [9, 10, 13, 32].contains($0) },
                                       description: OAuthError.shown(Self.withoutSecrets(body?.error_description, sent: secrets))))
        default:
            let later = answer.retryAfter.map { " (it asks to wait \(Int(min($0, 86400))) s)" } ?? ""
            return .unavailable(BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" answered HTTP \(answer.status)\(later) at \(url.path.prefix(200))"),
                                retryAfter: answer.retryAfter)
        }
    }

    /// The form fields whose values are secrets.
    static let secretFields: Set<String> = ["refresh_token", "subject_token", "client_secret", "password", "client_assertion",
                                            "code", "code_verifier", "device_code", "token"]

    /// `text` with every secret of `sent` (at least 8 bytes: shorter ones are not tokens) cut out,
    /// and every run that looks like an encoded one: 20 or more characters of base64, base64url,
    /// hex or percent-encoding holding a digit (a second outside test had the provider echo the
    /// Basic credentials, and the request body in base64). Sentences, URLs and error codes stay.
    static func withoutSecrets(_ text: String?, sent: [String]) -> String? {
        guard var text else { return nil }
        for secret in sent where secret.utf8.count >= 8 { text = text.replacing(secret, with: "[a secret msso sent]") }
        func encoded(_ c: Character) -> Bool {
            c.isASCII && (c.isLetter || c.isNumber || "+=_-%".contains(c))
        }
        var out = "", run = ""
        func flush() {
            out += run.count >= 20 && run.contains(where: \.isNumber) ? "[…]" : run
            run = ""
        }
        for character in text {
            if encoded(character) { run.append(character) } else { flush(); out.append(character) }
        }
        flush()
        return out
    }

    /// One exchange, with the IdP's silence or a redirect said in words.
    private func send(_ url: URL, group: GroupConfig, method: IdPHTTP.Method, headers: [(String, String)], body: [UInt8]?,
                      timeout: Double? = nil, rescue: IdPHTTP.Rescue? = nil) async throws(BrokerError) -> IdPHTTP.Answer {
        let limit = timeout ?? requestTimeout
        let answer: IdPHTTP.Answer
        do {
            answer = try await http.send(url, method: method, headers: headers, body: body, route: IdPRoute(group), timeout: limit, rescue: rescue)
        } catch .timedOut(let answering) {
            if answering {
                throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" (\(group.issuer)) began to answer but did not finish within \(Int(limit)) s (it is slow or overloaded)")
            }
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" (\(group.issuer)) did not answer within \(Int(limit)) s; check your network and try again")
        } catch .untrusted(let why) {
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" (\(group.issuer)) could not be trusted: \(TerminalText.safe(String(why.prefix(200)))); if it uses a private CA, name it with `ca_file`; if a proxy on the way intercepts TLS, that proxy is the cause")
        } catch .tooLarge {
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" sent an answer over \(IdPHTTP.maximumBody / 1024) KiB at \(url.path.prefix(200)); refusing it")
        } catch .headersTooLarge {
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" sent headers over \(IdPHTTP.maximumHeaders / 1024) KiB at \(url.path.prefix(200)); refusing it")
        } catch .busy(let why) {
            throw BrokerError(.busy, "the request to the identity provider of \"\(group.name)\" was not sent: \(why); try again within \(Int(limit + IdPHTTP.grace)) s, when they have ended")
        } catch .local(let what) {
            throw BrokerError(.internal, "the request to the identity provider of \"\(group.name)\" could not be made: \(what)")
        } catch {
            // .unreachable, the one left
            let why = if case .unreachable(let words) = error { " (\(TerminalText.safe(String(words.prefix(200)))))" } else { "" }
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" (\(group.issuer)) could not be reached\(why); check your network and try again")
        }
        if (300..<400).contains(answer.status) {
            let target = answer.location.flatMap { URL(string: $0, relativeTo: url)?.origin } ?? "elsewhere"
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" redirected \(url.path.prefix(200)) to \(target.prefix(200)); msso follows no redirect from an IdP endpoint (credentials would go with it): fix the IdP or `issuer`")
        }
        return answer
    }

    func discover(_ group: GroupConfig) async throws(BrokerError) -> IdPEndpoints {
        let now = Date().timeIntervalSince1970
        let route = IdPRoute(group)
        if let known = discoveries.withLock({ $0[route] }), now - known.fetched < Self.discoveryLifetime { return known.endpoints }
        let endpoints = try await fetchDiscovery(group)
        discoveries.withLock { $0[route] = (endpoints, now) }
        return endpoints
    }

    /// The group's discovery document, fetched now and checked (no cache).
    func fetchDiscovery(_ group: GroupConfig) async throws(BrokerError) -> IdPEndpoints {
        let url = URL(string: group.issuer.hasSuffix("/") ? group.issuer + ".well-known/openid-configuration"
                                                        : group.issuer + "/.well-known/openid-configuration")!
        let answer = try await send(url, group: group, method: .get, headers: [("Accept", "application/json")], body: nil)
        guard answer.status == 200 else {
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" has no usable OpenID configuration at \(url.absoluteString) (HTTP \(answer.status)); check `issuer` in the config")
        }
        return try IdPEndpoints(discovery: Data(answer.body), group: group)
    }

    // MARK: Helpers

    private func decode<T: Decodable>(_ type: T.Type, _ body: Data, _ group: GroupConfig) throws(BrokerError) -> T {
        do {
            return try JSONDecoder().decode(type, from: body)
        } catch {
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" sent an answer msso cannot read (not the JSON OAuth specifies)")
        }
    }

    /// What an OAuth error answer (RFC 6749 §5.2, RFC 8628 §3.5) means for the user: the exit
    /// status that names the cause, a sentence that names the fix, and the provider's own words.
    /// `grant`: the grant the request used, in words ("password", "refresh token").
    static func refusal(_ error: OAuthError, group: GroupConfig, doing what: String, grant: String) -> BrokerError {
        let said = error.said
        let code = error.code.isEmpty ? "HTTP \(error.status)" : error.code
        let idp = "the identity provider of \"\(group.name)\""
        switch error.code {
        case "" where error.status == 400 || error.status == 401:
            // How glewlwyd refuses a client, and also some requests it finds malformed: say both.
            return BrokerError(.configInvalid, "\(idp) refused to \(what) with a bare HTTP \(error.status) (no OAuth error code); most often client_id or the client secret in the config is wrong, else the IdP's log says which part of the request it refused.\(said)")
        case "invalid_client":
            return BrokerError(.configInvalid, "\(idp) did not accept client \"\(group.clientID)\" (invalid_client) when asked to \(what); check client_id and the client secret in the config.\(said)")
        case "unauthorized_client":
            // RFC 6749 §5.2: the client authenticated, and may not use this grant.
            return BrokerError(.configInvalid, "\(idp) does not let client \"\(group.clientID)\" use the \(grant) grant, so msso cannot \(what) that way (unauthorized_client: the client is known, the grant is not allowed for it); ask the IdP's administrator to allow the \(grant) grant for the client, or log in another way (`msso login`, `--browser`, `--username`).\(said)")
        case "invalid_scope":
            return BrokerError(.configInvalid, "\(idp) refused the scopes \(group.scopes.joined(separator: " ")); check `scopes` in the config.\(said)")
        case "access_denied":
            return BrokerError(.loginDenied, "\(idp) denied the request to \(what) (access_denied).\(said)")
        case "invalid_request", "unsupported_grant_type", "invalid_dpop_proof", "use_dpop_nonce", "invalid_grant":
            return BrokerError(.loginDenied, "\(idp) refused to \(what) (\(code)): it found the request wrong for this client; check the group's settings (`sign`, `scopes`, the client's grants at the IdP).\(said)")
        default:
            return BrokerError(.loginDenied, "\(idp) refused to \(what) (\(code)).\(said)")
        }
    }

    /// The key that signs the group's `private_key_jwt` assertions: the administrator's file, else
    /// the group's own key in the keyring, which `msso keys` makes and shows for registration.
    private func clientKey(_ group: GroupConfig) async throws(BrokerError) -> ClientKey {
        if group.clientKeyFile != nil { return try ClientKey(file: group) }
        let stored: StoredKey?
        do {
            stored = try await keys?.loadKey(group: group.name)
        } catch let error as BrokerError {
            throw error
        } catch {
            throw BrokerError(.keyringUnavailable, "cannot read the key of \"\(group.name)\" from the keyring")
        }
        guard let stored, let key = try? stored.key() else {
            throw BrokerError(.configInvalid, "group \"\(group.name)\" authenticates with private_key_jwt and the broker's own key, which does not exist yet: run `msso keys --group \(group.name)`, and register the public half it shows for client \"\(group.clientID)\" at the IdP (or set client_key to a key file)")
        }
        return ClientKey(broker: key)
    }

    private func clientSecret(_ group: GroupConfig) throws(BrokerError) -> String {
        switch group.clientSecret {
        case .none:
            throw BrokerError(.configInvalid, "group \"\(group.name)\" has no client secret, and its token_endpoint_auth_method needs one: set client_secret_file, or the method the IdP registered for the client")
        case .inline(let secret): return secret
        case .file(let path):
            guard let data = FileManager.default.contents(atPath: path), data.count <= 4096 else {
                throw BrokerError(.configInvalid, "cannot read the client secret file \(path) of \"\(group.name)\"")
            }
            return String(decoding: data, as: UTF8.self).trimmed(newlines: true)
        }
    }

    /// `application/x-www-form-urlencoded` (WHATWG URL §5.2): unreserved bytes as they are, space
    /// as `+`, every other byte percent-encoded.
    static func formEncode(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "*"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            case UInt8(ascii: " "): out += "+"
            default:
                let hex = Array("0123456789ABCDEF".unicodeScalars)
                out += "%"
                out.unicodeScalars.append(hex[Int(byte >> 4)])
                out.unicodeScalars.append(hex[Int(byte & 0xF)])
            }
        }
        return out
    }
}
