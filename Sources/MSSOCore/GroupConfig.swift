/// How `sign` authenticates a request for a group.
public enum SigningProfile: Equatable, Sendable, CustomStringConvertible {
    /// `Authorization: Bearer <access token>`.
    case bearer
    /// `<name>: <access token>`, as the mSSO pattern's `auth-token` header.
    case header(String)

    /// Parses the config form: `bearer` or `header:NAME`.
    public init?(configValue: String) {
        if configValue == "bearer" {
            self = .bearer
        } else if configValue.hasPrefix("header:") {
            let name = String(configValue.dropFirst("header:".count))
            guard !name.isEmpty, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") }) else {
                return nil
            }
            self = .header(name)
        } else {
            return nil
        }
    }

    public var description: String {
        switch self {
        case .bearer: return "bearer"
        case .header(let name): return "header:\(name)"
        }
    }
}

/// Where a confidential client's secret comes from. The secret itself is read only when needed.
public enum ClientSecretSource: Equatable, Sendable {
    case none
    case inline(String)
    case file(String)
}

/// One access group: the apps of a suite that share one login, and the IdP they use.
public struct GroupConfig: Equatable, Sendable {
    public var name: String
    public var issuer: String
    public var clientID: String
    public var clientSecret: ClientSecretSource = .none
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

    public init(name: String, issuer: String, clientID: String) {
        self.name = name
        self.issuer = issuer
        self.clientID = clientID
    }
}
