import MSSOProtocol

/// The account each group logs in as (``AccountRules``): what a login is compared with before
/// anything is stored, and what is announced when it changes.
extension Broker {
    /// Where the groups' accounts are kept from now on (mssod: ``AccountFile``); without it they
    /// are remembered in memory only (tests, benchmarks).
    public func keepAccounts(in memory: any AccountMemory) {
        accountBook.memory = memory
        accountBook.loaded = false
        accountBook.loading = nil
    }

    /// The name of the Unix user the broker serves, for `account = "login-user"` (tests).
    func setLoginUser(_ name: String?) {
        accountBook.loginUser = name
    }

    /// The account remembered for `group`'s session of `account`, if any (for `status`, doctor, tests).
    public func rememberedAccount(_ group: String, account: String = AccountName.defaultName) async -> RememberedAccount? {
        await loadAccounts()
        guard let config = configuration.groups[group] else { return nil }
        return accountBook.account(of: config, AccountName(group: group, account: account))
    }

    // MARK: Which account a call is about

    /// The session a call about `config` names: its `account`, else the group's default
    /// (``defaultAccount(_:)``, once every account the group has is read).
    func session(_ config: GroupConfig, _ account: String?) async throws -> AccountName {
        if let account {
            if let problem = AccountName.problem(account) { throw BrokerError(.badRequest, problem) }
            return AccountName(group: config.name, account: account)
        }
        // A group with one account needs nothing read to know it (nor to fail twice on a hung keyring).
        if config.defaultAccount == nil, try await knownSessions(config).count > 1 { try await loadSessions(of: config) }
        return AccountName(group: config.name, account: defaultAccount(config))
    }

    /// The group's default account: `default_account`; else the one named "default" once it has
    /// been logged in (it stays the default when logged out: a call then hears "not logged in",
    /// never acts as another account unannounced; found by an outside test); else the one logged
    /// in first. From memory: ``loadSessions(of:)`` reads them first.
    func defaultAccount(_ config: GroupConfig) -> String {
        if let named = config.defaultAccount { return named }
        let home = AccountName(group: config.name, account: AccountName.defaultName)
        if sessions[home]?.credential != nil || accountBook.accounts[home.storeName] != nil { return AccountName.defaultName }
        let others = sessions.compactMap { key, state -> (String, Double)? in
            guard key.group == config.name, let credential = state.credential else { return nil }
            return (key.account, credential.loggedInAt)
        }
        return others.min { ($0.1, $0.0) < ($1.1, $1.0) }?.0 ?? AccountName.defaultName
    }

    /// Every session of the group msso knows of: its default account's, then those a login named
    /// (remembered in the account file), by name. `stored`: and every one the store holds an item
    /// of, whatever the file says (a file lost or damaged must not let a session outlive a logout:
    /// found by an outside test).
    func knownSessions(_ config: GroupConfig, stored: Bool = false) async throws -> [AccountName] {
        await loadAccounts()
        var named = Set(accountBook.namedAccounts(of: config.name) + (config.defaultAccount.map { [$0] } ?? []))
            .union(sessions.keys.filter { $0.group == config.name && $0.account != AccountName.defaultName }.map(\.account))
        if stored { named.formUnion(try await store.storedAccounts(group: config.name)) }
        return [AccountName(group: config.name, account: AccountName.defaultName)]
            + named.subtracting([AccountName.defaultName]).sorted().map { AccountName(group: config.name, account: $0) }
    }

    /// Drops what memory holds of a named account that has no session and is not remembered, once
    /// nothing uses it: a call naming made-up accounts must not make the daemon hold one each
    /// (found by an outside test: 72,000 names, 139 MB, and a status too large to send).
    func forgetIfUnused(_ key: AccountName) {
        guard key.account != AccountName.defaultName, accountBook.accounts[key.storeName] == nil, !loggingIn.contains(key),
              let state = sessions[key], state.credential == nil, !state.corrupt, !state.unsaved, !state.locked, state.waiting.isEmpty,
              state.loading == nil, state.refresh == nil, state.mints.isEmpty, sharedLogins[key] == nil else { return }
        sessions[key] = nil
        published.withLock { $0.sessions[key] = nil }
    }

