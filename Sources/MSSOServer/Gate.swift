import FoundationEssentials
import MSSOCore
import MSSOProtocol

/// Who is calling, worked out for each call from the process that sent it.
struct Caller: Sendable {
    let uid: UInt32
    let pid: Int32
    let role: AccessPolicy.Role
    let app: AppIdentity
    /// The registrations the app matches.
    let registrations: [AppRegistration]
    /// The remote host the call came from, through an SSH forward (role ``AccessPolicy/Role/forwarded``).
    var host: String? = nil
    /// That host's `[forward."HOST"]` table as the configuration has it now (nil: none any more,
    /// or forwarding turned off).
    var forward: ForwardRule? = nil
    /// Which forward (its socket) the call came through: one `msso ssh` session.
    var forwardSession: String? = nil

    /// The groups the caller may use among the configured ones: those its registrations give, or
    /// its host's table names.
    func usableGroups(_ configuration: Configuration) -> Set<String> {
        if host != nil { return Set(forward?.groups ?? []).intersection(configuration.groups.keys) }
        return Set(registrations.flatMap(\.groups)).intersection(configuration.groups.keys)
    }

    /// The caller in words, for refusals.
    var described: String {
        host.map { "host \($0)" } ?? app.executable ?? app.flatpak ?? "this program"
    }
}

/// What a call may do, decided once by the ``Gate`` and carried to its answer.
struct Decision: Sendable {
    let action: AccessPolicy.Action
    /// The group the call is about (nil: a call about several groups, or about none).
    var group: GroupConfig?
    /// For `status`, `subscribe` and `logout --all` without a group: the groups they cover (nil:
    /// every configured group).
    var groups: [String]?
    /// A `sign` as checked: its URL an absolute http(s) URL within the group's `resources`, its
    /// DPoP nonce of a sane size (carried to the path that signs, which checks nothing again).
    var sign: SignDecision?
    /// Which token a `sign` or `token` carries: the session's, or one minted for the server of
    /// `resources` its URL falls in (`tokens = "per-resource"`).
    var target = TokenTarget.session
    /// The account of the group the call is about: the one it names, or its registration's
    /// (`account`); nil: the group's default, which the broker knows.
    var account: String?
    /// For a `login` naming an account: whether it may be one the group does not have yet.
    var mayAddAccount = true
    /// For `status` about several groups: the only accounts the caller may see (its registrations'
    /// pins, its host's `accounts`); nil: every account.
    var visibleAccounts: Set<String>?
    /// Whether the user is asked first (``AccessPolicy/Rule/confirm``).
    var confirm = false
}

/// Applies the access table (``AccessPolicy/rule(for:)``) to a call: the caller's role, the
/// groups it may touch, a forwarded host's table, root's password login, where a token may go
/// (`resources`), the lock, and whether the user is asked. Every call but `ping` (which touches
/// nothing and is answered before anyone is identified) passes it, once.
struct Gate: Sendable {
    let policy: AccessPolicy
    let rules: Rules

