import MSSOProtocol
import MSSOSigning

/// How `sign` authenticates a request for a group: which header carries the access token, and
/// whether an HTTP Message Signature (RFC 9421) covers the request.
public struct SigningProfile: Equatable, Sendable, CustomStringConvertible {
    public enum Token: Equatable, Sendable {
        /// `Authorization: Bearer <access token>`.
        case bearer
        /// `<name>: <access token>`, as the mSSO pattern's `auth-token` header.
        case header(String)
        /// `Authorization: DPoP <access token>` and a `DPoP` proof (RFC 9449): the token is bound
        /// to the broker's key, so a copy is useless without it.
        case dpop
    }

    public var token: Token
    /// Adds `Signature-Input`/`Signature` (RFC 9421), with `Content-Digest` when there is a body.
    public var messageSignature: Bool

    public init(token: Token, messageSignature: Bool = false) {
        self.token = token
        self.messageSignature = messageSignature
    }

    public static let bearer = SigningProfile(token: .bearer)

    /// Whether the profile signs with the group's key.
    public var needsKey: Bool { token == .dpop || messageSignature }

    /// Parses the config form: `bearer`, `header:NAME`, `dpop`, `http-signature` (bearer plus a
    /// message signature), or a token form plus `+http-signature` (`dpop+http-signature`).
    public init?(configValue: String) {
        var parts = configValue.split(separator: "+").map(String.init)
        messageSignature = parts.last == "http-signature"
        if messageSignature { parts.removeLast() }
        switch parts.first {
        case nil where messageSignature: token = .bearer
        case "bearer" where parts.count == 1: token = .bearer
        case "dpop" where parts.count == 1: token = .dpop
        case let part? where part.hasPrefix("header:") && parts.count == 1:
            let name = String(part.dropFirst("header:".count))
            guard !name.isEmpty, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
                return nil
            }
            token = .header(name)
        default:
            return nil
        }
    }

    public var description: String {
        let base: String
        switch token {
        case .bearer: base = messageSignature ? "" : "bearer"
        case .header(let name): base = "header:\(name)"
        case .dpop: base = "dpop"
        }
        return messageSignature ? (base.isEmpty ? "http-signature" : base + "+http-signature") : base
    }
}

/// Where a confidential client's secret comes from. The secret itself is read only when needed.
public enum ClientSecretSource: Equatable, Sendable {
    case none
    case inline(String)
    case file(String)
}

/// How the broker proves to the identity provider that it is the group's client (OpenID Connect
/// Core §9, RFC 7523): the `token_endpoint_auth_method` registered for the client at the IdP.
public enum ClientAuthentication: String, Sendable, CaseIterable {
    /// The client secret in HTTP Basic (RFC 6749 §2.3.1), the default of OAuth.
    case clientSecretBasic = "client_secret_basic"
    /// The client secret in the request body.
    case clientSecretPost = "client_secret_post"
    /// A JWT signed with the client's private key (`client_key`), no shared secret (RFC 7523).
    case privateKeyJWT = "private_key_jwt"
    /// A public client: `client_id` alone.
    case none
}

/// Which accounts an administrator's group may log in as (`account` in its table).
public enum AccountRule: String, Equatable, Sendable {
    /// The account whose ID token names the Unix user mssod runs as (`account_claim`).
    case loginUser = "login-user"
}

/// Which access token a request of a group gets (`tokens` in its table).
public enum TokenScope: String, Equatable, Sendable, CaseIterable {
    /// The session's own token, wherever the group's requests go (today's and the default).
    case shared
    /// A token minted for the `resources` entry the request falls in, used only there.
    case perResource = "per-resource"
}

/// How a token for one server is asked for (`token_request`).
public enum TokenRequest: String, Equatable, Sendable, CaseIterable {
    /// The refresh grant with `resource` (RFC 8707); the login asks for every entry.
    case resource
    /// The session's access token exchanged for one with `resource` (RFC 8693).
    case exchange
}