    /// Reads every known session of the group once, so that the default is chosen knowing them;
    /// a keyring that cannot be read says so (a damaged item reads as none: ``loadedCredentialLocked(_:)``).
    func loadSessions(of config: GroupConfig) async throws {
        for key in try await knownSessions(config) where sessions[key]?.loaded != true {
            _ = try await credential(key)
        }
    }

    /// Refuses a login into a new account of a group that has ``AccountName/maximumPerGroup`` sessions.
    func requireRoom(for key: AccountName, _ config: GroupConfig) async throws {
        guard try await !knownSessions(config).contains(key) else { return } // one it has: no new account
        try await loadSessions(of: config)
        let held = sessions.filter { $0.key.group == config.name && $0.value.credential != nil }.map(\.key.account)
        guard !held.contains(key.account), held.count >= AccountName.maximumPerGroup else { return }
        throw BrokerError(.busy, "\"\(config.name)\" already has \(held.count) accounts logged in (\(held.sorted().joined(separator: ", "))), the most it keeps; log one out first (`msso logout --group \(config.name) --account NAME`)")
    }

    /// As ``requireRoom(for:_:)``, at the moment a login stores (no suspension between the count
    /// and the reservation): the sessions held and those being stored.
    func reserveRoom(for key: AccountName, _ config: GroupConfig) throws(BrokerError) {
        let held = Set(sessions.filter { $0.key.group == config.name && $0.value.credential != nil }.map(\.key))
            .union(storing.filter { $0.group == config.name })
        guard held.contains(key) || held.count < AccountName.maximumPerGroup else {
            throw BrokerError(.busy, "\"\(config.name)\" already has \(held.count) accounts logged in or logging in (\(held.map(\.account).sorted().joined(separator: ", "))), the most it keeps; log one out first (`msso logout --group \(config.name) --account NAME`)")
        }
        storing.insert(key)
    }

    /// ", which has accounts a, b (log in to one with --account NAME)" for a refusal about `key`,
    /// when the group has sessions of other accounts; "" otherwise.
    func otherAccounts(_ key: AccountName) -> String {
        let others = sessions.filter { $0.key.group == key.group && $0.key != key && $0.value.credential != nil }.map(\.key.account).sorted()
        guard !others.isEmpty else { return "" }
        return " (its logged-in account\(others.count == 1 ? " is" : "s are") \(others.joined(separator: ", ")): name one with --account or MSSO_ACCOUNT)"
    }

    /// Reads the kept accounts once (later callers share the read).
    func loadAccounts() async {
        guard !accountBook.loaded else { return }
        guard let memory = accountBook.memory else {
            accountBook.loaded = true
            return
        }
        let loading = accountBook.loading ?? Task { await memory.load() }
        accountBook.loading = loading
        let read = await loading.value
        guard !accountBook.loaded else { return } // another caller took it in meanwhile
        accountBook.accounts = read.accounts
        accountBook.damaged = read.damaged
        accountBook.loaded = true
        accountBook.loading = nil
        if let damaged = read.damaged {
            logger.warning("the groups' accounts could not all be read: a login of such a group is announced as a new account", metadata: ["problem": "\(damaged)"])
        }
    }

    /// Throws `Busy` when a login asked now may not join the one waiting: either may end in a new
    /// account, and its address or code is for the program that started it alone.
    func refuseJoining(_ running: SharedLogin, _ config: GroupConfig, setsAccount: Bool) throws(BrokerError) {
        let name = config.name
        if running.setsAccount {
            throw BrokerError(.busy, "a login of \"\(name)\" that may make a new account the group's (its first login, or --new-account) is waiting for the user, started by \(running.startedBy); no other program may join such a login, so that none can finish it as an account of its own: finish it where it was started, or end that program, then try again")
        }
        if setsAccount {
            throw BrokerError(.busy, "a login of \"\(name)\" is already waiting for the user, started by \(running.startedBy); finish it, or end that program, then ask for a new account again")
        }
    }