    /// The decision for `arguments` from `caller`, or the refusal. `group`: the group the call
    /// turned out to be about, for its audit row, even when refused.
    func decide(_ arguments: CallArguments, _ caller: Caller, locked: Bool, group: inout String?) throws(BrokerError) -> Decision {
        let snapshot = rules.current
        let action = AccessPolicy.Action(arguments)
        let rule = AccessPolicy.rule(for: action)
        let access = rule.access(for: caller.role)
        try admit(action, access, caller, arguments, snapshot.configuration)
        // Limited to the groups its registrations give, or its host's table names.
        let limited = access == .registeredGroups || access == .hostTable
        var decision = Decision(action: action)
        func resolve(_ name: String?) throws(BrokerError) -> GroupConfig {
            try self.resolve(name, caller, limited: limited, snapshot, into: &group)
        }
        func mine() -> [String]? { limited ? caller.usableGroups(snapshot.configuration).sorted() : nil }
        switch arguments {
        case .status(let args):
            if let name = args.group { decision.group = try resolve(name) } else { decision.groups = mine() }
            if args.group == nil { decision.account = try account(args.account, of: nil, caller) }
            if caller.host != nil, let accounts = caller.forward?.accounts { decision.visibleAccounts = Set(accounts) }
            let pins = caller.registrations.compactMap(\.account)
            if caller.host == nil, !pins.isEmpty { decision.visibleAccounts = Set(pins) }
        case .subscribe(let args):
            if let names = args.groups {
                var resolved: [String] = []
                for name in names { resolved.append(try resolve(name).name) }
                decision.groups = resolved
            } else {
                decision.groups = mine()
            }
            decision.account = try account(args.account, of: nil, caller)
        case .logout(let args) where args.all == true:
            decision.groups = mine()
            decision.account = try account(nil, of: nil, caller) // a pinned app's `--all` ends its account alone
        case .check(let args): decision.group = try resolve(args.group)
        case .login(let args): decision.group = try resolve(args.group)
        case .extend(let args): decision.group = try resolve(args.group)
        case .logout(let args): decision.group = try resolve(args.group)
        case .keys(let args): decision.group = try resolve(args.group)
        case .token(let args):
            let config = try resolve(args.group)
            try config.resources?.authorize(args.resource, group: config.name, verb: "token")
            decision.group = config
            decision.target = try target(config, url: args.resource, caller)
        case .sign(let request):
            let config = try resolve(request.group)
            let url = try request.validatedURL()
            try config.resources?.authorize(request.url, group: config.name, verb: "signature")
            decision.sign = try SignDecision(request, url: url, config: config)
            decision.group = config
            decision.target = try target(config, url: request.url, caller)
        case .hello, .ping, .apps, .audit, .diagnose, .lock, .unlock, .forward:
            break
        }
        if let config = decision.group {
            decision.account = try account(arguments.accountNamed, of: config, caller)
            if case .login(let args) = arguments, let named = args.account { decision.mayAddAccount = mayAdd(named, of: config, caller) }
        }
        if access == .adminGroups, let config = decision.group, !config.admin {
            throw BrokerError(.forbidden, "the login password is given only to groups the administrator defined; \"\(config.name)\" comes from the user's own configuration")
        }
        if locked, !rule.whileLocked { throw AccessPolicy.lockedRefusal }
        decision.confirm = asks(rule.confirm, caller, group: decision.group)
        return decision
    }

    /// The token a request to `url` (within the group's `resources`, checked) from `caller`
    /// carries: for the entry it falls in (`tokens = "per-resource"`), with the scopes the
    /// caller's registrations for the group name (all of them: an app the administrator limited
    /// stays limited, whatever a file of the user's adds). A registration naming a scope the group
    /// does not have is refused, named.
    private func target(_ config: GroupConfig, url: String?, _ caller: Caller) throws(BrokerError) -> TokenTarget {
        var resource: String?
        if config.tokens == .perResource, let url, let resources = config.resources {
            if let sharing = resources.entriesForUnknownPath(url) {
                // Found by an outside test: git without `credential.useHttpPath` names no path, and
                // got the `/` entry's token for a repository under the other.
                throw BrokerError(.resourceForbidden, "\"\(url.prefix(200))\" names no path, and the resources \(sharing.joined(separator: " and ")) of the access group \"\(config.name)\" share its server, each with a token of its own, so msso cannot tell which the request is for; name the path (git: `git config --global credential.useHttpPath true`, so that git names the repository's)")
            }
            guard let entry = resources.entry(for: url) else {
                throw BrokerError(.resourceForbidden, "\"\(url.prefix(200))\" is not one of the resources of the access group \"\(config.name)\"")
            }
            if let other = resources.otherEntryOnceResolved(url) {
                // Never a token of one server for a request another would take: found by an outside test.
                throw BrokerError(.resourceForbidden, "\"\(url.prefix(200))\" is under \(entry) as msso reads it, but a server that reads it by its bytes, or resolves its path (dot segments, `;` parameters, `//`, percent-encoding, case, trailing dots), reads it as under \(other), and the access group \"\(config.name)\" mints a token for each; send the request to its path resolved")
            }
            if let segment = resources.unplainSegment(url) {
                throw BrokerError(.resourceForbidden, "\"\(url.prefix(200))\" has the path segment \"\(segment)\", and where two entries of \"\(config.name)\" share a server msso mints neither's token for a segment that servers may read as another (a space, a tab, a colon, a `~`, a percent sign once decoded, a character beyond ASCII, `.` or `..`, an entry's segment with a suffix such as `admin.json`); send the request to its plain path (letters, digits and -._!$&'()*+,=@ in each segment)")
            }
            resource = entry
        }
        guard caller.registrations.contains(where: { $0.scopes != nil }) else { return TokenTarget(resource: resource) }
        var scopes: Set<String>?
        for registration in caller.registrations where registration.groups.contains(config.name) {
            guard let named = registration.scopes else { continue }
            if let beyond = named.first(where: { !config.scopes.contains($0) }) {
                throw BrokerError(.forbidden, "the registration of app \"\(registration.name)\" (\(registration.source)) asks for the scope \"\(beyond)\", which the access group \"\(config.name)\" does not have (its scopes: \(config.scopes.joined(separator: " "))); an app's `scopes` must be a subset of its group's")
            }
            scopes = scopes.map { $0.intersection(named) } ?? Set(named)
        }
        if let scopes, scopes.isEmpty {
            throw BrokerError(.forbidden, "the registrations of \(caller.described) for \"\(config.name)\" name scopes that have none in common, so no token can be minted for it; give it one `scopes` list")
        }
        return TokenTarget(resource: resource, scopes: scopes.map { Array($0) })
    }

