import FoundationEssentials
import MSSOCore
import MSSOProtocol
import MSSOSigning

/// The endpoints of a provider, from its discovery document, checked as OpenID Connect Discovery
/// §4.3 requires: the document's `issuer` is exactly the configured one, and every endpoint is
/// https (plain http only on a loopback address, for a provider on this machine).
struct IdPEndpoints: Sendable {
    var token: URL
    var authorization: URL?
    var deviceAuthorization: URL?
    var revocation: URL?
    /// RFC 7662: where a minted token's audience is looked up when it is not a JWT.
    var introspection: URL?
    /// Where the provider publishes the keys its ID tokens are signed with.
    var jwks: URL?
    /// The client authentication methods the token endpoint takes; nil when the provider does not
    /// say (OAuth's default then: `client_secret_basic`).
    var authMethods: [String]?
    /// The grants the provider lists (`grant_types_supported`): whether it offers token exchange.
    var grantTypes: [String]?

    private struct Document: Decodable {
        var issuer: String
        var token_endpoint: String
        var authorization_endpoint: String?
        var device_authorization_endpoint: String?
        var revocation_endpoint: String?
        var introspection_endpoint: String?
        var jwks_uri: String?
        var token_endpoint_auth_methods_supported: [String]?
        var grant_types_supported: [String]?
    }

    /// Reads and checks a discovery document (OpenID Connect's, or with `metadata` an OAuth
    /// authorization server's, RFC 8414 §3.3, held to the same rules); the error names what is wrong.
    init(discovery body: Data, group: GroupConfig, metadata: Bool = false) throws(BrokerError) {
        let document: Document
        do {
            document = try JSONDecoder().decode(Document.self, from: body)
        } catch {
            throw BrokerError(.configInvalid, "the identity provider of \"\(group.name)\" sent a discovery document that is not \(metadata ? "OAuth metadata (RFC 8414)" : "OpenID Connect's") (no issuer or token_endpoint); check `issuer` in the config")
        }
        guard document.issuer == group.issuer else {
            throw BrokerError(.configInvalid, "the identity provider at \(group.issuer) says its issuer is \"\(document.issuer.prefix(200))\", not the configured one: refusing it (OpenID Connect requires them to be identical; check `issuer` in the config)")
        }
        func endpoint(_ text: String?, _ name: String) throws(BrokerError) -> URL? {
            guard let text else { return nil }
            guard let url = URL(string: text), let host = url.host?.lowercased(), !host.isEmpty,
                  url.scheme?.lowercased() == "https" || (url.scheme?.lowercased() == "http" && Loopback.isHost(host)) else {
                throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" gives a \(name) that is not https (\(text.prefix(200))): refusing to send credentials there")
            }
            return url
        }
        token = try endpoint(document.token_endpoint, "token_endpoint")!
        authorization = try endpoint(document.authorization_endpoint, "authorization_endpoint")
        deviceAuthorization = try endpoint(document.device_authorization_endpoint, "device_authorization_endpoint")
        revocation = try endpoint(document.revocation_endpoint, "revocation_endpoint")
        introspection = try endpoint(document.introspection_endpoint, "introspection_endpoint")
        jwks = try endpoint(document.jwks_uri, "jwks_uri")
        authMethods = document.token_endpoint_auth_methods_supported.map { Array($0.prefix(32)) }
        grantTypes = document.grant_types_supported.map { Array($0.prefix(32)) }
    }

    /// The client authentication the group uses at this provider: the configured method, else
    /// the key's or the secret's method the provider lists (Basic first), else none.
    func clientAuthentication(_ group: GroupConfig) -> ClientAuthentication {
        if let configured = group.clientAuthentication { return configured }
        if group.clientKeyFile != nil { return .privateKeyJWT }
        if group.clientSecret == .none { return .none }
        let offered = authMethods ?? [ClientAuthentication.clientSecretBasic.rawValue]
        if !offered.contains(ClientAuthentication.clientSecretBasic.rawValue), offered.contains(ClientAuthentication.clientSecretPost.rawValue) {
            return .clientSecretPost
        }
        return .clientSecretBasic
    }

