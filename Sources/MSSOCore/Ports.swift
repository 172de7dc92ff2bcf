import MSSOProtocol

/// Where credentials live durably (the desktop keyring in production).
///
/// Implementations throw `BrokerError` with `KeyringLocked` or `KeyringUnavailable`, never report
/// a locked or absent keyring as "no credential", and answer within a bounded time.
public protocol CredentialStore: Sendable {
    /// The group's credential, or nil when none is stored.
    func load(group: String) async throws -> Credential?
    /// Stores (or replaces) the group's credential; returns only once it is written.
    func save(_ credential: Credential, group: String) async throws
    /// Deletes the group's credential; true if one existed.
    @discardableResult
    func delete(group: String) async throws -> Bool
}

/// The OpenID Connect / OAuth 2.0 flows the broker needs from an identity provider.
///
/// Implementations throw `BrokerError`: `InvalidCredentials` when the IdP refuses the user,
/// `Expired` when it refuses a refresh token, `IdPUnavailable` when it cannot be reached in time.
public protocol IdentityProvider: Sendable {
    func passwordLogin(_ group: GroupConfig, username: String, password: String) async throws -> TokenSet
    /// Runs a device authorization grant, calling `prompt` once with what to show the user.
    func deviceLogin(_ group: GroupConfig, prompt: @Sendable (DevicePrompt) -> Void) async throws -> TokenSet
    func refresh(_ group: GroupConfig, refreshToken: String) async throws -> TokenSet
    /// Best effort, bounded in time: failures are logged, not thrown.
    func revoke(_ group: GroupConfig, refreshToken: String) async
}

/// Something that receives group signals (a subscribed connection). Must not block.
public protocol SignalSink: AnyObject, Sendable {
    func deliver(_ signal: Signal)
}
