/// Payload of `ping`.
public struct PingData: Codable, Sendable, Equatable {
    public var data: String
    public init(data: String) { self.data = data }
}

/// How a login proves the user's identity to the identity provider.
public enum LoginFlow: String, Codable, Sendable {
    /// OAuth 2.0 resource owner password grant: `username` and `password` are required.
    case password
    /// RFC 8628 device authorization grant: the user approves on another screen.
    case device
    /// Authorization code with PKCE (RFC 7636) and a loopback redirect (RFC 8252): the user logs
    /// in in their browser on this machine.
    case browser
}

/// What a browser login asks the user to open.
public struct BrowserPrompt: Codable, Sendable, Equatable {
    /// The identity provider's authorization URL, to open in a browser on this machine.
    public var url: String
    /// When the broker stops waiting for the browser, seconds since the Unix epoch.
    public var expiresAt: Double

    public init(url: String, expiresAt: Double) {
        self.url = url
        self.expiresAt = expiresAt
    }
}

public struct LoginArguments: Codable, Sendable {
    public var group: String?
    public var flow: LoginFlow
    public var username: String?
    /// Only for the password flow. Sent once over the socket, never stored or logged.
    public var password: String?

    public init(group: String? = nil, flow: LoginFlow, username: String? = nil, password: String? = nil) {
        self.group = group
        self.flow = flow
        self.username = username
        self.password = password
    }
}

/// What a device login asks the user to do.
public struct DevicePrompt: Codable, Sendable, Equatable {
    public var verificationURI: String
    /// The verification URI with the code filled in, when the IdP offers one.
    public var verificationURIComplete: String?
    public var userCode: String
    /// When the code stops working, seconds since the Unix epoch.
    public var expiresAt: Double

    public init(verificationURI: String, verificationURIComplete: String?, userCode: String, expiresAt: Double) {
        self.verificationURI = verificationURI
        self.verificationURIComplete = verificationURIComplete
        self.userCode = userCode
        self.expiresAt = expiresAt
    }
}

/// The state of one group's SSO session. Times are seconds since the Unix epoch.
public struct SessionStatus: Codable, Sendable, Equatable {
    public enum State: String, Codable, Sendable {
        /// Logged in and inside the session window: `sign` works.
        case valid
        /// Logged in once, but the window has passed: `login` again.
        case expired
        /// No credential stored.
        case notLoggedIn
        /// The stored credential is not one this broker could have written (damaged, or written
        /// by something else): it signs nothing; `logout` clears it.
        case corrupt
    }

    public var group: String
    public var state: State
    public var issuer: String?
    public var username: String?
    public var loggedInAt: Double?
    /// The end of the sliding window (`extend` moves it).
    public var sessionExpiresAt: Double?
    /// The absolute cap: `extend` never moves the window past it.
    public var sessionMaxAt: Double?
    /// When the current access token expires (refreshed silently while the session is valid).
    public var accessTokenExpiresAt: Double?
    /// Whether the administrator defined the group (so the session-start module may give it the
    /// login password); false for a group of the user's own configuration.
    public var admin: Bool?
    /// True while the broker is locked (`lock`): the session may be valid, but nothing signs
    /// until `unlock`. Absent otherwise.
    public var locked: Bool?

    public init(group: String, state: State, issuer: String? = nil, username: String? = nil,
                loggedInAt: Double? = nil, sessionExpiresAt: Double? = nil, sessionMaxAt: Double? = nil,
                accessTokenExpiresAt: Double? = nil, admin: Bool? = nil) {
        self.group = group
        self.state = state
        self.issuer = issuer
        self.username = username
        self.loggedInAt = loggedInAt
        self.sessionExpiresAt = sessionExpiresAt
        self.sessionMaxAt = sessionMaxAt
        self.accessTokenExpiresAt = accessTokenExpiresAt
        self.admin = admin
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

/// The description of an outbound request that `sign` authenticates.
public struct SignRequest: Codable, Sendable, Equatable {
    public var group: String?
    public var method: String
    public var url: String
    /// Headers the request already has (some signing profiles cover them).
    public var headers: [Header]?
    /// SHA-256 of the body, base64 (standard alphabet), for profiles that cover the body.
    public var bodySHA256: String?
    /// A `DPoP-Nonce` the request's server sent: used in this proof and later ones to its origin.
    public var dpopNonce: String?

    public init(group: String? = nil, method: String, url: String, headers: [Header]? = nil, bodySHA256: String? = nil,
                dpopNonce: String? = nil) {
        self.group = group
        self.method = method
        self.url = url
        self.headers = headers
        self.bodySHA256 = bodySHA256
        self.dpopNonce = dpopNonce
    }
}

/// The headers to add to the request, in order.
public struct SignResponse: Codable, Sendable, Equatable {
    public var headers: [Header]
    public init(headers: [Header]) { self.headers = headers }
}

/// The caller as the kernel describes it, echoed by `hello` so a client can see what the daemon sees.
public struct PeerDescription: Codable, Sendable, Equatable {
    public var uid: UInt32
    public var pid: Int32
    public var executable: String?
    public init(uid: UInt32, pid: Int32, executable: String?) {
        self.uid = uid
        self.pid = pid
        self.executable = executable
    }
}

/// An app registered for access groups, from an `apps.d` file.
public struct AppRegistration: Equatable, Sendable, Codable {
    public init(name: String, executable: String?, sha256: String?, flatpak: String?, groups: [String], source: String, admin: Bool) {
        self.name = name
        self.executable = executable
        self.sha256 = sha256
        self.flatpak = flatpak
        self.groups = groups
        self.source = source
        self.admin = admin
    }

    public var name: String
    /// The executable's path, symlinks resolved (as the kernel reports a running one).
    public var executable: String?
    /// Pins the executable's content: lowercase hex SHA-256.
    public var sha256: String?
    public var flatpak: String?
    public var groups: [String]
    /// `FILE:LINE` of the definition.
    public var source: String
    /// True when it comes from the admin's directory.
    public var admin: Bool
}

/// The caller as the broker recognises it, answered by `apps`.
public struct CallerDescription: Codable, Sendable, Equatable {
    public var executable: String?
    public var flatpak: String?
    public var unit: String?
    /// The registrations the caller matches.
    public var apps: [String]
    /// The groups it may use (every group for the user's own tools).
    public var groups: [String]

    public init(executable: String?, flatpak: String?, unit: String?, apps: [String], groups: [String]) {
        self.executable = executable
        self.flatpak = flatpak
        self.unit = unit
        self.apps = apps
        self.groups = groups
    }
}

/// The public half of a group's signing key. The private half never leaves the broker.
public struct KeyDescription: Codable, Sendable, Equatable {
    public var group: String
    /// `p-256` or `ed25519`.
    public var kind: String
    /// The JWK thumbprint (RFC 7638): the `keyid` of message signatures, DPoP's `jkt`.
    public var keyID: String
    /// The public JWK.
    public var jwk: [String: String]
    /// The public key as PEM (SubjectPublicKeyInfo).
    public var pem: String

    public init(group: String, kind: String, keyID: String, jwk: [String: String], pem: String) {
        self.group = group
        self.kind = kind
        self.keyID = keyID
        self.jwk = jwk
        self.pem = pem
    }
}