/// One access group: the apps of a suite that share one login, and the IdP they use.
public struct GroupConfig: Equatable, Sendable {
    public var name: String
    public var issuer: String
    public var clientID: String
    public var clientSecret: ClientSecretSource = .none
    /// How the client authenticates at the token endpoint; nil: the best the provider's discovery
    /// offers for what is configured (``ClientAuthentication``).
    public var clientAuthentication: ClientAuthentication?
    /// The PEM private key (EC P-256 or RSA) that signs `private_key_jwt` assertions.
    public var clientKeyFile: String?
    /// The OpenID Connect `prompt` of a browser login (`login`, `consent`, `select_account`,
    /// `none`, or several); nil: `consent` when `offline_access` is asked for (OpenID Connect Core
    /// §11: a provider may refuse offline access without it), else none. "" sends none.
    public var prompt: String?
    public var scopes: [String] = ["openid"]
    /// The sliding window: `login` and `extend` set the session's end to now + this.
    public var sessionTimeout: Double = 30 * 60
    /// The absolute cap after login that `extend` never passes.
    public var sessionMax: Double = 12 * 3600
    public var signing: SigningProfile = .bearer
    /// A `sign` that finds the access token this close to its expiry refreshes it first.
    public var refreshLead: Double = 30
    /// Subscribers get `Expiring` this long before the session window closes.
    public var expiringLead: Double = 120
    /// The kind of key the broker makes for the group, when its profile signs.
    public var keyKind: SigningKey.Kind = .p256
    /// The browser login's loopback redirect. Port 0 picks a free port (RFC 8252 §7.3); some
    /// IdPs insist on the registered port.
    public var redirectURI = "http://127.0.0.1:0/callback"
    /// How long a browser login waits for the browser.
    public var browserTimeout: Double = 300
    /// A CA certificate file (PEM) to verify a private IdP's TLS certificate with, instead of the
    /// system's trust store.
    public var caFile: String?
    /// The proxy (`http://host:port`, `socks5://host:port`) the group's requests to its identity
    /// provider go through, loopback addresses excepted. Without it, an administrator's group
    /// reaches its provider directly, and a user's group takes the proxy from the environment
    /// (`https_proxy`, `all_proxy`, `no_proxy`): see ``IdPRoute``.
    public var proxy: String?
    /// Whether the administrator defined the group (in a root-owned file). Only such a group is
    /// given a password at session start: its issuer is one the user could not have chosen.
    public var admin = true
    /// Whether mssod shows desktop notifications for the group (`Expiring`, `Expired`) when a
    /// notification server is on the session bus.
    public var notifications = true
    /// The servers the group's tokens are for (`resources`): nil, the default, holds `sign` and
    /// `token` to nothing; else the daemon refuses a URL outside them (``Resources``).
    public var resources: Resources?
    /// The administrator's rule for which account the group may log in as (`account`): nil, the
    /// default, lets the user choose it (the group then remembers the account it logged in as, and
    /// refuses another unless asked for a new one); `.loginUser`, the ID token's ``accountClaim``
    /// must be the name of the Unix user mssod runs as. Only the administrator's files set it.
    public var account: AccountRule?
    /// Whether each server of `resources` gets a token of its own (`tokens`).
    public var tokens: TokenScope = .shared
    /// How such a token is asked for; nil: the exchange when the provider's discovery lists its
    /// grant, else resource indicators (``TokenRequest``).
    public var tokenRequest: TokenRequest?
    /// For an entry of `resources`, the `audience` its token is asked for with
    /// (`[groups."NAME".audiences]`): how providers such as Keycloak or Auth0 name a server.
    public var audiences: [String: String] = [:]
    /// For an entry of `resources`, the scope its token is asked for with instead of `resource`
    /// (`[groups."NAME".resource_scopes]`): how Entra ID names a server (`api://…/.default`).
    public var resourceScopes: [String: String] = [:]
    /// The account a call that names none gets (`default_account`); nil: ``AccountName/defaultName``
    /// while it is logged in, else the account logged in first.
    public var defaultAccount: String?
    /// Which account a session of the group this copy is for: set by the broker on the copy it
    /// gives the identity provider, which keeps what it keeps per session (a refresh's answer).
    public var sessionAccount = AccountName.defaultName
    /// The session this copy is for (``sessionAccount``).
    public var session: AccountName { AccountName(group: name, account: sessionAccount) }
    /// A copy for `account`'s session.
    public func session(_ account: String) -> GroupConfig {
        var copy = self
        copy.sessionAccount = account
        return copy
    }
    /// The ID token's claim `account = "login-user"` compares with the login name.
    public var accountClaim = "preferred_username"

    /// The `prompt` a browser login sends, if any.
    public var effectivePrompt: String? {
        if let prompt { return prompt.isEmpty ? nil : prompt }
        return scopes.contains("offline_access") ? "consent" : nil
    }

    public init(name: String, issuer: String, clientID: String) {
        self.name = name
        self.issuer = issuer
        self.clientID = clientID
    }
}

/// Everything that decides where a group's requests to its identity provider go and whom they
/// trust: the issuer (whose discovery document names every endpoint), the trust anchors
/// (`ca_file`), the proxy, and whether the administrator defined the group. It is the key of every
/// per-provider cache (discovery documents, DPoP nonces) and of the cap on requests to one IdP, so that
/// nothing a user's group fetched, through whatever proxy and trusting whatever CA, is ever used
/// for an administrator's group that names the same issuer.
///
/// An administrator's group takes all of it from the administrator's files: its proxy is its own
/// `proxy` key or none, never the environment's (which is the user's to set). A user's group
/// takes its `proxy` key, else the environment's (`https_proxy`, `all_proxy`, `no_proxy`).
public struct IdPRoute: Hashable, Sendable {
    public enum Proxy: Hashable, Sendable {
        /// Straight to the provider.
        case direct
        /// Through this proxy (the group's `proxy` key).
        case configured(String)
        /// As the daemon's environment says (user groups only).
        case environment
    }

    public var admin: Bool
    public var issuer: String
    public var caFile: String?
    public var proxy: Proxy

    public init(_ group: GroupConfig) {
        admin = group.admin
        issuer = group.issuer
        caFile = group.caFile
        proxy = group.proxy.map(Proxy.configured) ?? (group.admin ? .direct : .environment)
    }
}
