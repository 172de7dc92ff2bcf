import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Crypto
import Logging
import MSSOCore
import MSSOProtocol
import MSSOSigning

/// An OpenID Connect provider reached over HTTP: discovery, password grant, device authorization
/// grant (RFC 8628), refresh with rotation, revocation (RFC 7009).
///
/// Every request is bounded in time; errors become `BrokerError`s whose sentences carry the
/// IdP's error code but never a token, a password or a client secret.
public final class OpenIDProvider: IdentityProvider {
    private let session: URLSession
    private let logger: Logger
    private let requestTimeout: Double
    private let revokeTimeout: Double
    private let discoveries = Locked([String: ProviderMetadata]())
    /// The newest DPoP nonce each token endpoint's origin asked for.
    private let dpopNonces = Locked([String: String]())

    public init(logger: Logger, requestTimeout: Double = 10, revokeTimeout: Double = 3) {
        let configuration = URLSessionConfiguration.ephemeral
        // Our own deadline (see `send`) fires first; URLSession's timeouts are only a backstop,
        // kept well apart so the two never race (racing them deadlocked FoundationNetworking).
        configuration.timeoutIntervalForRequest = requestTimeout + 30
        configuration.timeoutIntervalForResource = requestTimeout + 30
        configuration.httpCookieStorage = nil
        configuration.urlCache = nil
        session = URLSession(configuration: configuration)
        self.logger = logger
        self.requestTimeout = requestTimeout
        self.revokeTimeout = revokeTimeout
    }

    // MARK: IdentityProvider

    public func passwordLogin(_ group: GroupConfig, username: String, password: String, dpop: SigningKey?) async throws(BrokerError) -> TokenSet {
        let metadata = try await discover(group)
        let response = try await post(metadata.tokenEndpoint, group: group, dpop: dpop, form: [
            ("grant_type", "password"), ("username", username), ("password", password),
            ("scope", group.scopes.joined(separator: " ")),
        ])
        switch response {
        case .success(let json): return try tokens(from: json, group: group, dpop: dpop)
        // Some IdPs (glewlwyd) refuse a user with a bare 403 instead of `invalid_grant`.
        case .failure(let error) where error.code == "invalid_grant" || (error.code.isEmpty && error.status == 403):
            throw BrokerError(.invalidCredentials, "the identity provider of \"\(group.name)\" refused the username or password")
        case .failure(let error): throw refusal(error, group: group, doing: "log in")
        }
    }