    /// The account a call about `config` is for: the one it names (a valid name), else the one
    /// its registrations for the group pin (`account`). A call naming another account than its
    /// registration's, or registrations pinning two, is refused naming them.
    private func account(_ named: String?, of config: GroupConfig?, _ caller: Caller) throws(BrokerError) -> String? {
        if let named, let problem = AccountName.problem(named) { throw BrokerError(.badRequest, problem) }
        if let host = caller.host, let allowed = caller.forward?.accounts {
            guard let named else { return allowed[0] }
            guard allowed.contains(named) else {
                throw BrokerError(.forbidden, "host \(host) may not use the account \(named) through the SSH forward: its [forward.\"\(host)\"] table (\(caller.forward!.source)) names \(allowed.joined(separator: ", ")); add it to its `accounts` there")
            }
            return named
        }
        guard caller.host == nil, caller.registrations.contains(where: { $0.account != nil }) else { return named }
        let pinned = caller.registrations.filter { registration in registration.account != nil && (config.map { registration.groups.contains($0.name) } ?? true) }
        let group = config.map { "\"\($0.name)\"" } ?? "its groups"
        guard let pin = pinned.first else { return named }
        if let other = pinned.first(where: { $0.account != pin.account }) {
            throw BrokerError(.forbidden, "the registrations of \(caller.described) for \(group) pin two accounts, \(pin.account!) (app \"\(pin.name)\", \(pin.source)) and \(other.account!) (app \"\(other.name)\", \(other.source)); give it one `account`")
        }
        if let named, named != pin.account {
            throw BrokerError(.forbidden, "\(caller.described) asked for the account \(named) of \(group), but its registration (app \"\(pin.name)\", \(pin.source)) pins it to the account \(pin.account!); ask for that one, or change its `account` there")
        }
        return pin.account
    }

    /// Whether the caller may add `account` to the group by logging in to it (the broker refuses
    /// the login of a new account otherwise; an account the group has is logged in to under the
    /// account rules, whoever asks). Adding an account is the user's act, as `newAccount` is
    /// (found by an outside test: an app, a Flatpak and a remote host each logged a new account
    /// in, which became what every app acted as): the user's own tools or root (the session-start
    /// module), an app its registration pins to that account, a host whose table lists it.
    private func mayAdd(_ account: String, of config: GroupConfig, _ caller: Caller) -> Bool {
        switch caller.role {
        case .ownTool, .root: true
        case .forwarded: caller.forward?.accounts?.contains(account) == true
        case .app: caller.registrations.contains { $0.groups.contains(config.name) && $0.account == account }
        }
    }