    /// Applies the account rules to a login's tokens (holding the group's lock, before anything is
    /// stored). A refused login's tokens are revoked at the provider, since nothing will use them.
    /// A group that remembers no account, but holds a session from before accounts were kept,
    /// counts that session's account as its own.
    func checkAccount(_ config: GroupConfig, _ key: AccountName, _ args: LoginArguments, _ tokens: TokenSet, previous: Credential?,
                      now: Double) async throws -> AccountOutcome {
        var remembered = accountBook.account(of: config, key)
        if remembered == nil, let previous, let subject = previous.subject,
           previous.issuer.utf8.elementsEqual(config.issuer.utf8) {
            remembered = RememberedAccount(issuer: config.issuer, subject: subject, username: previous.username, since: previous.loggedInAt)
        }
        do {
            return try AccountRules.check(config, key, tokens: tokens, newAccount: args.newAccount == true, remembered: remembered,
                                          loginUser: accountBook.loginUser, now: now)
        } catch {
            logger.warning("a login came back as another account than the group's, and was refused", metadata: ["group": "\(config.name)"])
            if let refreshToken = tokens.refreshToken { _ = await identity.revoke(config, token: refreshToken, hint: .refreshToken) }
            _ = await identity.revoke(config, token: tokens.accessToken, hint: .accessToken)
            throw error
        }
    }

    /// Keeps what a stored login's check decided (holding the session's lock). A write that fails
    /// is logged: the account stays remembered in memory, and until mssod restarts; `required`
    /// (an account a login named, which the file lists) throws instead, before anything is stored.
    func remember(_ outcome: AccountOutcome, _ config: GroupConfig, _ key: AccountName, required: Bool = false) async throws {
        guard outcome.changes || accountBook.account(of: config, key) != outcome.remember else { return }
        let before = accountBook.accounts[key.storeName]
        accountBook.accounts[key.storeName] = outcome.remember
        if outcome.isNew { accountBook.damaged = nil } // what was not known is known now
        try await keepAccounts(required: required, key, before: before)
    }

    /// A named account's entry goes with its session (so the file holds at most the accounts
    /// with one: found by an outside test, it grew past what it may be and was then overwritten).
    func forgetAccount(_ key: AccountName) async {
        guard key.account != AccountName.defaultName, accountBook.accounts.removeValue(forKey: key.storeName) != nil else { return }
        try? await keepAccounts(required: false, key, before: nil)
    }

    private func keepAccounts(required: Bool, _ key: AccountName, before: RememberedAccount?) async throws {
        guard let memory = accountBook.memory else { return }
        do {
            try await memory.save(accountBook.accounts)
        } catch {
            if required {
                accountBook.accounts[key.storeName] = before
                throw BrokerError(.internal, "msso could not write down the account \(key.account) of \"\(key.group)\" (\(error)), so the login was not stored; check the state directory, then log in again")
            }
            logger.error("the group's account could not be kept: after a restart, its next login is announced as a new account",
                         metadata: ["group": "\(key.group)", "account": "\(key.account)", "error": "\(error)"])
        }
    }

    /// Marks the login's status as a new account, and says so in the log (the notifier and the
    /// audit log take it from the status).
    func announceNewAccount(_ outcome: AccountOutcome, _ config: GroupConfig, _ key: AccountName, into status: inout SessionStatus) {
        status.newAccount = true
        status.previousAccount = outcome.previous?.shown
        logger.warning("logged in to a new account", metadata: [
            "group": "\(config.name)", "session": "\(key.account)", "account": "\(status.username ?? "unnamed")", "previous": "\(outcome.previous?.shown ?? "none")",
        ])
    }
}