    /// Where an OAuth authorization server publishes its metadata (RFC 8414 §3.1: the well-known
    /// segment goes between the host and the issuer's path), then the form many providers serve
    /// instead (the segment after the issuer, as OpenID discovery puts it).
    static func metadataURLs(issuer: String) -> [URL] {
        guard let url = URLComponents(string: issuer) else { return [] }
        let path = url.path.hasSuffix("/") ? String(url.path.dropLast()) : url.path
        var standard = url
        standard.path = "/.well-known/oauth-authorization-server" + path
        let appended = (issuer.hasSuffix("/") ? issuer : issuer + "/") + ".well-known/oauth-authorization-server"
        return [standard.url, path.isEmpty ? nil : URL(string: appended)].compactMap { $0 }
    }
}

/// A successful token response (RFC 6749 §5.1), with its numbers checked.
struct TokenResponse: Decodable {
    var access_token: String
    var token_type: String?
    var expires_in: Lenient?
    var refresh_token: String?
    var id_token: String?
    /// The scopes granted, when the provider says (RFC 6749 §5.1: when they differ from those asked).
    var scope: String?

    /// The longest access token lifetime believed: longer claims are cut to a day, so a broken IdP
    /// cannot make a token live on for years.
    static let maximumLifetime: Double = 86400

    func tokens(group: GroupConfig, dpop: Bool) throws(BrokerError) -> TokenSet {
        guard !access_token.isEmpty, access_token.utf8.count <= 16384, (refresh_token?.utf8.count ?? 0) <= 16384 else {
            throw BrokerError(.idpUnavailable, "the identity provider of \"\(group.name)\" answered without a usable access token")
        }
        if dpop, token_type?.lowercased() != "dpop" {
            // An unbound token sent as "DPoP" would be refused, and would be a bearer token anyway.
            throw BrokerError(.configInvalid, "the identity provider of \"\(group.name)\" did not bind the tokens to msso's key (token_type \(token_type?.prefix(32) ?? "missing")); enable DPoP for the client, or use sign = \"bearer\"")
        }
        let lifetime = expires_in?.value.map { min(max($0, 1), Self.maximumLifetime) } ?? 300
        // The name shown comes from the ID token once it is checked (OpenIDProvider.loginTokens).
        var tokens = TokenSet(accessToken: access_token, refreshToken: refresh_token, expiresIn: lifetime)
        tokens.scope = scope.map { String($0.prefix(4096)) }
        return tokens
    }
}

/// A device authorization response (RFC 8628 §3.2), its numbers brought into range.
struct DeviceAuthorization: Decodable {
    var device_code: String
    var user_code: String
    var verification_uri: String
    var verification_uri_complete: String?
    var expires_in: Lenient?
    var interval: Lenient?

    enum CodingKeys: String, CodingKey {
        case device_code, user_code, verification_uri, verification_uri_complete, expires_in, interval
        /// Google's name for `verification_uri` (its device flow predates RFC 8628's final text).
        case verification_url
    }

    init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        device_code = try c.decode(String.self, forKey: .device_code)
        user_code = try c.decode(String.self, forKey: .user_code)
        verification_uri = try c.decodeIfPresent(String.self, forKey: .verification_uri) ?? c.decode(String.self, forKey: .verification_url)
        verification_uri_complete = try c.decodeIfPresent(String.self, forKey: .verification_uri_complete)
        expires_in = try c.decodeIfPresent(Lenient.self, forKey: .expires_in)
        interval = try c.decodeIfPresent(Lenient.self, forKey: .interval)
    }

    /// Seconds the code is good for: 1 s to an hour (600 when the IdP does not say).
    var lifetime: Double { expires_in?.value.map { min(max($0, 1), 3600) } ?? 600 }
    /// Seconds between polls: 1 to 60 (5 when the IdP does not say), so that no number an IdP
    /// sends can stop polling or turn it into a flood.
    var pollInterval: Double { interval?.value.map { min(max($0, 1), 60) } ?? 5 }
}

/// An OAuth error response (RFC 6749 §5.2).
struct OAuthErrorBody: Decodable {
    var error: String
    var error_description: String?
}

/// A number an IdP sent, as a number or a numeric string; anything else (or a non-finite
/// value) reads as absent, so that the caller's default applies.
struct Lenient: Decodable {
    var value: Double?

    init(from decoder: Decoder) throws {
        let single = try decoder.singleValueContainer()
        if let number = try? single.decode(Double.self), number.isFinite {
            value = number
        } else if let text = try? single.decode(String.self), let number = Double(text), number.isFinite {
            value = number
        } else {
            value = nil
        }
    }
}
