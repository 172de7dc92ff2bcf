extension Methods {
    /// Returns the headers that authenticate an outbound HTTP request.
    public enum Sign: BrokerMethod {
        public typealias Arguments = SignRequest
        public typealias Result = SignResponse
    }

    /// The access token itself, for programs that cannot ask the broker to sign each request
    /// (git, kubectl, curl). Only for groups whose tokens are bearer tokens (`bearer`,
    /// `header:NAME`): a DPoP-bound token is useless without the broker's key. Needs a
    /// registration, like `sign`.
    public enum Token: BrokerMethod {
        public struct Arguments: Codable, Sendable, Equatable {
            public var group: String?
            /// One account of the group (nil: the caller's registration's, else the group's default).
            public var account: String?
            /// Refresh the token first even if it looks fresh (a server refused it: git's `erase`).
            /// At most once every 10 seconds per group; more often, the current token is returned.
            public var renew: Bool?
            /// Where the caller will send the token (an absolute http(s) URL: git's remote, the
            /// cluster's server). A group that names `resources` hands out its token only for a
            /// URL within them, and never without one; other groups ignore it.
            public var resource: String?
            public init(group: String? = nil, account: String? = nil, renew: Bool = false, resource: String? = nil) {
                self.group = group
                self.account = account
                self.renew = renew ? true : nil
                self.resource = resource
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            public var accessToken: String
            /// When the token expires, seconds since the Unix epoch.
            public var expiresAt: Double
            /// How a server wants it: `Bearer` (an `Authorization: Bearer` header), or the header
            /// name of a `header:NAME` profile.
            public var header: String
            public init(accessToken: String, expiresAt: Double, header: String) {
                self.accessToken = accessToken
                self.expiresAt = expiresAt
                self.header = header
            }
        }
    }
}

/// The description of an outbound request that `sign` authenticates.
public struct SignRequest: Codable, Sendable, Equatable {
    public var group: String?
    /// One account of the group (nil: the caller's registration's, else the group's default).
    public var account: String?
    public var method: String
    public var url: String
    /// Headers the request already has (some signing profiles cover them).
    public var headers: [Header]?
    /// SHA-256 of the body, base64 (standard alphabet), for profiles that cover the body.
    public var bodySHA256: String?
    /// A `DPoP-Nonce` the request's server sent: used in this proof and later ones to its origin.
    public var dpopNonce: String?

    public init(group: String? = nil, account: String? = nil, method: String, url: String, headers: [Header]? = nil, bodySHA256: String? = nil,
                dpopNonce: String? = nil) {
        self.group = group
        self.account = account
        self.method = method
        self.url = url
        self.headers = headers
        self.bodySHA256 = bodySHA256
        self.dpopNonce = dpopNonce
    }
}

/// One HTTP header, as a `[name, value]` pair on the wire (order and repeats matter in HTTP).
public struct Header: Codable, Sendable, Equatable {
    public var name: String
    public var value: String
    public init(_ name: String, _ value: String) {
        self.name = name
        self.value = value
    }

    public init(from decoder: Decoder) throws {
        var c = try decoder.unkeyedContainer()
        name = try c.decode(String.self)
        value = try c.decode(String.self)
        guard c.isAtEnd else {
            throw DecodingError.dataCorruptedError(in: c, debugDescription: "a header is a [name, value] pair")
        }
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.unkeyedContainer()
        try c.encode(name)
        try c.encode(value)
    }
}

/// The headers to add to the request, in order.
public struct SignResponse: Codable, Sendable, Equatable {
    public var headers: [Header]
    public init(headers: [Header]) { self.headers = headers }
}