    public func deviceLogin(_ group: GroupConfig, dpop: SigningKey?, prompt: @Sendable (DevicePrompt) -> Void) async throws(BrokerError) -> TokenSet {
        let metadata = try await discover(group)
        guard let endpoint = metadata.deviceAuthorizationEndpoint else {
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" does not offer device login; use `msso login --username`")
        }
        let start: [String: Any]
        switch try await post(endpoint, group: group, form: [("scope", group.scopes.joined(separator: " "))]) {
        case .success(let json): start = json
        case .failure(let error): throw refusal(error, group: group, doing: "start a device login")
        }
        guard let deviceCode = start["device_code"] as? String, let userCode = start["user_code"] as? String,
              let verificationURI = start["verification_uri"] as? String else {
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" sent an incomplete device authorization")
        }
        let expiresAt = Date().timeIntervalSince1970 + (number(start["expires_in"]) ?? 600)
        prompt(DevicePrompt(verificationURI: verificationURI, verificationURIComplete: start["verification_uri_complete"] as? String,
                            userCode: userCode, expiresAt: expiresAt))
        var interval = max(number(start["interval"]) ?? 5, 1)
        while Date().timeIntervalSince1970 < expiresAt {
            do { try await Task.sleep(nanoseconds: UInt64(interval * 1_000_000_000)) } catch {
                throw BrokerError(.loginDenied, "the device login was cancelled")
            }
            let response = try await post(metadata.tokenEndpoint, group: group, dpop: dpop, form: [
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"), ("device_code", deviceCode),
            ])
            switch response {
            case .success(let json): return try tokens(from: json, group: group, dpop: dpop)
            case .failure(let error) where error.code == "authorization_pending": continue
            case .failure(let error) where error.code == "slow_down": interval += 5 // RFC 8628 §3.5
            case .failure(let error) where error.code == "access_denied":
                throw BrokerError(.loginDenied, "the device login for \"\(group.name)\" was denied")
            case .failure(let error) where error.code == "expired_token":
                break
            case .failure(let error): throw refusal(error, group: group, doing: "finish the device login")
            }
        }
        throw BrokerError(.loginDenied, "the device code for \"\(group.name)\" expired before it was approved; run `msso login` again")
    }

    public func browserLogin(_ group: GroupConfig, dpop: SigningKey?, prompt: @Sendable (BrowserPrompt) -> Void) async throws(BrokerError) -> TokenSet {
        let metadata = try await discover(group)
        guard let authorization = metadata.authorizationEndpoint,
              let redirect = URLComponents(string: group.redirectURI) else {
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" offers no browser login; use `msso login` (device) instead")
        }
        let listener = try await LoopbackRedirect.start(port: redirect.port ?? 0, path: redirect.path)
        // The redirect URI sent must match the registered one exactly, port included.
        let redirectURI = "http://127.0.0.1:\(listener.port)\(redirect.path)"
        let verifier = Self.random(32), state = Self.random(16), nonce = Self.random(16)
        var url = URLComponents(url: authorization, resolvingAgainstBaseURL: false)!
        url.queryItems = (url.queryItems ?? []) + [
            URLQueryItem(name: "response_type", value: "code"), URLQueryItem(name: "client_id", value: group.clientID),
            URLQueryItem(name: "redirect_uri", value: redirectURI), URLQueryItem(name: "scope", value: group.scopes.joined(separator: " ")),
            URLQueryItem(name: "state", value: state), URLQueryItem(name: "nonce", value: nonce),
            URLQueryItem(name: "code_challenge", value: Base64URL.encode(Data(SHA256.hash(data: Data(verifier.utf8))))),
            URLQueryItem(name: "code_challenge_method", value: "S256"),
        ]
        prompt(BrowserPrompt(url: url.url!.absoluteString, expiresAt: Date().timeIntervalSince1970 + group.browserTimeout))
        let callback = await listener.wait(timeout: group.browserTimeout)
        await listener.close()
        guard let callback else {
            throw BrokerError(.loginDenied, "no answer from the browser within \(SessionDuration.format(group.browserTimeout)); run `msso login --browser` again")
        }
        guard callback["state"] == state else {
            throw BrokerError(.loginDenied, "the browser came back from another login attempt (state mismatch); run `msso login --browser` again")
        }
        if let error = callback["error"] {
            throw BrokerError(.loginDenied, "the identity provider of \"\(group.name)\" refused the browser login (\(error))")
        }
        guard let code = callback["code"] else {
            throw BrokerError(.loginDenied, "the browser came back without an authorization code")
        }
        switch try await post(metadata.tokenEndpoint, group: group, dpop: dpop, form: [
            ("grant_type", "authorization_code"), ("code", code), ("redirect_uri", redirectURI), ("code_verifier", verifier),
        ]) {
        case .success(let json): return try tokens(from: json, group: group, dpop: dpop)
        case .failure(let error): throw refusal(error, group: group, doing: "finish the browser login")
        }
    }

    /// `bytes` random bytes, base64url: PKCE verifiers (43 characters from 32 bytes), states, nonces.
    static func random(_ bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return Base64URL.encode(Data((0..<bytes).map { _ in UInt8.random(in: 0...255, using: &generator) }))
    }

    public func refresh(_ group: GroupConfig, refreshToken: String, dpop: SigningKey?) async throws(BrokerError) -> TokenSet {
        let metadata = try await discover(group)
        switch try await post(metadata.tokenEndpoint, group: group, dpop: dpop, form: [
            ("grant_type", "refresh_token"), ("refresh_token", refreshToken),
        ]) {
        case .success(let json): return try tokens(from: json, group: group, dpop: dpop)
        // A refused refresh token ends the session, whether the IdP says `invalid_grant` or sends a bare 4xx.
        case .failure(let error) where error.code == "invalid_grant" || error.code.isEmpty:
            throw BrokerError(.expired, "the identity provider of \"\(group.name)\" ended the session; run `msso login --group \(group.name)`")
        case .failure(let error): throw refusal(error, group: group, doing: "refresh the access token")
        }
    }

    public func revoke(_ group: GroupConfig, refreshToken: String) async {
        do {
            let metadata = try await discover(group)
            guard let endpoint = metadata.revocationEndpoint else { return }
            let response = try await post(endpoint, group: group, timeout: revokeTimeout, form: [
                ("token", refreshToken), ("token_type_hint", "refresh_token"),
            ])
            if case .failure(let error) = response {
                logger.warning("revocation refused", metadata: ["group": "\(group.name)", "error": "\(error.code)"])
            }
        } catch {
            logger.warning("revocation failed", metadata: ["group": "\(group.name)", "error": "\(error)"])
        }
    }

    // MARK: HTTP

    struct OAuthError: Error {
        var status: Int
        var code: String
        var description: String?
    }

    /// POSTs a form to an endpoint with the group's client authentication. A 200 with a JSON object
    /// is `.success`; an OAuth error response is `.failure`; no answer is thrown as `IdPUnavailable`.
    /// With `dpop`, the request carries a DPoP proof; a `use_dpop_nonce` refusal is retried once
    /// with the nonce the IdP sent (RFC 9449 §8).
    private func post(_ url: URL, group: GroupConfig, timeout: Double? = nil, dpop: SigningKey? = nil,
                      form: [(String, String)]) async throws(BrokerError) -> Result<[String: Any], OAuthError> {
        let first = try await post(url, group: group, timeout: timeout, dpop: dpop, form: form, attempt: 1)
        if case .failure(let error) = first, error.code == "use_dpop_nonce", dpop != nil {
            return try await post(url, group: group, timeout: timeout, dpop: dpop, form: form, attempt: 2)
        }
        return first
    }

    private func post(_ url: URL, group: GroupConfig, timeout: Double?, dpop: SigningKey?, form: [(String, String)],
                      attempt: Int) async throws(BrokerError) -> Result<[String: Any], OAuthError> {
        var request = URLRequest(url: url, timeoutInterval: timeout ?? requestTimeout)
        let origin = "\(url.scheme ?? "")://\(url.host ?? "")\(url.port.map { ":\($0)" } ?? "")"
        if let dpop {
            let nonce = dpopNonces.read { $0[origin] }
            guard let proof = try? DPoPProof.make(key: dpop, method: "POST", url: url, nonce: nonce) else {
                throw BrokerError(.internal, "could not make a DPoP proof")
            }
            request.setValue(proof, forHTTPHeaderField: "DPoP")
        }
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        var fields = form
        if let secret = try clientSecret(group) {
            // RFC 6749 §2.3.1: both parts are form-encoded before they are joined and base64-encoded.
            let credentials = Self.formEncode(group.clientID) + ":" + Self.formEncode(secret)
            request.setValue("Basic " + Data(credentials.utf8).base64EncodedString(), forHTTPHeaderField: "Authorization")
        } else {
            fields.append(("client_id", group.clientID))
        }
        request.httpBody = Data(fields.map { Self.formEncode($0.0) + "=" + Self.formEncode($0.1) }.joined(separator: "&").utf8)
        let (data, status, headers) = try await send(request, group: group, timeout: timeout)
        if let nonce = headers["dpop-nonce"] { dpopNonces.write { $0[origin] = nonce } }
        let json = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        // RFC 7009: a revocation endpoint answers 200 with an empty body.
        if status == 200 { return .success(json ?? [:]) }
        if let code = json?["error"] as? String {
            return .failure(OAuthError(status: status, code: code, description: json?["error_description"] as? String))
        }
        if (400..<500).contains(status) {
            return .failure(OAuthError(status: status, code: "", description: nil))
        }
        throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" answered HTTP \(status) at \(url.path)")
    }

    private func send(_ request: URLRequest, group: GroupConfig, timeout: Double? = nil) async throws(BrokerError) -> (Data, Int, [String: String]) {
        let limit = timeout ?? requestTimeout
        switch await Exchange.run(request, on: session, deadline: limit) {
        case .answered(let data, let status, let headers):
            return (data, status, headers)
        case .timedOut:
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" (\(group.issuer)) did not answer within \(Int(limit)) s; check your network and try again")
        case .failed:
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" (\(group.issuer)) could not be reached; check your network and try again")
        }
    }

    private func discover(_ group: GroupConfig) async throws(BrokerError) -> ProviderMetadata {
        if let known = discoveries.read({ $0[group.issuer] }) { return known }
        let url = URL(string: group.issuer.hasSuffix("/") ? group.issuer + ".well-known/openid-configuration"
                                                        : group.issuer + "/.well-known/openid-configuration")!
        var request = URLRequest(url: url, timeoutInterval: requestTimeout)
        request.setValue("application/json", forHTTPHeaderField: "Accept")
        let (data, status, _) = try await send(request, group: group)
        guard status == 200, let json = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any],
              let metadata = ProviderMetadata(json: json) else {
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" has no usable OpenID configuration at \(url.absoluteString) (HTTP \(status)); check `issuer` in the config")
        }
        discoveries.write { $0[group.issuer] = metadata }
        return metadata
    }

    // MARK: Helpers

    private func tokens(from json: [String: Any], group: GroupConfig, dpop: SigningKey?) throws(BrokerError) -> TokenSet {
        guard let accessToken = json["access_token"] as? String, !accessToken.isEmpty else {
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" answered without an access token")
        }
        if dpop != nil, (json["token_type"] as? String)?.lowercased() != "dpop" {
            // An unbound token sent as "DPoP" would be refused, and would be a bearer token anyway.
            throw BrokerError(.configInvalid, "the identity provider of \"\(group.name)\" did not bind the tokens to msso's key (token_type \(json["token_type"] as? String ?? "missing")); enable DPoP for the client, or use sign = \"bearer\"")
        }
        return TokenSet(accessToken: accessToken, refreshToken: json["refresh_token"] as? String,
                        expiresIn: number(json["expires_in"]) ?? 300,
                        username: (json["id_token"] as? String).flatMap(Self.displayName(idToken:)))
    }

    private func refusal(_ error: OAuthError, group: GroupConfig, doing what: String) -> BrokerError {
        switch error.code {
        case "" where error.status == 400 || error.status == 401:
            fallthrough // a bare 400/401 from the token endpoint is how glewlwyd refuses a client
        case "invalid_client", "unauthorized_client":
            return BrokerError(.configInvalid, "the identity provider of \"\(group.name)\" refused client \"\(group.clientID)\" (\(error.code)) when asked to \(what); check client_id and the client secret in the config")
        case "invalid_scope":
            return BrokerError(.configInvalid, "the identity provider of \"\(group.name)\" refused the scopes \(group.scopes.joined(separator: " ")); check `scopes` in the config")
        default:
            return BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" refused to \(what) (\(error.code), HTTP \(error.status))")
        }
    }

    private func clientSecret(_ group: GroupConfig) throws(BrokerError) -> String? {
        switch group.clientSecret {
        case .none: return nil
        case .inline(let secret): return secret
        case .file(let path):
            guard let data = FileManager.default.contents(atPath: path) else {
                throw BrokerError(.configInvalid, "cannot read the client secret file \(path) of \"\(group.name)\"")
            }
            return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    private func number(_ value: Any?) -> Double? {
        (value as? NSNumber)?.doubleValue ?? (value as? String).flatMap(Double.init)
    }

    static func formEncode(_ text: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._*")
        return text.addingPercentEncoding(withAllowedCharacters: allowed)!.replacingOccurrences(of: "%20", with: "+")
    }

    /// The user's name from an ID token, for status output only (not verified: never used for trust).
    static func displayName(idToken: String) -> String? {
        let parts = idToken.split(separator: ".")
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64),
              let claims = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else { return nil }
        return (claims["preferred_username"] as? String) ?? (claims["sub"] as? String)
    }
}

