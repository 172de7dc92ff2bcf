import Foundation
import Logging
import MSSOProtocol
import MSSOSigning

/// The broker's logic: one SSO session per access group, its two clocks, and the verbs.
///
/// Hot state lives in memory; the store is written whenever something changes, and a verb that
/// changes state returns only after that write succeeded. Per group, state changes run one at a
/// time (``exclusively(_:_:)``), so a logout cannot interleave with a refresh or a login's write,
/// while `sign` on a fresh token takes no lock and makes no store or IdP call.
public actor Broker {
    public private(set) var configuration: Configuration
    private let store: any CredentialStore
    private let keys: (any KeyStore)?
    private let identity: any IdentityProvider
    /// Each group's signing key, once loaded or made.
    private var signingKeys: [String: SigningKey] = [:]
    /// The newest DPoP nonce each origin asked for (RFC 9449 §8, §9).
    private var dpopNonces: [String: String] = [:]
    private let logger: Logger
    private let now: @Sendable () -> Double

    private var groups: [String: GroupState] = [:]
    private var subscribers: [ObjectIdentifier: Subscriber] = [:]

    private struct GroupState {
        /// True once memory matches the store (loaded, or written by this process).
        var loaded = false
        var credential: Credential?
        /// A rotated token that is in memory but not yet in the store: store it before using it.
        var unsaved = false
        /// Bumped by every login and logout, so a refresh begun before them cannot write back.
        var generation = 0
        var refresh: Task<Credential, any Error>?
        /// The keyring read in progress: callers share it (and its failure) rather than queue.
        var loading: Task<Credential?, any Error>?
        var expiryTimer: Task<Void, Never>?
        var expiringTimer: Task<Void, Never>?
        var locked = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    private struct Subscriber {
        let sink: any SignalSink
        var groups: Set<String>
    }

    public init(configuration: Configuration, store: any CredentialStore, keys: (any KeyStore)? = nil,
                identity: any IdentityProvider, logger: Logger,
                now: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) {
        self.configuration = configuration
        self.store = store
        self.keys = keys
        self.identity = identity
        self.logger = logger
        self.now = now
    }

    // MARK: Verbs

    /// Logs the group in with the flow the caller chose, stores the credential, announces it.
    public func login(_ args: LoginArguments, prompt: @escaping @Sendable (LoginPrompt) -> Void) async throws -> SessionStatus {
        let config = try group(args.group)
        let dpop = config.signing.token == .dpop ? try await signingKey(config) : nil
        let tokens: TokenSet
        switch args.flow {
        case .password:
            guard let username = args.username, !username.isEmpty, let password = args.password, !password.isEmpty else {
                throw BrokerError(.badRequest, "a password login needs a username and a password")
            }
            tokens = try await identity.passwordLogin(config, username: username, password: password, dpop: dpop)
        case .device:
            tokens = try await identity.deviceLogin(config, dpop: dpop) { prompt(.device($0)) }
        case .browser:
            tokens = try await identity.browserLogin(config, dpop: dpop) { prompt(.browser($0)) }
        }
        let t = now()
        let credential = Credential(
            issuer: config.issuer, username: args.username ?? tokens.username, accessToken: tokens.accessToken,
            refreshToken: tokens.refreshToken, accessTokenExpiresAt: t + tokens.expiresIn, loggedInAt: t,
            sessionExpiresAt: t + min(config.sessionTimeout, config.sessionMax), sessionMaxAt: t + config.sessionMax)
        try await exclusively(config.name) {
            do {
                try await store.save(credential, group: config.name)
            } catch {
                // Not stored, so not a session: leave no live refresh token behind at the IdP.
                if let refreshToken = tokens.refreshToken { await identity.revoke(config, refreshToken: refreshToken) }
                throw error
            }
            update(config.name) {
                $0.credential = credential
                $0.loaded = true
                $0.unsaved = false
                $0.generation += 1
            }
        }
        armExpiryTimer(config.name)
        let status = credential.status(group: config.name, now: now())
        logger.info("logged in", metadata: ["group": "\(config.name)", "until": "\(status.sessionExpiresAt ?? 0)"])
        emit(.loggedIn, status)
        return status
    }

    /// Slides the session window to now + timeout, never past the cap set at login.
    public func extend(_ name: String?) async throws -> SessionStatus {
        let config = try group(name)
        let (credential, moved) = try await exclusively(config.name) { () async throws -> (Credential, Bool) in
            var credential = try await validCredentialLocked(config.name)
            let end = min(now() + config.sessionTimeout, credential.sessionMaxAt)
            guard end > credential.sessionExpiresAt else { return (credential, false) }
            credential.sessionExpiresAt = end
            try await store.save(credential, group: config.name)
            update(config.name) {
                $0.credential = credential
                $0.unsaved = false
            }
            return (credential, true)
        }
        let status = credential.status(group: config.name, now: now())
        if moved {
            armExpiryTimer(config.name)
            emit(.extended, status)
        }
        return status
    }

    /// Ends sessions: revokes the refresh token (bounded), deletes the stored credential, announces it.
    /// Returns the groups that had a session.
    public func logout(_ name: String?, all: Bool) async throws -> [String] {
        let names = all ? configuration.groups.keys.sorted() : [try group(name).name]
        var ended: [String] = []
        for name in names where try await endSession(configuration.groups[name]!) {
            ended.append(name)
        }
        return ended
    }

    /// The state of every configured group, or of one.
    public func status(_ name: String?) async throws -> [SessionStatus] {
        let configs = name == nil ? configuration.groups.values.sorted { $0.name < $1.name } : [try group(name)]
        var out: [SessionStatus] = []
        for config in configs { out.append(try await status(of: config)) }
        return out
    }

    /// The state of one group (the only configured one when `name` is nil).
    public func check(_ name: String?) async throws -> SessionStatus {
        try await status(of: try group(name))
    }

    /// The headers that authenticate `request`, refreshing the access token first when it is
    /// about to expire. Never returns the refresh token.
    public func sign(_ request: SignRequest) async throws -> SignResponse {
        let config = try group(request.group)
        guard let url = URL(string: request.url), let scheme = url.scheme?.lowercased(),
              scheme == "https" || scheme == "http", url.host != nil else {
            throw BrokerError(.badRequest, "`url` must be an absolute http(s) URL")
        }
        guard !request.method.isEmpty, request.method.allSatisfy({ $0.isASCII && $0.isLetter }) else {
            throw BrokerError(.badRequest, "`method` must be an HTTP method such as GET")
        }
        var credential = try await validCredential(config.name)
        if credential.accessTokenExpiresAt - now() < config.refreshLead || groups[config.name]?.unsaved == true {
            credential = try await refreshed(config, credential)
        }
        let key = config.signing.needsKey ? try await signingKey(config) : nil
        var nonce: String?
        if config.signing.token == .dpop { // nonces matter to DPoP only: keep bearer's path bare
            let origin = Self.origin(of: url)
            if let given = request.dpopNonce { dpopNonces[origin] = given }
            nonce = dpopNonces[origin]
        }
        return SignResponse(headers: try config.signing.headers(for: request, url: url, accessToken: credential.accessToken,
                                                                key: key, dpopNonce: nonce, now: now()))
    }

    /// The public half of the group's signing key (made on first use). With `rotate`, a new key
    /// replaces it; tokens bound to the old key (DPoP) die with it, so that ends the session.
    public func key(_ name: String?, rotate: Bool) async throws -> KeyDescription {
        let config = try group(name)
        if rotate {
            guard let keys else { throw BrokerError(.internal, "this broker has no key store") }
            let fresh = SigningKey.generate(config.keyKind)
            try await exclusively(config.name) {
                try await keys.saveKey(StoredKey(fresh, createdAt: now()), group: config.name)
                signingKeys[config.name] = fresh
            }
            if config.signing.token == .dpop { _ = try await endSession(config) }
        }
        let key = try await signingKey(config)
        return KeyDescription(group: config.name, kind: key.kind.rawValue, keyID: key.thumbprint,
                              jwk: Dictionary(uniqueKeysWithValues: key.publicJWK), pem: key.publicPEM)
    }

    // MARK: Subscriptions

    /// Sends the sink every signal of the named groups (all configured groups when nil), until
    /// ``unsubscribe(_:)``. Subscribing again adds groups.
    public func subscribe(_ sink: any SignalSink, groups names: [String]?) throws -> [String] {
        let wanted = try names.map { try $0.map { try group($0).name } } ?? Array(configuration.groups.keys)
        let key = ObjectIdentifier(sink)
        subscribers[key, default: Subscriber(sink: sink, groups: [])].groups.formUnion(wanted)
        return subscribers[key]!.groups.sorted()
    }

    public func unsubscribe(_ sink: any SignalSink) {
        subscribers[ObjectIdentifier(sink)] = nil
    }

    // MARK: Lifecycle

    /// Loads every group's credential so expiry signals are armed after a restart. A locked or
    /// absent keyring is logged and retried on the next request.
    public func preload() async {
        for name in configuration.groups.keys.sorted() {
            do { _ = try await credential(name) } catch {
                logger.warning("could not load credential at start", metadata: ["group": "\(name)", "error": "\(error)"])
            }
        }
    }

    /// Stops timers and pending refreshes (on shutdown).
    public func shutdown() {
        for name in groups.keys {
            groups[name]?.expiryTimer?.cancel()
            groups[name]?.expiringTimer?.cancel()
            groups[name]?.refresh?.cancel()
        }
    }

    // MARK: Internals

    private func group(_ name: String?) throws -> GroupConfig {
        try configuration.group(named: name)
    }

    /// The group's signing key: from memory, else the keyring, else made and stored.
    private func signingKey(_ config: GroupConfig) async throws -> SigningKey {
        if let key = signingKeys[config.name] { return key }
        guard let keys else { throw BrokerError(.configInvalid, "the \(config.signing) profile of \"\(config.name)\" needs a key store") }
        return try await exclusively(config.name) {
            if let key = signingKeys[config.name] { return key }
            let key: SigningKey
            if let stored = try await keys.loadKey(group: config.name) {
                key = try stored.key()
            } else {
                key = SigningKey.generate(config.keyKind)
                try await keys.saveKey(StoredKey(key, createdAt: now()), group: config.name)
                logger.info("made a signing key", metadata: ["group": "\(config.name)", "kind": "\(key.kind.rawValue)"])
            }
            signingKeys[config.name] = key
            return key
        }
    }

    /// `scheme://host:port`, the unit DPoP nonces are kept by.
    static func origin(of url: URL) -> String {
        "\(url.scheme ?? "")://\(url.host ?? "")\(url.port.map { ":\($0)" } ?? "")"
    }

    private func update(_ name: String, _ change: (inout GroupState) -> Void) {
        change(&groups[name, default: GroupState()])
    }

    /// Runs `body` while holding the group's lock: state changes of one group happen one at a time.
    private func exclusively<T>(_ name: String, _ body: () async throws -> T) async throws -> T {
        if groups[name] == nil { groups[name] = GroupState() }
        if groups[name]!.locked {
            await withCheckedContinuation { groups[name]!.waiting.append($0) }
        } else {
            groups[name]!.locked = true
        }
        defer {
            if groups[name]!.waiting.isEmpty {
                groups[name]!.locked = false
            } else {
                groups[name]!.waiting.removeFirst().resume() // the lock passes straight to the next waiter
            }
        }
        return try await body()
    }

    /// The group's credential; from memory once loaded (the hot path takes no lock).
    private func credential(_ name: String) async throws -> Credential? {
        if let state = groups[name], state.loaded { return state.credential }
        if let loading = groups[name]?.loading { return try await loading.value }
        let loading = Task { try await self.exclusively(name) { try await self.loadedCredentialLocked(name) } }
        update(name) { $0.loading = loading }
        defer { groups[name]?.loading = nil }
        return try await loading.value
    }

    /// Same, for a caller already holding the group's lock.
    private func loadedCredentialLocked(_ name: String) async throws -> Credential? {
        if let state = groups[name], state.loaded { return state.credential }
        let credential = try await store.load(group: name)
        update(name) {
            $0.credential = credential
            $0.loaded = true
        }
        armExpiryTimer(name)
        return credential
    }

    private func validCredential(_ name: String) async throws -> Credential {
        try requireValid(try await credential(name), name)
    }

    private func validCredentialLocked(_ name: String) async throws -> Credential {
        try requireValid(try await loadedCredentialLocked(name), name)
    }

    private func requireValid(_ credential: Credential?, _ name: String) throws -> Credential {
        guard let credential else {
            throw BrokerError(.notLoggedIn, "not logged in to \"\(name)\"; run `msso login --group \(name)`")
        }
        guard now() < credential.sessionExpiresAt else {
            throw BrokerError(.expired, "the SSO session of \"\(name)\" has expired; run `msso login --group \(name)`")
        }
        return credential
    }

    private func status(of config: GroupConfig) async throws -> SessionStatus {
        guard let credential = try await credential(config.name) else {
            return SessionStatus(group: config.name, state: .notLoggedIn, issuer: config.issuer)
        }
        return credential.status(group: config.name, now: now())
    }

    /// A credential with a fresh access token. Concurrent callers share one IdP refresh.
    private func refreshed(_ config: GroupConfig, _ stale: Credential) async throws -> Credential {
        let name = config.name
        if let running = groups[name]?.refresh { return try await running.value }
        let generation = groups[name]!.generation
        let task = Task { () async throws -> Credential in
            try await self.performRefresh(config, generation: generation)
        }
        groups[name]!.refresh = task
        defer { if groups[name]?.generation == generation { groups[name]?.refresh = nil } }
        do {
            return try await task.value
        } catch let error as BrokerError where error.name == .idpUnavailable && stale.accessTokenExpiresAt > now() {
            // The IdP is down but the current token still works: serve it, retry on the next sign.
            logger.warning("refresh failed, serving the current access token", metadata: ["group": "\(name)", "error": "\(error)"])
            return stale
        }
    }

    private func performRefresh(_ config: GroupConfig, generation: Int) async throws -> Credential {
        let name = config.name
        guard var credential = groups[name]?.credential, groups[name]?.generation == generation else {
            throw BrokerError(.notLoggedIn, "not logged in to \"\(name)\"; the session ended while it was being refreshed")
        }
        // A token rotated earlier but not yet stored only needs storing, unless it is stale too.
        let needsNewToken = !groups[name]!.unsaved || credential.accessTokenExpiresAt - now() < config.refreshLead
        if needsNewToken {
            guard let refreshToken = credential.refreshToken else {
                if credential.accessTokenExpiresAt > now() { return credential }
                throw BrokerError(.expired, "the access token of \"\(name)\" expired and the IdP gave no refresh token; run `msso login --group \(name)`")
            }
            let tokens: TokenSet
            do {
                let dpop = config.signing.token == .dpop ? try await signingKey(config) : nil
                tokens = try await identity.refresh(config, refreshToken: refreshToken, dpop: dpop)
            } catch let error as BrokerError where error.name == .expired {
                try await endWindowEarly(name, generation: generation)
                throw error
            }
            credential.accessToken = tokens.accessToken
            credential.refreshToken = tokens.refreshToken ?? credential.refreshToken
            credential.accessTokenExpiresAt = now() + tokens.expiresIn
        }
        let refreshed = credential
        return try await exclusively(name) {
            guard groups[name]?.generation == generation else {
                throw BrokerError(.notLoggedIn, "not logged in to \"\(name)\"; the session ended while it was being refreshed")
            }
            // The IdP may have rotated the refresh token: keep it in memory even if the store
            // fails, and use the new access token only once it is stored.
            update(name) {
                $0.credential = refreshed
                $0.unsaved = true
            }
            try await store.save(refreshed, group: name)
            update(name) { $0.unsaved = false }
            logger.info("access token refreshed", metadata: ["group": "\(name)"])
            return refreshed
        }
    }

    /// The IdP no longer honours the session: close the window now so every app sees `Expired`.
    private func endWindowEarly(_ name: String, generation: Int) async throws {
        try await exclusively(name) {
            guard groups[name]?.generation == generation, var credential = groups[name]?.credential else { return }
            credential.sessionExpiresAt = min(credential.sessionExpiresAt, now())
            update(name) { $0.credential = credential }
            try await store.save(credential, group: name)
        }
        armExpiryTimer(name)
        if let credential = groups[name]?.credential { emit(.expired, credential.status(group: name, now: now())) }
    }

    /// Logout of one group; true if it had a session.
    private func endSession(_ config: GroupConfig) async throws -> Bool {
        let name = config.name
        let ended = try await exclusively(name) { () async throws -> Bool in
            guard let credential = try await loadedCredentialLocked(name) else { return false }
            // The keyring first: if it refuses (locked), nothing has changed, in memory or at the
            // IdP, and the error says so. Holding the lock, no refresh can write back meanwhile.
            try await store.delete(group: name)
            update(name) {
                $0.credential = nil
                $0.unsaved = false
                $0.generation += 1
                $0.refresh?.cancel()
                $0.refresh = nil
                $0.expiryTimer?.cancel()
                $0.expiringTimer?.cancel()
            }
            if let refreshToken = credential.refreshToken {
                await identity.revoke(config, refreshToken: refreshToken)
            }
            return true
        }
        if ended {
            logger.info("logged out", metadata: ["group": "\(name)"])
            emit(.loggedOut, SessionStatus(group: name, state: .notLoggedIn, issuer: config.issuer))
        }
        return ended
    }

    /// Arms the group's `Expiring` and `Expired` timers for its current window.
    private func armExpiryTimer(_ name: String) {
        groups[name]?.expiryTimer?.cancel()
        groups[name]?.expiringTimer?.cancel()
        guard let credential = groups[name]?.credential else { return }
        let delay = credential.sessionExpiresAt - now()
        guard delay > 0 else { return }
        groups[name]!.expiryTimer = Task { [weak self] in
            try? await Task.sleep(nanoseconds: UInt64(delay * 1_000_000_000))
            guard !Task.isCancelled else { return }
            await self?.windowPassed(name)
        }
        let lead = configuration.groups[name]?.expiringLead ?? 0
        guard lead > 0, delay > lead else { return }
        groups[name]!.expiringTimer = Task { [weak self] in
            try? await Task.sleep(nanoseconds: UInt64((delay - lead) * 1_000_000_000))
            guard !Task.isCancelled else { return }
            await self?.windowClosing(name)
        }
    }

    private func windowClosing(_ name: String) {
        guard let credential = groups[name]?.credential, now() < credential.sessionExpiresAt else { return }
        emit(.expiring, credential.status(group: name, now: now()))
    }

    private func windowPassed(_ name: String) {
        guard let credential = groups[name]?.credential else { return }
        guard now() >= credential.sessionExpiresAt else { return armExpiryTimer(name) }
        logger.info("session expired", metadata: ["group": "\(name)"])
        emit(.expired, credential.status(group: name, now: now()))
    }

    private func emit(_ signal: SignalName, _ status: SessionStatus) {
        let message = Signal(signal: signal, group: status.group, status: status)
        for subscriber in subscribers.values where subscriber.groups.contains(status.group) {
            subscriber.sink.deliver(message)
        }
    }
}

extension Broker {
    /// Takes a new configuration (SIGHUP). Sessions of groups still configured are kept.
    public func reload(_ configuration: Configuration) {
        self.configuration = configuration
    }
}
