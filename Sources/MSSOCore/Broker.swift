import FoundationEssentials
import Logging
import MSSOProtocol
import MSSOSigning
import Synchronization

/// The broker's logic: one SSO session per account of each access group (``AccountName``), its
/// two clocks, and the verbs.
///
/// Hot state lives in memory; the store is written whenever something changes, and a verb that
/// changes state returns only after that write succeeded. Per group, state changes run one at a
/// time (``exclusively(_:_:)``), so a logout cannot interleave with a refresh or a login's write.
/// The actor is the only writer of sessions; after every change it publishes what a `sign` on a
/// fresh token needs (``signWithoutWaiting(_:checked:group:target:)``), so such a sign never waits for it.
public actor Broker {
    /// The configuration and registrations in force, shared with the server.
    public nonisolated let rules: Rules
    public nonisolated var configuration: Configuration { rules.configuration }
    let store: any CredentialStore
    let keys: (any KeyStore)?
    let identity: any IdentityProvider
    let logger: Logger
    /// What time it is, and waiting (``BrokerClock``).
    nonisolated let clock: any BrokerClock
    /// PBKDF2 rounds for the lock's passphrase (``PassphraseHash/rounds``; fewer in unit tests).
    nonisolated let passphraseRounds: Int

    /// Each group's signing key, once loaded or made.
    var signingKeys: [String: SigningKey] = [:]
    /// Logouts running now, which a shutdown lets finish as it does refreshes (found by an outside
    /// test: a SIGTERM during `logout --all` left some accounts logged in, 3 of 3).
    var logoutsUnderWay = 0
    /// The newest DPoP nonce each origin asked for (RFC 9449 §8, §9), per group, bounded.
    var dpopNonces: [String: DPoPNonces] = [:]
    /// Each session's state, by group and account.
    var sessions: [AccountName: SessionState] = [:]
    var subscribers = Subscribers()
    /// The device or browser login of each session waiting for the user right now: one per
    /// session, joined by every further login of it (``SharedLogin``).
    var sharedLogins: [AccountName: SharedLogin] = [:]
    /// The sessions a login of any flow is under way for.
    var loggingIn: Set<AccountName> = []
    /// The sessions a login is storing now, counted against ``AccountName/maximumPerGroup``.
    var storing: Set<AccountName> = []
    /// At most this many replaced tokens are kept per session to be revoked at its logout.
    static let maximumRetired = 64
    /// At most this many groups have a device or browser login waiting at once (each holds an
    /// IdP poll or a loopback listener).
    public static let maximumInteractiveLogins = 4
    /// `msso lock`: see ``BrokerLock``.
    var lock = BrokerLock() {
        didSet { if lock.isLocked != oldValue.isLocked { published.withLock { $0.locked = lock.isLocked } } }
    }
    /// The account each group logs in as, remembered across logouts (``AccountBook``).
    var accountBook = AccountBook()

    /// What `sign` needs, as of the last change: read without the actor.
    nonisolated let published = Mutex(Published())

    struct SessionState {
        /// True once memory matches the store (loaded, or written by this process).
        var loaded = false
        var credential: Credential?
        /// The stored item could not be read as a credential: reported, never used.
        var corrupt = false
        /// A rotated token that is in memory but not yet in the store: store it before using it.
        var unsaved = false
        /// Bumped by every login and logout, so a refresh begun before them cannot write back.
        var generation = 0
        /// Bumped by every logout, a session or not: a login that began before it stores nothing.
        var logouts = 0
        var refresh: Task<Credential, any Error>?
        /// The mints under way, one per target (callers share it).
        var mints: [TokenTarget: Task<MintedToken, any Error>] = [:]
        /// The last request to the IdP that may spend the refresh token (a refresh or a mint):
        /// the next one starts once it has ended, with the token it stored.
        var lane: Task<Void, Never>?
        /// How the last request for each target's token went, for `msso doctor` (bounded as the tokens are).
        var mintOutcomes: [TokenTarget: MintOutcome] = [:]
        /// Each minted token's life on both clocks (as ``tokenLife``), measured when it was minted or read.
        var mintedLives: [TokenTarget: SessionWindow] = [:]
        /// The keyring read in progress: callers share it (and its failure) rather than queue.
        var loading: Task<Credential?, any Error>?
        var expiryTimer: Task<Void, Never>?
        var expiringTimer: Task<Void, Never>?
        /// The credential's window on both clocks (``Broker/measureWindow(_:)``), and what it was
        /// measured for.
        var window: SessionWindow?
        var windowMeasured: (generation: Int, end: Double)?
        /// The access token's life on both clocks, measured when its expiry was set or read
        /// (``Broker/tokenLife(of:_:)``).
        var tokenLife: SessionWindow?
        /// When the IdP may be asked for a refresh again, after it was unavailable.
        var backoff = RefreshBackoff()
        /// When a caller last asked for a renewed token (``Broker/token(_:renew:)``).
        var renewedAt: Double = 0
        /// Access tokens a renewal replaced while they still worked, revoked with the session
        /// (at most ``Broker/maximumRetired``, in memory only).
        var retired: [(token: String, expiresAt: Double)] = []
        var locked = false
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    public init(rules: Rules, store: any CredentialStore, keys: (any KeyStore)? = nil,
                identity: any IdentityProvider, logger: Logger, clock: any BrokerClock = SystemClock(),
                passphraseRounds: Int? = nil) {
        self.rules = rules
        self.passphraseRounds = passphraseRounds ?? PassphraseHash.rounds
        self.store = store
        self.keys = keys
        self.identity = identity
        self.logger = logger
        self.clock = clock
    }

    /// The clock's time.
    nonisolated func now() -> Double { clock.now() }

    /// A broker with a fixed configuration and no registrations (tests, benchmarks).
    public init(configuration: Configuration, store: any CredentialStore, keys: (any KeyStore)? = nil,
                identity: any IdentityProvider, logger: Logger, clock: any BrokerClock = SystemClock(),
                passphraseRounds: Int? = nil) {
        self.init(rules: Rules(configuration: configuration, entitlements: Entitlements(registrations: []), logger: logger),
                  store: store, keys: keys, identity: identity, logger: logger, clock: clock, passphraseRounds: passphraseRounds)
    }

    // MARK: Verbs

    /// Logs the group in with the flow the caller chose, stores the credential, announces it. The
    /// refresh token of the session it replaces, if any, is revoked.
    ///
    /// A device or browser login joins the one of the group already waiting for the user, if any
    /// (whichever its flow): `prompt` is called with its code or address (`joined` true), and the
    /// result is the same for everyone. A caller that goes (its task cancelled) leaves it to the
    /// others; the last one to go ends it. A login that may make a new account the group's (its
    /// first, or `newAccount`) is never joined, nor joins: its address or code is shown to the
    /// one that started it (`requester`, named to whoever is refused meanwhile) alone.
    ///
    /// The login must come back as the group's account (``AccountRules``), else it is refused and
    /// nothing is stored.
    public func login(_ args: LoginArguments, requester: String? = nil, mayAddAccount: Bool = true,
                      prompt: @escaping @Sendable (LoginPrompt, _ joined: Bool) -> Void) async throws -> SessionStatus {
        let config = try group(args.group)
        try requireUnlocked(for: .login(args))
        await loadAccounts()
        try requireUnlocked(for: .login(args))
        let key = try await session(config, args.account)
        if !mayAddAccount, key.account != AccountName.defaultName, try await !knownSessions(config, stored: true).contains(key) {
            throw BrokerError(.forbidden, "\(requester ?? "this program") may not add the account \(key.account) to \"\(config.name)\": adding an account is yours to do, with `msso login \(key.options)`; an app may add the account its registration pins (`account`), a host those its [forward] table lists (`accounts`)")
        }
        try await requireRoom(for: key, config)
        let setsAccount = AccountRules.maySetAccount(config, newAccount: args.newAccount == true, remembered: accountBook.account(of: config, key))
        if let running = sharedLogins[key], !running.abandoned {
            // A password login joins nothing, but passes no login that may set the account either.
            try refuseJoining(running, config, setsAccount: setsAccount)
            if args.flow != .password { return try await running.wait(prompt: prompt, joined: true) }
        }
        guard args.flow != .password else { return try await performLogin(args, config, key) { _ in } }
        guard sharedLogins.values.filter({ !$0.abandoned }).count < Self.maximumInteractiveLogins else {
            throw BrokerError(.busy, "\(Self.maximumInteractiveLogins) logins are already waiting for the user; finish or cancel one of them first")
        }
        let shared = SharedLogin(startedBy: requester ?? "another program", setsAccount: setsAccount)
        sharedLogins[key] = shared
        shared.begin(Task {
            let outcome: Result<SessionStatus, any Error>
            do {
                outcome = .success(try await performLogin(args, config, key) { shared.show($0) })
            } catch {
                outcome = .failure(error)
                if shared.abandoned { logger.info("login abandoned: everyone who waited for it left", metadata: ["group": "\(config.name)"]) }
            }
            // On the actor since performLogin returned: no login of the group can join in between.
            if sharedLogins[key] === shared { sharedLogins[key] = nil }
            shared.end(outcome)
        })
        return try await shared.wait(prompt: prompt, joined: false)
    }

    /// One login, with the flow `args` names, calling `prompt` with what to show the user.
    private func performLogin(_ args: LoginArguments, _ config: GroupConfig, _ key: AccountName,
                              prompt: @escaping @Sendable (LoginPrompt) -> Void) async throws -> SessionStatus {
        if sessions[key] == nil { sessions[key] = SessionState() }
        let logoutsBefore = sessions[key]!.logouts
        let first = loggingIn.insert(key).inserted
        defer {
            if first { loggingIn.remove(key) }
            forgetIfUnused(key)
        }
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
        try await requireMinting(config, tokens)
        let t = now()
        let credential = Credential(
            issuer: config.issuer, username: tokens.username ?? args.username,
            accessToken: tokens.accessToken,
            refreshToken: tokens.refreshToken, accessTokenExpiresAt: t + tokens.expiresIn, loggedInAt: t,
            sessionExpiresAt: t + min(config.sessionTimeout, config.sessionMax), sessionMaxAt: t + config.sessionMax,
            subject: tokens.subject)
        var outcome = AccountOutcome()
        let replaced = try await exclusively(key) { () async throws -> String? in
            // A lock that came while the user logged in: nothing is stored (the lock's promise).
            do { try requireUnlocked(for: .login(args)) } catch {
                if let refreshToken = tokens.refreshToken { _ = await identity.revoke(config, token: refreshToken, hint: .refreshToken) }
                throw error
            }
            guard sessions[key]?.logouts == logoutsBefore else {
                // "Log out once, and every app is logged out": a logout while the user was still
                // logging in (a device code not yet approved, a slow IdP) ends this login too.
                if let refreshToken = tokens.refreshToken { _ = await identity.revoke(config, token: refreshToken, hint: .refreshToken) }
                throw BrokerError(.loginDenied, "a logout of \(key) came while this login was in progress, so it was not stored; run `msso login \(key.options)` again")
            }
            let previous = try? await loadedCredentialLocked(key)
            let account = try await checkAccount(config, key, args, tokens, previous: previous, now: t)
            // Counted with the logins storing now (found by an outside test: four at once made 19).
            try reserveRoom(for: key, config)
            defer { storing.remove(key) }
            if key.account != AccountName.defaultName {
                // Listed before it is stored: a session msso does not know of would outlive `logout --all`.
                try await remember(account, config, key, required: true)
            }
            do {
                try await store.save(credential, group: key.storeName)
            } catch {
                // Not stored, so not a session: leave no live refresh token behind at the IdP.
                if let refreshToken = tokens.refreshToken { _ = await identity.revoke(config, token: refreshToken, hint: .refreshToken) }
                throw error
            }
            identity.forgetRescuedRefresh(config.session(key.account)) // an answer kept for the session replaced
            try await remember(account, config, key)
            outcome = account
            update(key) {
                $0.credential = credential
                $0.loaded = true
                $0.corrupt = false
                $0.unsaved = false
                $0.generation += 1
                $0.backoff = RefreshBackoff()
            }
            // The replaced session's token goes to its own provider only, which is the group's when it still names it.
            return previous.flatMap { madeHere($0, config.name) ? $0.refreshToken : nil }
        }
        if let replaced, replaced != tokens.refreshToken {
            // The session it replaces ends here: its refresh token must not stay alive at the IdP.
            let identity = self.identity
            Task { _ = await identity.revoke(config, token: replaced, hint: .refreshToken) }
        }
        armExpiryTimer(key)
        var status = self.status(credential, config, key)
        logger.info("logged in", metadata: ["group": "\(config.name)", "account": "\(key.account)", "until": "\(status.sessionExpiresAt ?? 0)"])
        if outcome.isNew { announceNewAccount(outcome, config, key, into: &status) }
        emit(.loggedIn, status)
        return status
    }

    /// A group that mints a token per server by resource indicators needs the session's refresh
    /// token: a login without one could sign nothing (msso never falls back to the shared token),
    /// so it is refused, said as the configuration error it is, and its token revoked.
    private func requireMinting(_ config: GroupConfig, _ tokens: TokenSet) async throws {
        guard config.tokens == .perResource, tokens.refreshToken == nil, let first = config.resources?.entries.first,
              try await identity.mintingMechanism(config, for: TokenTarget(resource: first)) == .resource else { return }
        _ = await identity.revoke(config, token: tokens.accessToken, hint: .accessToken)
        throw BrokerError(.configInvalid, "`tokens = \"per-resource\"` in [groups.\"\(config.name)\"]: its identity provider lists no token exchange (RFC 8693) and gave this login no refresh token, which resource indicators (RFC 8707) need, so it offers no way to mint a token per server; msso does not fall back to the shared token, and did not keep the login. Set `tokens = \"shared\"`, or let the client have refresh tokens (`offline_access` in `scopes` at some providers), or set `token_request = \"exchange\"` if the provider offers the exchange unlisted")
    }

    /// Slides the session window to now + timeout, never past the cap set at login.
    public func extend(_ name: String?, account: String? = nil) async throws -> SessionStatus {
        let config = try group(name)
        try requireUnlocked(for: .extend)
        let key = try await session(config, account)
        defer { forgetIfUnused(key) }
        let (credential, moved) = try await exclusively(key) { () async throws -> (Credential, Bool) in
            var credential = try requireValid(try await loadedCredentialLocked(key), key)
            let end = min(now() + config.sessionTimeout, credential.sessionMaxAt)
            guard end > credential.sessionExpiresAt else { return (credential, false) }
            credential.sessionExpiresAt = end
            try await store.save(credential, group: key.storeName)
            update(key) {
                $0.credential = credential
                $0.unsaved = false
            }
            return (credential, true)
        }
        let status = self.status(credential, config, key)
        if moved {
            armExpiryTimer(key)
            emit(.extended, status)
        }
        return status
    }

    /// Ends sessions: deletes the stored credential, revokes the tokens at the identity provider
    /// (bounded), announces it. One account of a group, or (nil) every account of the group ("log
    /// out once, and every app is logged out": none is left for the default to fall to), or with
    /// `all` every account of every group. Says which sessions ended, and whose tokens stay valid
    /// at the provider.
    public func logout(_ name: String?, account: String? = nil, all: Bool) async throws -> Methods.Logout.Result {
        if all { return try await logout(everyAccountOf: nil) }
        let config = try group(name)
        guard let account else { return try await logout(everyAccountOf: [config.name]) }
        return try await end([try await session(config, account)])
    }

    /// Ends every session of the named groups (nil: of every group): `logout --all`; `only`: that
    /// account's of each (a caller pinned to one).
    public func logout(everyAccountOf names: [String]?, only account: String? = nil) async throws -> Methods.Logout.Result {
        var keys: [AccountName] = []
        for config in configuration.groups.values.sorted(by: { $0.name < $1.name }) where names?.contains(config.name) ?? true {
            if let account { keys.append(AccountName(group: config.name, account: account)); continue }
            keys += try await knownSessions(config, stored: true)
        }
        return try await end(keys)
    }

    /// Ends each session of `keys`, every one it can: one the store refuses to delete stops no
    /// other (found by an outside test: `--all` stopped at the first), and the error then names
    /// what ended and what did not.
    private func end(_ keys: [AccountName]) async throws -> Methods.Logout.Result {
        logoutsUnderWay += 1
        defer { logoutsUnderWay -= 1 }
        let configuration = self.configuration
        var ended: [AccountName] = [], notRevoked: [Methods.Logout.NotRevoked] = [], failed: [(AccountName, BrokerError)] = []
        for key in keys {
            if sessions[key] == nil { sessions[key] = SessionState() }
            sessions[key]!.logouts += 1
            defer { forgetIfUnused(key) }
            do {
                guard let outcome = try await endSession(configuration.groups[key.group]!, key) else { continue }
                ended.append(key)
                if let outcome = outcome { notRevoked.append(outcome) }
            } catch let error as BrokerError {
                failed.append((key, error))
            }
        }
        guard let (first, error) = failed.first else { return Methods.Logout.Result(sessions: ended, notRevoked: notRevoked) }
        if ended.isEmpty, failed.count == 1 { throw error }
        let others = failed.dropFirst().map(\.0.description)
        throw BrokerError(error.name, "\(ended.isEmpty ? "no session was ended" : "logged out of \(ended.map(\.description).joined(separator: ", "))"), but not of \(first)\(others.isEmpty ? "" : " (nor \(others.joined(separator: ", ")))"): \(error.message)")
    }

    /// The state of every account of every configured group, or of one group's, or of one
    /// account's: the default account first, then the others by name.
    public func status(_ name: String?, account: String? = nil) async throws -> [SessionStatus] {
        let configs = name == nil ? configuration.groups.values.sorted { $0.name < $1.name } : [try group(name)]
        var out: [SessionStatus] = []
        for config in configs {
            var keys = account == nil ? try await knownSessions(config, stored: true) : [try await session(config, account)]
            if account == nil {
                // Every account with a session, and the default's always; not each one logged out long ago.
                try await loadSessions(of: config)
                let chosen = defaultAccount(config)
                keys = keys.filter { $0.account == chosen || $0.account == AccountName.defaultName
                    || sessions[$0]?.credential != nil || sessions[$0]?.corrupt == true }
            }
            for key in keys {
                defer { forgetIfUnused(key) }
                var status = markingLock(try await status(of: config, key))
                if status.state == .valid, let credential = sessions[key]?.credential, !credential.minted.isEmpty {
                    let now = clock.moment()
                    status.tokens = credential.minted.map {
                        MintedTokenStatus(resource: $0.resource, scopes: $0.scopes, expiresAt: mintedLife($0, key).wallEnd(at: now))
                    }.sorted { ($0.resource ?? "", $0.scopes ?? []).0 < ($1.resource ?? "", $1.scopes ?? []).0 }
                }
                out.append(status)
            }
        }
        return out
    }

    /// The state of one session (the only configured group's when `name` is nil; its default
    /// account's when `account` is nil).
    public func check(_ name: String?, account: String? = nil) async throws -> SessionStatus {
        let config = try group(name)
        let key = try await session(config, account)
        defer { forgetIfUnused(key) }
        return markingLock(try await status(of: config, key))
    }

    /// The headers that authenticate `request` (as the gate checked it: `decision`), refreshing
    /// the access token first when it is about to expire. Never returns the refresh token.
    public func sign(_ request: SignRequest, checked decision: SignDecision, target: TokenTarget = .session) async throws -> SignResponse {
        let config = try group(request.group)
        try requireUnlocked(for: .sign)
        let key = try await session(config, request.account)
        defer { forgetIfUnused(key) }
        let credential = try requireValid(try await credential(key), key)
        let token = try await accessToken(config, key, credential, for: target, renew: false).token
        try requireUnlocked(for: .sign) // locked while a refresh ran
        let signingKey = config.signing.needsKey ? try await signingKey(config) : nil
        let nonce = decision.nonce(known: dpopNonces[config.name])
        let response = SignResponse(headers: try config.signing.headers(for: request, url: decision.url, accessToken: token,
                                                                         key: signingKey, dpopNonce: nonce, now: now()))
        // Kept only once the proof that carries it is made: a sign that fails leaves nothing behind.
        if let nonce {
            if request.dpopNonce != nil, nonce != dpopNonces[config.name]?.nonce(for: decision.origin) {
                dpopNonces[config.name, default: DPoPNonces()].remember(nonce, for: decision.origin)
                publishNonces(config.name)
            } else {
                dpopNonces[config.name]?.touch(decision.origin)
            }
        }
        return response
    }

    /// The access token itself, for programs that cannot have each request signed (git, kubectl,
    /// curl): only for bearer tokens. With `renew` (a server refused the token), it is refreshed
    /// first, at most once every 10 seconds per group, so no caller can make the broker hammer
    /// the IdP. (Where it may be sent, within the group's `resources`, the gate checked.)
    public func token(_ name: String?, account: String? = nil, renew: Bool, target: TokenTarget = .session) async throws -> Methods.Token.Result {
        let config = try group(name)
        if config.signing.token == .dpop {
            throw BrokerError(.forbidden, "the tokens of \"\(config.name)\" are bound to msso's key (sign = \"dpop\"), so no other program can use them; have msso sign each request (`msso sign`)")
        }
        try requireUnlocked(for: .token)
        let key = try await session(config, account)
        defer { forgetIfUnused(key) }
        let credential = try requireValid(try await credential(key), key)
        let renewing = renew && now() - (sessions[key]?.renewedAt ?? 0) >= 10
        if renewing { sessions[key]?.renewedAt = now() }
        let (token, life) = try await accessToken(config, key, credential, for: target, renew: renewing)
        try requireUnlocked(for: .token) // locked while a refresh ran
        let header: String
        switch config.signing.token {
        case .header(let name): header = name
        default: header = "Bearer"
        }
        return Methods.Token.Result(accessToken: token, expiresAt: life.wallEnd(at: clock.moment()), header: header)
    }

    /// The public half of the group's signing key (made on first use). With `rotate`, a new key
    /// replaces it; tokens bound to the old key (DPoP) die with it, so that ends the session.
    public func key(_ name: String?, rotate: Bool) async throws -> KeyDescription {
        let config = try group(name)
        if rotate {
            try requireUnlocked(for: .rotateKeys)
            guard let keys else { throw BrokerError(.internal, "this broker has no key store") }
            let fresh = SigningKey.generate(config.keyKind)
            try await exclusively(config.session) {
                try await keys.saveKey(StoredKey(fresh, createdAt: now()), group: config.name)
                signingKeys[config.name] = fresh
                publishGroup(config.name)
            }
            if config.signing.token == .dpop {
                for key in try await knownSessions(config, stored: true) { _ = try await endSession(config, key) }
            }
        }
        let key = try await signingKey(config)
        return KeyDescription(group: config.name, kind: key.kind.rawValue, keyID: key.thumbprint,
                              jwk: Dictionary(uniqueKeysWithValues: key.publicJWK), pem: key.publicPEM)
    }

    // MARK: Subscriptions

    /// Sends the sink every signal of the named groups (when nil, of every group: those a reload
    /// configures later too), until ``unsubscribe(_:)``. Subscribing again adds groups. Returns
    /// the groups it hears now.
    public func subscribe(_ sink: any SignalSink, groups names: [String]?, account: String? = nil) throws -> [String] {
        let wanted = try names.map { try $0.map { try group($0).name } }
        return subscribers.add(sink, groups: wanted, account: account) ?? configuration.groups.keys.sorted()
    }

    public func unsubscribe(_ sink: any SignalSink) {
        subscribers.remove(sink)
    }

    // MARK: Lifecycle

    /// Loads every group's credential so expiry signals are armed after a restart. A locked or
    /// absent keyring, or a corrupt item, is logged; the group is read again on the next request.
    public func preload() async {
        for config in configuration.groups.values.sorted(by: { $0.name < $1.name }) {
            for key in (try? await knownSessions(config, stored: true)) ?? [AccountName(group: config.name, account: AccountName.defaultName)] {
                do { _ = try await credential(key) } catch {
                    logger.warning("could not load credential at start", metadata: ["group": "\(key.group)", "account": "\(key.account)", "error": "\(error)"])
                }
            }
        }
    }

    /// Stops the timers, and waits for the refreshes under way to be stored and the logouts under
    /// way to end, `seconds` at most (on shutdown): the IdP may have rotated the refresh token
    /// already, and its answer is the session; a logout stopped halfway leaves some of its
    /// sessions logged in. A refresh that takes longer is left to mssod-idp, which keeps its answer
    /// for the next mssod (``IdentityProvider/rescuedRefresh(_:spent:)``); a logout, to the next
    /// mssod, which finishes the sessions it marked ended.
    public func shutdown(within seconds: Double = 3) async {
        for key in sessions.keys {
            sessions[key]?.expiryTimer?.cancel()
            sessions[key]?.expiringTimer?.cancel()
        }
        let refreshes = sessions.values.compactMap(\.refresh)
        guard !refreshes.isEmpty || logoutsUnderWay > 0 else { return }
        logger.info("waiting for the refreshes and logouts under way", metadata: ["refreshes": "\(refreshes.count)", "logouts": "\(logoutsUnderWay)",
                                                                             "at most": "\(seconds)s"])
        let (ended, end) = AsyncStream<Void>.makeStream()
        Task { [clock] in
            for refresh in refreshes { _ = try? await refresh.value }
            while await self.logoutsUnderWay > 0 { await clock.sleep(0.02) }
            end.yield()
        }
        Task { [clock] in
            await clock.sleep(seconds)
            end.yield()
        }
        for await _ in ended { break }
    }

    // MARK: Internals

    func group(_ name: String?) throws -> GroupConfig {
        try configuration.group(named: name)
    }

    /// The group's signing key: from memory, else the keyring, else made and stored.
    func signingKey(_ config: GroupConfig) async throws -> SigningKey {
        if let key = signingKeys[config.name] { return key }
        guard let keys else { throw BrokerError(.configInvalid, "the \(config.signing) profile of \"\(config.name)\" needs a key store") }
        return try await exclusively(config.session) {
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
            publishGroup(config.name)
            return key
        }
    }

    func update(_ key: AccountName, _ change: (inout SessionState) -> Void) {
        change(&sessions[key, default: SessionState()])
        measureWindow(key)
        publish(key)
    }

    /// Runs `body` while holding the session's lock: state changes of one session happen one at a time.
    func exclusively<T>(_ key: AccountName, _ body: () async throws -> T) async throws -> T {
        if sessions[key] == nil { sessions[key] = SessionState() }
        if sessions[key]!.locked {
            await withCheckedContinuation { sessions[key]!.waiting.append($0) }
        } else {
            sessions[key]!.locked = true
        }
        defer {
            if sessions[key]!.waiting.isEmpty {
                sessions[key]!.locked = false
            } else {
                sessions[key]!.waiting.removeFirst().resume() // the lock passes straight to the next waiter
            }
        }
        return try await body()
    }

    /// The session's credential; from memory once loaded.
    func credential(_ key: AccountName) async throws -> Credential? {
        if let state = sessions[key], state.loaded { return state.credential }
        if let loading = sessions[key]?.loading { return try await loading.value }
        let loading = Task { try await self.exclusively(key) { try await self.loadedCredentialLocked(key) } }
        sessions[key, default: SessionState()].loading = loading
        defer { sessions[key]?.loading = nil }
        return try await loading.value
    }

    /// Same, for a caller already holding the session's lock. A stored item that is not a
    /// credential (see ``Credential/init(from:)``) marks the session corrupt and reads as none.
    func loadedCredentialLocked(_ key: AccountName) async throws -> Credential? {
        if let state = sessions[key], state.loaded { return state.credential }
        var credential: Credential?
        do {
            credential = try await store.load(group: key.storeName)
        } catch let error as BrokerError where error.name == .corrupt {
            logger.error("the stored credential is corrupt", metadata: ["group": "\(key.group)", "account": "\(key.account)"])
            update(key) {
                $0.credential = nil
                $0.corrupt = true
                $0.loaded = true
            }
            return nil
        }
        if let ended = credential, ended.loggedOutAt != nil {
            // A logout that a stopped mssod began: finished here, never read as a session.
            credential = nil
            if let config = configuration.groups[key.group] {
                logger.notice("finishing a logout an earlier mssod began", metadata: ["group": "\(key.group)", "account": "\(key.account)"])
                _ = await revokeTokens(of: ended, config, key)
            }
            do { try await store.delete(group: key.storeName) } catch {
                logger.warning("the ended session's item could not be deleted yet", metadata: ["group": "\(key.group)", "account": "\(key.account)"])
            }
        }
        update(key) {
            $0.credential = credential
            $0.corrupt = false
            $0.loaded = true
        }
        await takeRescuedRefresh(key)
        armExpiryTimer(key)
        return sessions[key]?.credential
    }

    /// After a load: the answer to a refresh of the stored session that an earlier mssod did not
    /// store (it died, stopped, or its store refused) replaces the spent token. Any other kept
    /// answer is dropped (``dropRescuedRefresh(_:_:stored:)``).
    private func takeRescuedRefresh(_ key: AccountName) async {
        guard let config = configuration.groups[key.group]?.session(key.account) else { return }
        let stored = sessions[key]?.credential
        guard let kept = await identity.rescuedRefresh(config, spent: stored?.refreshToken) else { return }
        guard var credential = stored, kept.answersStored,
              kept.tokens.subject == nil || credential.subject == nil || kept.tokens.subject == credential.subject else {
            return dropRescuedRefresh(config, kept, stored: stored)
        }
        credential.refreshToken = kept.tokens.refreshToken ?? credential.refreshToken
        if !kept.minted { // a mint's access token is for one server or app: it is asked for again when needed
            credential.accessToken = kept.tokens.accessToken
            credential.accessTokenExpiresAt = now() + kept.tokens.expiresIn
        }
        update(key) {
            $0.credential = credential
            $0.unsaved = true
        }
        logger.notice("took the answer to a refresh that an earlier mssod did not store", metadata: ["group": "\(key.group)", "account": "\(key.account)"])
        do {
            try await store.save(credential, group: key.storeName)
            update(key) { $0.unsaved = false }
            identity.forgetRescuedRefresh(config)
        } catch {
            // Kept where it was, and in memory: stored with the next change.
            logger.warning("the taken refresh answer could not be stored yet", metadata: ["group": "\(key.group)", "account": "\(key.account)", "error": "\(error)"])
        }
    }

    /// Drops a kept answer that is not the stored session's (logged out or in again since), and
    /// revokes its refresh token, unless that is the stored session's own (the process died
    /// between storing the answer and removing it) or the session is another provider's.
    private func dropRescuedRefresh(_ config: GroupConfig, _ kept: RescuedTokens, stored: Credential?) {
        identity.forgetRescuedRefresh(config)
        guard let token = kept.tokens.refreshToken, token != stored?.refreshToken,
              stored.map({ madeHere($0, config.name) }) ?? true else { return }
        let identity = self.identity
        Task { _ = await identity.revoke(config, token: token, hint: .refreshToken) }
    }

    func requireValid(_ credential: Credential?, _ key: AccountName) throws -> Credential {
        if sessions[key]?.corrupt == true {
            throw BrokerError(.corrupt, "the stored credential of \(key) is damaged or not msso's; run `msso logout \(key.options)`, then log in again")
        }
        guard let credential else {
            throw BrokerError(.notLoggedIn, "not logged in to \(key)\(otherAccounts(key)); run `msso login \(key.options)`")
        }
        guard madeHere(credential, key.group) else {
            throw BrokerError(.expired, "the SSO session of \(key) was made with another identity provider (\(TerminalText.safe(String(credential.issuer.prefix(200))))) than the group names now; run `msso login \(key.options)`")
        }
        guard window(of: credential, key).isOpen(at: clock.moment()) else {
            throw BrokerError(.expired, credential.refreshToken == nil && credential.accessTokenExpiresAt < credential.sessionExpiresAt
                ? "the access token of \(key) has expired, and its identity provider gave no refresh token to renew it; run `msso login \(key.options)`"
                : "the SSO session of \(key) has expired; run `msso login \(key.options)`")
        }
        return credential
    }

    func status(_ credential: Credential, _ config: GroupConfig, _ key: AccountName) -> SessionStatus {
        var status = credential.status(group: config.name, window: window(of: credential, key), now: clock.moment())
        status.admin = config.admin
        status.account = key.account
        status.isDefault = key.account == defaultAccount(config) ? true : nil
        return status
    }

    private func status(of config: GroupConfig, _ key: AccountName) async throws -> SessionStatus {
        guard let credential = try await credential(key) else {
            let state: SessionStatus.State = sessions[key]?.corrupt == true ? .corrupt : .notLoggedIn
            var status = SessionStatus(group: config.name, state: state, issuer: config.issuer, admin: config.admin)
            status.account = key.account
            status.isDefault = key.account == defaultAccount(config) ? true : nil
            return status
        }
        return status(credential, config, key)
    }

    /// Logout of one group: nil if it had no session (nor a corrupt item, which it clears); else
    /// what stays valid at the identity provider, nil inside when nothing does.
    func endSession(_ config: GroupConfig, _ key: AccountName) async throws -> Methods.Logout.NotRevoked?? {
        let ended = try await exclusively(key) { () async throws -> Methods.Logout.NotRevoked?? in
            let credential = try await loadedCredentialLocked(key)
            guard credential != nil || sessions[key]?.corrupt == true else { return .none }
            let retired = sessions[key]?.retired ?? []
            // The keyring first: if it refuses (locked), nothing has changed, in memory or at the
            // IdP, and the error says so. Holding the lock, no refresh can write back meanwhile.
            // The item is marked ended, then the tokens revoked, then it is deleted: a mssod
            // stopped at any point leaves no session, and no token the next one cannot revoke.
            var marked = false
            if var ending = credential {
                ending.loggedOutAt = now()
                do {
                    try await store.save(ending, group: key.storeName)
                    marked = true
                } catch let error as BrokerError where error.name == .keyringUnavailable {
                    // No room to mark it (a full kernel quota): deleted first, as before.
                    logger.warning("could not mark the session ended before revoking its tokens", metadata: ["group": "\(key.group)", "account": "\(key.account)"])
                } catch let error as BrokerError where error.name == .keyringLocked {
                    throw BrokerError(.keyringLocked, "the keyring is locked, so msso could not log out of \(key): nothing was ended, here or at the identity provider; unlock it (log in to the desktop, or unlock it in your keyring manager) and try again")
                }
            }
            if !marked { try await store.delete(group: key.storeName) }
            await forgetAccount(key)
            identity.forgetRescuedRefresh(config.session(key.account)) // loaded above, so any the session had was taken
            update(key) {
                $0.credential = nil
                $0.corrupt = false
                $0.unsaved = false
                $0.generation += 1
                $0.refresh?.cancel()
                $0.refresh = nil
                $0.expiryTimer?.cancel()
                $0.expiringTimer?.cancel()
                $0.backoff = RefreshBackoff()
                $0.retired = []
            }
            guard let credential else { return .some(nil) } // a corrupt item: no token to revoke
            let outcome = await revokeTokens(of: credential, config, key, retired: retired)
            if marked {
                do { try await store.delete(group: key.storeName) } catch {
                    // Marked ended: it never reads as a session; the next read finishes it.
                    logger.warning("the ended session's item could not be deleted yet", metadata: ["group": "\(key.group)", "account": "\(key.account)", "error": "\(error)"])
                }
            }
            return .some(outcome)
        }
        if ended != nil {
            logger.info("logged out", metadata: ["group": "\(key.group)", "account": "\(key.account)"])
            var status = SessionStatus(group: config.name, state: .notLoggedIn, issuer: config.issuer, admin: config.admin)
            status.account = key.account
            emit(.loggedOut, status)
        }
        return ended
    }

    /// Makes the identity provider forget an ended session: its refresh token, then its access
    /// token while it lives (revoking the one does not take the other along at every provider).
    /// Nil when both are forgotten, or there was nothing left to forget.
    func revokeTokens(of credential: Credential, _ config: GroupConfig, _ key: AccountName,
                      retired: [(token: String, expiresAt: Double)] = []) async -> Methods.Logout.NotRevoked? {
        guard madeHere(credential, config.name) else {
            // Never to the provider the group names now: they are another's tokens.
            return Methods.Logout.NotRevoked(group: config.name, account: key.account, reason: "the session was made with another identity provider than \"\(config.name)\" names now, so its tokens were not sent to either",
                                             accessTokenExpiresAt: credential.accessTokenExpiresAt > now() ? credential.accessTokenExpiresAt : nil,
                                             refreshToken: credential.refreshToken != nil)
        }
        var refreshKept = false, accessKept = false, reasons: [String] = []
        func note(_ outcome: Revocation) -> Bool {
            switch outcome {
            case .revoked: return false
            case .notOffered: reasons.append("the identity provider of \"\(config.name)\" offers no token revocation (RFC 7009)")
            case .failed(let why): reasons.append(why)
            }
            return true
        }
        if let refreshToken = credential.refreshToken {
            refreshKept = note(await identity.revoke(config, token: refreshToken, hint: .refreshToken))
        }
        if tokenLeft(credential, key) > 0 {
            // Asked only where the refresh token's revocation went through (or there was none): a
            // provider that offers none, refuses or does not answer would do the same again, and a
            // logout waits for one bound at most.
            if refreshKept {
                accessKept = true
            } else {
                accessKept = note(await identity.revoke(config, token: credential.accessToken, hint: .accessToken))
            }
        }
        // The tokens minted for one server or app go too, all at once (each revocation is bounded
        // in time): found by an outside test, they stayed usable for an hour after "revoked".
        var mintedKept: [MintedToken] = []
        // And those a renewal replaced while they still worked (kept in memory only: found by an
        // outside test, a token renewed within `refresh_lead` outlived the logout).
        let alive = credential.minted.filter { mintedLife($0, key).remaining(at: clock.moment()) > 0 }
            + retired.filter { $0.expiresAt > now() }.map { MintedToken(.session, accessToken: $0.token, expiresAt: $0.expiresAt) }
        if !alive.isEmpty {
            let identity = self.identity
            let outcomes = await withTaskGroup(of: (MintedToken, Revocation).self) { tasks in
                for token in alive { tasks.addTask { (token, await identity.revoke(config, token: token.accessToken, hint: .accessToken)) } }
                var all: [(MintedToken, Revocation)] = []
                for await outcome in tasks { all.append(outcome) }
                return all
            }
            for (token, outcome) in outcomes where note(outcome) { mintedKept.append(token) }
        }
        guard refreshKept || accessKept || !mintedKept.isEmpty, let reason = reasons.first else { return nil }
        let lastAccess = ([accessKept ? credential.accessTokenExpiresAt : nil] + mintedKept.map { Optional($0.expiresAt) }).compactMap { $0 }.max()
        return Methods.Logout.NotRevoked(group: config.name, account: key.account, reason: reason, accessTokenExpiresAt: lastAccess,
                                         refreshToken: refreshKept, mintedTokens: mintedKept.isEmpty ? nil : mintedKept.count)
    }

    func emit(_ signal: SignalName, _ status: SessionStatus) {
        subscribers.deliver(Signal(signal: signal, group: status.group, status: status))
    }
}

extension SignRequest {
    /// The request's URL, once checked: absolute http(s) with a host, and a method of letters.
    public func validatedURL() throws(BrokerError) -> URL {
        guard let url = URL(string: url), let scheme = url.scheme?.lowercased(),
              scheme == "https" || scheme == "http", url.host != nil else {
            throw BrokerError(.badRequest, "`url` must be an absolute http(s) URL")
        }
        guard !method.isEmpty, method.utf8.count <= 32, method.utf8.allSatisfy({ $0 | 0x20 >= UInt8(ascii: "a") && $0 | 0x20 <= UInt8(ascii: "z") }) else {
            throw BrokerError(.badRequest, "`method` must be an HTTP method such as GET")
        }
        return url
    }
}

extension URL {
    /// `scheme://host:port`, the unit DPoP nonces are kept by (the broker's for resource servers,
    /// the identity provider's for its token endpoint).
    public var origin: String {
        "\(scheme ?? "")://\(host ?? "")\(port.map { ":\($0)" } ?? "")"
    }
}