/// The endpoints of a provider, from its discovery document.
struct ProviderMetadata: Sendable {
    var tokenEndpoint: URL
    var authorizationEndpoint: URL?
    var deviceAuthorizationEndpoint: URL?
    var revocationEndpoint: URL?

    init?(json: [String: Any]) {
        guard let token = (json["token_endpoint"] as? String).flatMap(URL.init(string:)) else { return nil }
        tokenEndpoint = token
        authorizationEndpoint = (json["authorization_endpoint"] as? String).flatMap(URL.init(string:))
        deviceAuthorizationEndpoint = (json["device_authorization_endpoint"] as? String).flatMap(URL.init(string:))
        revocationEndpoint = (json["revocation_endpoint"] as? String).flatMap(URL.init(string:))
    }
}

/// A value behind a lock, for the provider's caches.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    init(_ value: Value) { self.value = value }
    func read<T>(_ body: (Value) -> T) -> T { lock.withLock { body(value) } }
    func write(_ body: (inout Value) -> Void) { lock.withLock { body(&value) } }
}

/// One HTTP exchange bounded by a deadline of our own.
///
/// Not Swift task cancellation: cancelling FoundationNetworking's async `data(for:)` while its own
/// timeout fires can deadlock two cooperative-pool threads, which on a 2-core machine is the whole
/// pool. Here the completion handler and a Dispatch timer race to resume one continuation, and the
/// loser's `cancel()` runs on a Dispatch queue, never on the pool.
enum Exchange {
    enum Outcome: Sendable {
        /// The body, the status, and the headers with lowercased names.
        case answered(Data, Int, [String: String])
        case timedOut
        case failed
    }

