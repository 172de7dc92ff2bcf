/// The name of an error the broker returns. Names are stable API: clients branch on them.
///
/// A struct rather than an enum so that a client keeps working when a newer daemon adds a name.
public struct ErrorName: RawRepresentable, Hashable, Codable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(from decoder: Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }
    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue)
    }
    public var description: String { rawValue }

    /// No credential is stored for the group.
    public static let notLoggedIn = ErrorName(rawValue: "NotLoggedIn")
    /// The SSO session window has passed (or the IdP ended the session): log in again.
    public static let expired = ErrorName(rawValue: "Expired")
    /// The stored credential is damaged or not msso's: `msso logout` clears it, then log in.
    public static let corrupt = ErrorName(rawValue: "Corrupt")
    /// The broker is at a limit (connections, calls in flight, logins waiting): try again later.
    public static let busy = ErrorName(rawValue: "Busy")
    /// The connection was closed for being idle (or a frame for taking too long): reconnect.
    public static let timedOut = ErrorName(rawValue: "TimedOut")
    /// The keyring holding the credentials is locked.
    public static let keyringLocked = ErrorName(rawValue: "KeyringLocked")
    /// No Secret Service answered on the session bus (or it did not answer in time).
    public static let keyringUnavailable = ErrorName(rawValue: "KeyringUnavailable")
    /// The broker is locked (`msso lock`): nothing signs or hands out a token until `msso unlock`.
    /// Also the answer to a wrong or paused `unlock`, and to `lock` when already locked.
    public static let locked = ErrorName(rawValue: "Locked")
    /// The identity provider could not be reached, or answered with an unexpected error.
    public static let idpUnavailable = ErrorName(rawValue: "IdPUnavailable")
    /// The identity provider refused the username or password.
    public static let invalidCredentials = ErrorName(rawValue: "InvalidCredentials")
    /// The user denied a device login, or its code expired before approval; or the login came back
    /// as another account than the group's (nothing was stored).
    public static let loginDenied = ErrorName(rawValue: "LoginDenied")
    /// The caller may not use this method (another user, or root asking for a state change).
    public static let forbidden = ErrorName(rawValue: "Forbidden")
    /// The group names the resources its tokens are for (`resources`), and this `sign`'s URL or
    /// this `token`'s `resource` is not among them (or the `token` named none).
    public static let resourceForbidden = ErrorName(rawValue: "ResourceForbidden")
    /// The calling app is not registered for the access group.
    public static let notEntitled = ErrorName(rawValue: "NotEntitled")
    /// The group is not configured.
    public static let unknownGroup = ErrorName(rawValue: "UnknownGroup")
    /// The method name is not one this daemon knows.
    public static let unknownMethod = ErrorName(rawValue: "UnknownMethod")
    /// The message is malformed, or its arguments are missing or invalid.
    public static let badRequest = ErrorName(rawValue: "BadRequest")
    /// The client speaks a protocol version this daemon does not.
    public static let unsupportedVersion = ErrorName(rawValue: "UnsupportedVersion")
    /// The daemon's configuration is invalid.
    public static let configInvalid = ErrorName(rawValue: "ConfigInvalid")
    /// Client side only, never sent by the daemon: no broker answered on the socket.
    public static let brokerUnreachable = ErrorName(rawValue: "BrokerUnreachable")
    /// A bug or an unexpected failure inside the daemon.
    public static let `internal` = ErrorName(rawValue: "Internal")
}

/// An error as it travels on the wire: a stable name and a sentence for the user.
///
/// The message tells the user what to do next and never contains a secret.
public struct BrokerError: Error, Equatable, Sendable, CustomStringConvertible {
    public let name: ErrorName
    public let message: String

    public init(_ name: ErrorName, _ message: String) {
        self.name = name
        self.message = message
    }

    public var description: String { message }
}
