import MSSOProtocol

/// The exit statuses of every msso command (`msso`, `msso-logout`, `git-credential-msso`):
/// stable and documented, like `klist -s` for `check`.
public enum ExitStatus: Int32, Sendable {
    case ok = 0
    case expired = 1
    case notLoggedIn = 2
    case brokerUnreachable = 3
    case keyring = 4
    case idpUnavailable = 5
    case refused = 6
    case forbidden = 7
    case locked = 8
    case usage = 64
    case internalError = 70
    /// `msso doctor` only: mssod cannot write its audit log (EX_CANTCREAT).
    case auditLog = 73
    case config = 78

    public init(_ error: BrokerError) {
        switch error.name {
        case .expired: self = .expired
        case .notLoggedIn: self = .notLoggedIn
        case .brokerUnreachable, .busy, .timedOut: self = .brokerUnreachable
        case .keyringLocked, .keyringUnavailable, .corrupt: self = .keyring
        case .idpUnavailable: self = .idpUnavailable
        case .invalidCredentials, .loginDenied: self = .refused
        case .forbidden, .notEntitled, .resourceForbidden: self = .forbidden
        case .locked: self = .locked
        case .badRequest, .unknownGroup, .unknownMethod, .unsupportedVersion: self = .usage
        case .configInvalid: self = .config
        default: self = .internalError
        }
    }

    public static let table = """
        Exit status:
          0   success (for check: the session is valid)
          1   the SSO session has expired: run `msso login`
          2   not logged in
          3   the broker is unreachable (mssod not running)
          4   the keyring is locked, no Secret Service is running, or the stored credential is damaged
          5   the identity provider is unreachable
          6   the identity provider refused the login
          7   forbidden, or the app is not registered for the group
          8   msso is locked (`msso lock`): run `msso unlock`; also a wrong passphrase for unlock
          64  usage error (bad arguments, unknown group)
          70  internal error
          73  mssod cannot write its audit log (msso doctor)
          78  invalid configuration
        """
}