    static func run(_ request: URLRequest, on session: URLSession, deadline: Double) async -> Outcome {
        await withCheckedContinuation { (continuation: CheckedContinuation<Outcome, Never>) in
            let once = ResumeOnce(continuation)
            let task = session.dataTask(with: request) { data, response, error in
                if let data, error == nil, let http = response as? HTTPURLResponse {
                    let headers = Dictionary(http.allHeaderFields.compactMap { key, value in
                        (key as? String).map { ($0.lowercased(), "\(value)") }
                    }, uniquingKeysWith: { first, _ in first })
                    once.resume(.answered(data, http.statusCode, headers))
                } else {
                    once.resume(.failed)
                }
            }
            DispatchQueue.global().asyncAfter(deadline: .now() + deadline) {
                if once.resume(.timedOut) { task.cancel() }
            }
            task.resume()
        }
    }
}

/// Resumes a continuation the first time only; says whether this call was the one.
final class ResumeOnce<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var continuation: CheckedContinuation<T, Never>?
    init(_ continuation: CheckedContinuation<T, Never>) { self.continuation = continuation }

    @discardableResult
    func resume(_ value: T) -> Bool {
        guard let continuation = lock.withLock({ () -> CheckedContinuation<T, Never>? in
            defer { self.continuation = nil }
            return self.continuation
        }) else { return false }
        continuation.resume(returning: value)
        return true
    }
}
