import FoundationEssentials
import MSSOProtocol
import MSSOSigning

/// Where credentials live durably (the desktop keyring in production).
///
/// Implementations throw `BrokerError` with `KeyringLocked` or `KeyringUnavailable`, never report
/// a locked or absent keyring as "no credential", throw `Corrupt` for an item that is not a
/// credential (see ``Credential/init(from:)``), and answer within a bounded time.
public protocol CredentialStore: Sendable {
    /// The group's credential, or nil when none is stored.
    func load(group: String) async throws -> Credential?
    /// Stores (or replaces) the group's credential; returns only once it is written.
    func save(_ credential: Credential, group: String) async throws
    /// Deletes the group's credential; true if one existed.
    @discardableResult
    func delete(group: String) async throws -> Bool
    /// Why `credential`, refreshed, could not be stored now (the keyring locked or gone, the kernel
    /// quota short of room for it and the answer kept beside it), nil when it could: asked before
    /// a one-use refresh token is spent. Bounded in time like every store call.
    func cannotSave(_ credential: Credential, group: String) async -> BrokerError?
    /// The accounts of `group` besides its default one that have a credential stored (the part of
    /// each ``AccountName/storeName`` after the group's): what `logout` ends whatever the
    /// accounts file says. At most a few thousand are read.
    func storedAccounts(group: String) async throws -> [String]
}

extension CredentialStore {
    /// A store that is never short of room (the unit tests' fakes).
    public func cannotSave(_ credential: Credential, group: String) async -> BrokerError? { nil }
}

/// A store that can say which one it is and why: for `status` and `msso doctor`.
public protocol StoreDescribing: Sendable {
    func describe() async -> StoreDescription
}

/// A group's signing key as stored: its private half, for the keyring only.
public struct StoredKey: Codable, Sendable {
    public var kind: SigningKey.Kind
    public var privateKey: Data
    public var createdAt: Double

    public init(_ key: SigningKey, createdAt: Double) {
        kind = key.kind
        privateKey = key.rawPrivate
        self.createdAt = createdAt
    }

    public func key() throws -> SigningKey { try SigningKey(kind: kind, rawPrivate: privateKey) }
}

extension StoredKey: CustomStringConvertible, CustomReflectable {
    public var description: String { "StoredKey(kind: \(kind), private: <redacted>)" }
    public var customMirror: Mirror { Mirror(self, children: ["redacted": description]) }
}

/// Where the groups' signing keys live (the keyring, apart from the credentials: a key outlives
/// logouts, since services may have been told to trust its public half).
public protocol KeyStore: Sendable {
    func loadKey(group: String) async throws -> StoredKey?
    func saveKey(_ key: StoredKey, group: String) async throws
}

/// The OpenID Connect / OAuth 2.0 flows the broker needs from an identity provider.
///
/// Implementations throw `BrokerError`: `InvalidCredentials` when the IdP refuses the user,
/// `Expired` when it refuses a refresh token, `IdPUnavailable` when it cannot be reached in time;
/// `refresh` throws ``IdPBusy`` when the IdP cannot answer now, so that the session is kept.
public protocol IdentityProvider: Sendable {
    /// With `dpop`, token requests carry a DPoP proof made with that key, so the IdP binds the
    /// tokens to it (RFC 9449).
    func passwordLogin(_ group: GroupConfig, username: String, password: String, dpop: SigningKey?) async throws -> TokenSet
    /// Runs a device authorization grant, calling `prompt` once with what to show the user.
    func deviceLogin(_ group: GroupConfig, dpop: SigningKey?, prompt: @Sendable (DevicePrompt) -> Void) async throws -> TokenSet
    /// Runs an authorization code grant with PKCE and a loopback redirect, calling `prompt` once
    /// with the URL to open.
    func browserLogin(_ group: GroupConfig, dpop: SigningKey?, prompt: @Sendable (BrowserPrompt) -> Void) async throws -> TokenSet
    func refresh(_ group: GroupConfig, refreshToken: String, dpop: SigningKey?) async throws -> TokenSet
    /// How a token for `target` is asked for: for one server, the group's `token_request`, else
    /// the exchange when the provider's discovery lists that grant, else resource indicators;
    /// for one app's scopes, the exchange alone (``TokenTarget``), else `ResourceRefused`.
    func mintingMechanism(_ group: GroupConfig, for target: TokenTarget) async throws -> TokenRequest
    /// An access token for `target` (``TokenTarget``): by the refresh grant with `resource` and
    /// `scope` (its answer's refresh token, when the provider rotates it, replaces the session's),
    /// or by exchanging the session's `accessToken` (RFC 8693). Throws `ResourceRefused` when the
    /// provider will not mint it (the session is kept), `Expired` when it ends the session, and
    /// ``IdPBusy`` when it cannot answer now.
    func mint(_ group: GroupConfig, target: TokenTarget, by mechanism: TokenRequest, refreshToken: String?,
              accessToken: String, dpop: SigningKey?) async throws -> TokenSet
    /// Asks the provider to forget a token (RFC 7009): the refresh token, or the access token of a
    /// session that has none. Bounded in time; never throws: the outcome says what happened.
    func revoke(_ group: GroupConfig, token: String, hint: TokenKind) async -> Revocation
    /// The answer to a refresh that was kept for the group (``refresh(_:refreshToken:dpop:)``
    /// keeps each until ``forgetRescuedRefresh(_:)``, where it outlives the broker), if any;
    /// `answersStored` when it answered `refreshToken`.
    func rescuedRefresh(_ group: GroupConfig, spent refreshToken: String?) async -> RescuedTokens?
    /// Drops the group's kept answer: stored, or of no more use.
    func forgetRescuedRefresh(_ group: GroupConfig)
}