    /// Throws unless the caller's role may ask for `action` at all: its row's cell, a host's
    /// table, a registration somewhere.
    private func admit(_ action: AccessPolicy.Action, _ access: AccessPolicy.Access, _ caller: Caller, _ arguments: CallArguments,
                       _ configuration: Configuration) throws(BrokerError) {
        switch access {
        case .refused:
            throw AccessPolicy.refusal(action, role: caller.role, who: caller.described, group: arguments.groupNamed)
        case .hostTable:
            guard let forward = caller.forward else {
                throw BrokerError(.forbidden, "\(caller.described) has no [forward] table in the configuration any more, so it may no longer use msso; add one and reload mssod")
            }
            guard forward.verbs.contains(action.method) else {
                let method = action.method.rawValue
                let allowed = forward.verbs.map(\.rawValue).sorted().joined(separator: ", ")
                throw BrokerError(.forbidden, "\(caller.described) may not call \(method): its [forward.\"\(forward.host)\"] table (\(forward.source)) allows \(allowed.isEmpty ? "nothing" : allowed); add \"\(method)\" to its `verbs` there")
            }
        case .registeredForSomeGroup where caller.usableGroups(configuration).isEmpty:
            let method = action.method.rawValue
            throw BrokerError(.forbidden, "\(caller.described) is not registered for any access group, so it may not \(method) msso; use `msso \(method)`")
        case .registeredForSomeGroup, .anyGroup, .registeredGroups, .adminGroups:
            return
        }
    }

    /// The group a call is about, after checking the caller may use it. An app (or a host)
    /// that may use exactly one of several configured groups gets that one by default.
    private func resolve(_ name: String?, _ caller: Caller, limited: Bool, _ snapshot: Rules.Snapshot,
                         into group: inout String?) throws(BrokerError) -> GroupConfig {
        let configuration = snapshot.configuration
        var name = name
        if name == nil, caller.role == .app || caller.role == .forwarded, configuration.groups.count > 1 {
            let mine = caller.usableGroups(configuration)
            if mine.count == 1 { name = mine.first }
        }
        let resolved = try configuration.group(named: name)
        group = resolved.name
        if let host = caller.host {
            guard let forward = caller.forward, forward.groups.contains(resolved.name) else {
                let named = caller.forward.map { $0.groups.map { "\"\($0)\"" }.joined(separator: ", ") } ?? "none"
                throw BrokerError(.notEntitled, "host \(host) may not use access group \"\(resolved.name)\" through the SSH forward: its [forward.\"\(host)\"] table\(caller.forward.map { " (\($0.source))" } ?? "") names \(named); add the group to its `groups` there")
            }
        } else if limited, !caller.registrations.contains(where: { $0.groups.contains(resolved.name) }) {
            try snapshot.entitlements.authorize(caller.app, group: resolved.name) // throws NotEntitled, worded for the user
        }
        return resolved
    }

    /// Whether the user is asked before the call runs: a host whose table has `confirm`, or (for
    /// a token or a signature) a registration with `confirm = true` that gives the caller the group.
    private func asks(_ confirm: AccessPolicy.Confirm, _ caller: Caller, group: GroupConfig?) -> Bool {
        if caller.host != nil { return confirm != .never && caller.forward?.confirm == true }
        guard confirm == .hostsAndRegistrations, let group else { return false }
        return caller.registrations.contains { $0.confirm == true && $0.groups.contains(group.name) }
    }
}

extension CallArguments {
    /// The one group the call names, if any (for a refusal's words).
    var groupNamed: String? {
        switch self {
        case .status(let args): args.group
        case .check(let args): args.group
        case .login(let args): args.group
        case .extend(let args): args.group
        case .logout(let args): args.group
        case .keys(let args): args.group
        case .token(let args): args.group
        case .sign(let request): request.group
        default: nil
        }
    }

    /// The account the call names, if any.
    var accountNamed: String? {
        switch self {
        case .status(let args): args.account
        case .check(let args): args.account
        case .login(let args): args.account
        case .extend(let args): args.account
        case .logout(let args): args.all == true ? nil : args.account
        case .token(let args): args.account
        case .sign(let request): request.account
        default: nil
        }
    }
}
