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

    /// The account remembered for `group`, if any (for `status`, doctor, tests).
    public func rememberedAccount(_ group: String) async -> RememberedAccount? {
        await loadAccounts()
        guard let config = configuration.groups[group] else { return nil }
        return accountBook.account(of: config)
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
    func checkAccount(_ config: GroupConfig, _ args: LoginArguments, _ tokens: TokenSet, previous: Credential?,
                      now: Double) async throws -> AccountOutcome {
        var remembered = accountBook.account(of: config)
        if remembered == nil, let previous, let subject = previous.subject,
           previous.issuer.utf8.elementsEqual(config.issuer.utf8) {
            remembered = RememberedAccount(issuer: config.issuer, subject: subject, username: previous.username, since: previous.loggedInAt)
        }
        do {
            return try AccountRules.check(config, tokens: tokens, newAccount: args.newAccount == true, remembered: remembered,
                                          loginUser: accountBook.loginUser, now: now)
        } catch {
            logger.warning("a login came back as another account than the group's, and was refused", metadata: ["group": "\(config.name)"])
            if let refreshToken = tokens.refreshToken { _ = await identity.revoke(config, token: refreshToken, hint: .refreshToken) }
            _ = await identity.revoke(config, token: tokens.accessToken, hint: .accessToken)
            throw error
        }
    }

    /// Keeps what a stored login's check decided (holding the group's lock). A write that fails is
    /// logged: the account stays remembered in memory, and until mssod restarts.
    func remember(_ outcome: AccountOutcome, _ config: GroupConfig) async {
        guard outcome.changes || accountBook.account(of: config) != outcome.remember else { return }
        accountBook.accounts[config.name] = outcome.remember
        if outcome.isNew { accountBook.damaged = nil } // what was not known is known now
        guard let memory = accountBook.memory else { return }
        do {
            try await memory.save(accountBook.accounts)
        } catch {
            logger.error("the group's account could not be kept: after a restart, its next login is announced as a new account",
                         metadata: ["group": "\(config.name)", "error": "\(error)"])
        }
    }

    /// Marks the login's status as a new account, and says so in the log (the notifier and the
    /// audit log take it from the status).
    func announceNewAccount(_ outcome: AccountOutcome, _ config: GroupConfig, into status: inout SessionStatus) {
        status.newAccount = true
        status.previousAccount = outcome.previous?.shown
        logger.warning("logged in to a new account", metadata: [
            "group": "\(config.name)", "account": "\(status.username ?? "unnamed")", "previous": "\(outcome.previous?.shown ?? "none")",
        ])
    }
}