/// A mint the provider answered with a token msso does not hand out (not for the server, or with
/// more scopes than asked): `error` says why; `refreshToken`, when the provider rotated the
/// session's as it answered, is the session's now and must be stored.
public struct MintRefused: Error, Sendable {
    public var error: BrokerError
    public var refreshToken: String?
    public init(error: BrokerError, refreshToken: String?) {
        self.error = error
        self.refreshToken = refreshToken
    }
}

/// A refresh's answer kept outside the broker (an earlier broker died or stopped before storing
/// it, or could not store it): its tokens, and whether it answered the refresh token now stored.
public struct RescuedTokens: Sendable {
    public var tokens: TokenSet
    public var answersStored: Bool
    /// It answered a mint (``IdentityProvider/mint(_:target:by:refreshToken:accessToken:dpop:)``):
    /// its refresh token is the session's, its access token is for some other target.
    public var minted: Bool
    public init(tokens: TokenSet, answersStored: Bool, minted: Bool = false) {
        self.tokens = tokens
        self.answersStored = answersStored
        self.minted = minted
    }
}

extension IdentityProvider {
    /// A provider that keeps no answer outside the broker (the unit tests' fakes).
    public func rescuedRefresh(_ group: GroupConfig, spent refreshToken: String?) async -> RescuedTokens? { nil }
    public func forgetRescuedRefresh(_ group: GroupConfig) {}
    public func mintingMechanism(_ group: GroupConfig, for target: TokenTarget) async throws -> TokenRequest {
        target.scopes != nil ? .exchange : group.tokenRequest ?? .resource
    }
    public func mint(_ group: GroupConfig, target: TokenTarget, by mechanism: TokenRequest, refreshToken: String?,
                     accessToken: String, dpop: SigningKey?) async throws -> TokenSet {
        throw BrokerError(.resourceRefused, "this identity provider mints no token for one server")
    }
}

/// Which token a revocation names (RFC 7009 `token_type_hint`).
public enum TokenKind: String, Sendable {
    case refreshToken = "refresh_token"
    case accessToken = "access_token"
}

/// What became of a request to revoke a token.
public enum Revocation: Sendable, Equatable {
    /// The provider answered that it forgot the token.
    case revoked
    /// The provider names no revocation endpoint, in its OpenID discovery or its OAuth metadata (RFC 8414).
    case notOffered
    /// The provider refused, or did not answer in time: the sentence says which.
    case failed(String)
}

/// The identity provider could not answer a refresh now (HTTP 408, 429, 5xx, no answer in time,
/// no connection): the session stays, and the broker asks again after a backoff, or after
/// `retryAfter` seconds when the IdP said so (`Retry-After`).
public struct IdPBusy: Error, Sendable {
    public var error: BrokerError
    public var retryAfter: Double?
    public init(_ error: BrokerError, retryAfter: Double? = nil) {
        self.error = error
        self.retryAfter = retryAfter
    }
}

/// What a login asks its caller to show the user.
public enum LoginPrompt: Sendable {
    case device(DevicePrompt)
    case browser(BrowserPrompt)
}

/// Something that receives group signals (a subscribed connection). Must not block.
public protocol SignalSink: AnyObject, Sendable {
    func deliver(_ signal: Signal)
}

/// Where every call is recorded (the SQLite audit log in production).
public protocol AuditTrail: Sendable {
    /// Records one call. Never blocks the caller (it is on the sign path): written later, batched.
    func record(_ entry: AuditEntry)
    /// The newest `limit` rows (of `group` when named, at or after `since` when given), oldest first.
    func query(group: String?, since: Double?, limit: Int) throws -> [AuditEntry]
    /// Where rows go and what keeps them from it, for `msso doctor` and `status` (nil: not said).
    var health: AuditHealth? { get }
}

extension AuditTrail {
    public var health: AuditHealth? { nil }
}
