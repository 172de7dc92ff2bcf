import Logging
import MSSOCore
import MSSOProtocol
@testable import MSSOServer
import XCTest

/// The access table as the gate applies it: every action × every role × locked or not, each cell
/// against the rules as docs/SECURITY.md states them (written out here, not read from the table).
final class GateTests: XCTestCase {
    typealias Action = AccessPolicy.Action
    let mine = "corp"
    let others = "users" // from the user's own file (not the administrator's)

    func gate(_ confirm: Bool = false) -> Gate {
        var users = GroupConfig(name: others, issuer: "https://idp.example", clientID: "msso")
        users.admin = false
        let configuration = Configuration(groups: [GroupConfig(name: mine, issuer: "https://idp.example", clientID: "msso"), users])
        var mail = AppRegistration(name: "mail", executable: "/opt/suite/mail", sha256: nil, flatpak: nil, groups: [mine],
                                   source: "/etc/msso/apps.d/mail.toml", admin: true)
        mail.confirm = confirm ? true : nil
        let registrations = [
            mail,
            AppRegistration(name: "msso", executable: "/usr/bin/msso", sha256: nil, flatpak: nil, groups: [mine], source: "/etc/msso/apps.d/msso.toml",
                            admin: true),
        ]
        let rules = Rules(configuration: configuration, entitlements: Entitlements(registrations: registrations), logger: Logger(label: "test"))
        return Gate(policy: AccessPolicy(owner: 1000, ownTools: ["/usr/bin/msso", "/usr/bin/msso-logout"]), rules: rules)
    }

    /// The callers, one per kind of process the rules speak of.
    enum Who: CaseIterable {
        case root, msso, unregisteredMsso, registeredApp, stranger, hostWithEveryVerb, hostWithDefaultTable, hostWithoutTable
    }

    func caller(_ who: Who, _ gate: Gate) -> Caller {
        func local(_ uid: UInt32, _ executable: String) -> Caller {
            let app = AppIdentity(executable: executable)
            return Caller(uid: uid, pid: 4242, role: gate.policy.role(uid: uid, app: app), app: app,
                          registrations: gate.rules.entitlements.matches(app))
        }
        func host(_ table: ForwardRule?) -> Caller {
            Caller(uid: 1000, pid: 4242, role: .forwarded, app: AppIdentity(executable: nil, onHost: false), registrations: [],
                   host: "build01", forward: table, forwardSession: "/run/user/1000/msso/f.sock")
        }
        switch who {
        case .root: return local(0, "/usr/sbin/sshd")
        case .msso: return local(1000, "/usr/bin/msso")
        case .unregisteredMsso: return local(1000, "/usr/bin/msso-logout")
        case .registeredApp: return local(1000, "/opt/suite/mail")
        case .stranger: return local(1000, "/tmp/evil")
        case .hostWithEveryVerb: return host(ForwardRule(host: "build01", groups: [mine], verbs: ForwardRule.allowedVerbs, confirm: false))
        case .hostWithDefaultTable: return host(ForwardRule(host: "build01", groups: [mine], confirm: false))
        case .hostWithoutTable: return host(nil)
        }
    }

    /// A call asking for `action`, on the administrator's group where it names one.
    func call(_ action: Action, group: String? = "corp") -> CallArguments {
        switch action {
        case .hello: .hello(.init())
        case .ping: .ping(PingData(data: "x"))
        case .status: .status(GroupArguments(group: group))
        case .check: .check(GroupArguments(group: group))
        case .passwordLogin: .login(LoginArguments(group: group, flow: .password, username: "u", password: "p"))
        case .deviceLogin: .login(LoginArguments(group: group, flow: .device))
        case .browserLogin: .login(LoginArguments(group: group, flow: .browser))
        case .newAccountLogin: .login(LoginArguments(group: group, flow: .device, newAccount: true))
        case .extend: .extend(GroupArguments(group: group))
        case .logout: .logout(.init(group: group))
        case .logoutAll: .logout(.init(all: true))
        case .subscribe: .subscribe(.init(groups: group.map { [$0] }))
        case .sign: .sign(SignRequest(group: group, method: "GET", url: "https://api.example/items"))
        case .token: .token(.init(group: group))
        case .apps: .apps(Empty())
        case .audit: .audit(.init())
        case .keys: .keys(.init(group: group))
        case .rotateKeys: .keys(.init(group: group, rotate: true))
        case .diagnose: .diagnose(Empty())
        case .lock: .lock(PassphraseArguments(passphrase: "p"))
        case .unlock: .unlock(PassphraseArguments(passphrase: "p"))
        case .forward: .forward(.init(host: "build01"))
        }
    }

    /// What each caller may ask for, in the words of docs/SECURITY.md.
    func allowed(_ who: Who) -> Set<Action> {
        let everything = Set(Action.allCases)
        let management: Set<Action> = [.apps, .audit, .keys, .rotateKeys, .diagnose, .forward, .newAccountLogin]
        switch who {
        // Root (PAM): how sessions stand, the password login, logging out; never a token.
        case .root: return [.hello, .ping, .status, .check, .passwordLogin, .logout, .logoutAll]
        // The user's own tools manage every group; they sign only where registered.
        case .msso: return everything
        case .unregisteredMsso: return everything.subtracting([.sign, .token])
        // An app: its registered groups, no management.
        case .registeredApp: return everything.subtracting(management)
        // Registered nowhere: nothing about a group, no lock (a passphrase the user does not know).
        case .stranger: return [.hello, .ping, .logoutAll]
        // A host: its table's verbs on its groups; a device login only; never `--all` or management.
        case .hostWithEveryVerb: return [.hello, .ping, .status, .check, .deviceLogin, .extend, .logout, .subscribe, .sign, .token]
        case .hostWithDefaultTable: return [.hello, .ping, .status, .check, .sign, .token]
        case .hostWithoutTable: return [.hello, .ping]
        }
    }

    /// What the lock stops: nothing signs, hands out a token, logs in, extends or makes a key.
    let stoppedByTheLock: Set<Action> = [.sign, .token, .passwordLogin, .deviceLogin, .browserLogin, .newAccountLogin, .extend, .rotateKeys]

    func outcome(_ gate: Gate, _ action: Action, _ who: Who, locked: Bool, group: String? = "corp") -> Result<Decision, BrokerError> {
        var named: String?
        do {
            return .success(try gate.decide(call(action, group: group), caller(who, gate), locked: locked, group: &named))
        } catch {
            return .failure(error)
        }
    }

    func testEveryActionForEveryCallerLockedOrNot() {
        let gate = gate()
        var cells = 0
        for action in Action.allCases {
            for who in Who.allCases {
                for locked in [false, true] {
                    cells += 1
                    let result = outcome(gate, action, who, locked: locked)
                    let expected = allowed(who).contains(action)
                    switch result {
                    case .success:
                        XCTAssertTrue(expected && !(locked && stoppedByTheLock.contains(action)), "\(who) \(action.rawValue) locked=\(locked): served")
                    case .failure(let error):
                        if !expected {
                            XCTAssertTrue([.forbidden, .notEntitled].contains(error.name), "\(who) \(action.rawValue): \(error)")
                        } else {
                            XCTAssertTrue(locked && stoppedByTheLock.contains(action), "\(who) \(action.rawValue) locked=\(locked): \(error)")
                            XCTAssertEqual(error.name, .locked, "\(who) \(action.rawValue)")
                        }
                    }
                }
            }
        }
        XCTAssertEqual(cells, Action.allCases.count * Who.allCases.count * 2)
    }

    func testWhatTheLockStopsIsWhatTheBrokerRefusesToo() {
        XCTAssertEqual(Set(Action.allCases.filter { !AccessPolicy.rule(for: $0).whileLocked }), stoppedByTheLock,
                       "the broker reads the same column where a lock comes while a call waits")
        XCTAssertTrue(stoppedByTheLock.contains(.rotateKeys) && !stoppedByTheLock.contains(.keys), "`keys` reads a public key while locked; `--rotate` is refused")
    }

    func testRootGivesThePasswordOnlyToTheAdministratorsGroups() {
        let gate = gate()
        XCTAssertNoThrow(try outcome(gate, .passwordLogin, .root, locked: false, group: mine).get())
        XCTAssertEqual(outcome(gate, .passwordLogin, .root, locked: false, group: others).error?.message,
                       "the login password is given only to groups the administrator defined; \"users\" comes from the user's own configuration")
        XCTAssertTrue(outcome(gate, .deviceLogin, .root, locked: false).error?.message.contains("only with the password flow") == true)
        XCTAssertNoThrow(try outcome(gate, .deviceLogin, .msso, locked: false, group: others).get(), "the user's own group, by the user's tool")
    }

    func testRefusalsSayWhoMayAndHow() {
        let gate = gate()
        XCTAssertEqual(outcome(gate, .logout, .hostWithDefaultTable, locked: false).error?.message,
                       "host build01 may not call logout: its [forward.\"build01\"] table () allows check, sign, status, token; add \"logout\" to its `verbs` there")
        XCTAssertEqual(outcome(gate, .lock, .hostWithEveryVerb, locked: false).error?.message,
                       "host build01 may not call lock through an SSH forward: that is for the msso command on this machine")
        XCTAssertTrue(outcome(gate, .passwordLogin, .hostWithEveryVerb, locked: false).error?.message.contains("only a device login works") == true)
        XCTAssertTrue(outcome(gate, .logoutAll, .hostWithEveryVerb, locked: false).error?.message.contains("may not log out of every group") == true)
        XCTAssertEqual(outcome(gate, .sign, .hostWithEveryVerb, locked: false, group: others).error?.name, .notEntitled)
        XCTAssertTrue(outcome(gate, .lock, .stranger, locked: false).error?.message.contains("/tmp/evil is not registered for any access group") == true)
        XCTAssertTrue(outcome(gate, .audit, .registeredApp, locked: false).error?.message.contains("only the msso command may call audit") == true)
        XCTAssertTrue(outcome(gate, .newAccountLogin, .registeredApp, locked: false).error?.message.contains("--new-account") == true)
        XCTAssertEqual(outcome(gate, .sign, .stranger, locked: false).error?.name, .notEntitled)
        XCTAssertEqual(outcome(gate, .sign, .registeredApp, locked: true).error, AccessPolicy.lockedRefusal)
    }

    func testARefusedCallStillNamesTheGroupItWasAboutForTheAuditRow() {
        let gate = gate()
        var named: String?
        XCTAssertThrowsError(try gate.decide(call(.sign), caller(.stranger, gate), locked: false, group: &named))
        XCTAssertEqual(named, mine)
        named = nil
        XCTAssertThrowsError(try gate.decide(call(.sign), caller(.registeredApp, gate), locked: true, group: &named))
        XCTAssertEqual(named, mine)
    }

    func testCallsAboutSeveralGroupsCoverOnlyTheCallersOwn() throws {
        let gate = gate()
        XCTAssertEqual(try outcome(gate, .status, .registeredApp, locked: false, group: nil).get().groups, [mine])
        XCTAssertEqual(try outcome(gate, .subscribe, .registeredApp, locked: false, group: nil).get().groups, [mine])
        XCTAssertEqual(try outcome(gate, .logoutAll, .registeredApp, locked: false).get().groups, [mine])
        XCTAssertEqual(try outcome(gate, .logoutAll, .stranger, locked: false).get().groups, [], "registered nowhere: ends nothing")
        XCTAssertNil(try outcome(gate, .status, .msso, locked: false, group: nil).get().groups, "the user's tool: every group")
        XCTAssertNil(try outcome(gate, .logoutAll, .root, locked: false).get().groups)
        XCTAssertEqual(try outcome(gate, .sign, .registeredApp, locked: false, group: nil).get().group?.name, mine,
                       "an app registered for one of several groups gets that one by default")
    }

    func testWhoIsAskedFirst() throws {
        let asking = gate(true)
        XCTAssertTrue(try outcome(asking, .sign, .registeredApp, locked: false).get().confirm, "a registration with confirm, for a signature")
        XCTAssertTrue(try outcome(asking, .token, .registeredApp, locked: false).get().confirm)
        XCTAssertFalse(try outcome(asking, .status, .registeredApp, locked: false).get().confirm, "how sessions stand never asks")
        XCTAssertFalse(try outcome(asking, .extend, .registeredApp, locked: false).get().confirm, "a registration asks for credentials only")
        XCTAssertFalse(try outcome(asking, .sign, .msso, locked: false).get().confirm, "another registration's confirm is not msso's")
        XCTAssertEqual(outcome(asking, .sign, .registeredApp, locked: true).error, AccessPolicy.lockedRefusal,
                       "while locked, refused before the user is asked about it")
        var host = caller(.hostWithEveryVerb, asking)
        host.forward!.confirm = true
        for (action, asks) in [(Action.sign, true), (.token, true), (.deviceLogin, true), (.extend, true), (.logout, true),
                               (.status, false), (.check, false), (.subscribe, false)] {
            var named: String?
            XCTAssertEqual(try asking.decide(call(action), host, locked: false, group: &named).confirm, asks, "host, \(action.rawValue)")
        }
    }

    func testATokenGoesOnlyWithinTheGroupsResources() throws {
        var config = GroupConfig(name: mine, issuer: "https://idp.example", clientID: "msso")
        config.resources = try Resources(["https://api.example.com/v1/"])
        let app = AppIdentity(executable: "/opt/suite/mail")
        let registration = AppRegistration(name: "mail", executable: app.executable, sha256: nil, flatpak: nil, groups: [mine],
                                           source: "/etc/msso/apps.d/mail.toml", admin: true)
        let rules = Rules(configuration: Configuration(groups: [config]), entitlements: Entitlements(registrations: [registration]), logger: Logger(label: "test"))
        let gate = Gate(policy: AccessPolicy(owner: 1000), rules: rules)
        let caller = Caller(uid: 1000, pid: 1, role: .app, app: app, registrations: [registration])
        func decide(_ arguments: CallArguments) -> BrokerError? {
            var named: String?
            do { _ = try gate.decide(arguments, caller, locked: false, group: &named); return nil } catch { return error }
        }
        XCTAssertNil(decide(.sign(SignRequest(method: "GET", url: "https://api.example.com/v1/items"))))
        XCTAssertEqual(decide(.sign(SignRequest(method: "GET", url: "https://attacker.example/")))?.name, .resourceForbidden)
        XCTAssertEqual(decide(.sign(SignRequest(method: "GET", url: "not a url")))?.name, .badRequest, "a URL that is none is said so first")
        XCTAssertNil(decide(.token(.init(resource: "https://api.example.com/v1/x"))))
        XCTAssertEqual(decide(.token(.init()))?.name, .resourceForbidden, "a token for no named server")
        XCTAssertEqual(decide(.token(.init(resource: "https://attacker.example/")))?.name, .resourceForbidden)
        XCTAssertEqual(decide(.sign(SignRequest(method: "GET", url: "https://api.example.com/v1/..;/admin")))?.name, .resourceForbidden)
    }

    func testTheTokenARequestCarriesIsChosenByItsURLAndItsCallersRegistrations() throws {
        var config = GroupConfig(name: mine, issuer: "https://idp.example", clientID: "msso")
        config.scopes = ["openid", "read", "write"]
        config.resources = try Resources(["https://h.example/", "https://h.example/git/"])
        config.tokens = .perResource
        let app = AppIdentity(executable: "/opt/suite/mail")
        func registration(_ scopes: [String]?, admin: Bool) -> AppRegistration {
            var registration = AppRegistration(name: admin ? "mail" : "mail-mine", executable: app.executable, sha256: nil, flatpak: nil,
                                               groups: [mine], source: admin ? "/etc/msso/apps.d/mail.toml:1" : "~/.config/msso/apps.d/m.toml:1",
                                               admin: admin)
            registration.scopes = scopes
            return registration
        }
        func target(_ url: String, _ registrations: [AppRegistration]) -> Result<TokenTarget, BrokerError> {
            let rules = Rules(configuration: Configuration(groups: [config]), entitlements: Entitlements(registrations: registrations),
                              logger: Logger(label: "test"))
            let caller = Caller(uid: 1000, pid: 1, role: .app, app: app, registrations: registrations)
            var named: String?
            do {
                return .success(try Gate(policy: AccessPolicy(owner: 1000), rules: rules)
                    .decide(.sign(SignRequest(method: "GET", url: url)), caller, locked: false, group: &named).target)
            } catch { return .failure(error) }
        }
        XCTAssertEqual(try target("https://h.example/git/x.git", [registration(nil, admin: true)]).get(),
                       TokenTarget(resource: "https://h.example/git/"), "the most specific entry")
        XCTAssertEqual(try target("https://h.example/api", [registration(nil, admin: true)]).get(), TokenTarget(resource: "https://h.example/"))
        // No path at all (git's helper without credential.useHttpPath): either entry's, so neither.
        guard case .failure(let unknown) = target("https://h.example", [registration(nil, admin: true)]) else { return XCTFail("a token for no path") }
        XCTAssertEqual(unknown.name, .resourceForbidden)
        XCTAssertTrue(unknown.message.contains("names no path") && unknown.message.contains("credential.useHttpPath"), unknown.message)
        // The administrator's limit holds whatever the user's own registration adds.
        XCTAssertEqual(try target("https://h.example/api", [registration(["read"], admin: true), registration(["read", "write"], admin: false)]).get(),
                       TokenTarget(resource: "https://h.example/", scopes: ["read"]))
        XCTAssertEqual(try target("https://h.example/api", [registration(["read"], admin: true), registration(nil, admin: false)]).get(),
                       TokenTarget(resource: "https://h.example/", scopes: ["read"]), "a registration without scopes widens nothing")
        guard case .failure(let refusal) = target("https://h.example/api", [registration(["read", "admin"], admin: true)]) else {
            return XCTFail("a scope the group lacks")
        }
        XCTAssertEqual(refusal.name, .forbidden)
        XCTAssertTrue(refusal.message.contains(#"app "mail" (/etc/msso/apps.d/mail.toml:1)"#) && refusal.message.contains(#""admin""#), refusal.message)
        guard case .failure(let disjoint) = target("https://h.example/api", [registration(["read"], admin: true), registration(["write"], admin: false)]) else {
            return XCTFail("no scope in common")
        }
        XCTAssertEqual(disjoint.name, .forbidden)
        config.tokens = .shared
        XCTAssertEqual(try target("https://h.example/git/x", [registration(nil, admin: true)]).get(), .session, "a shared group's token")
    }

    /// The account a call is about: the one it names, else its registration's; a registration
    /// pins its app (another is refused, naming both), a host's table may list the accounts it may use.
    func testTheAccountIsTheCallsElseItsRegistrationsAndAPinHolds() throws {
        let config = GroupConfig(name: mine, issuer: "https://idp.example", clientID: "msso")
        let app = AppIdentity(executable: "/opt/suite/mail")
        func registration(_ account: String?, _ name: String = "mail") -> AppRegistration {
            var registration = AppRegistration(name: name, executable: app.executable, sha256: nil, flatpak: nil, groups: [mine],
                                               source: "/etc/msso/apps.d/\(name).toml:1", admin: true)
            registration.account = account
            return registration
        }
        func account(_ named: String?, _ registrations: [AppRegistration], forward: ForwardRule? = nil,
                     call: ((String?) -> CallArguments)? = nil) -> Result<String?, BrokerError> {
            let rules = Rules(configuration: Configuration(groups: [config]), entitlements: Entitlements(registrations: registrations),
                              logger: Logger(label: "test"))
            let caller = forward.map {
                Caller(uid: 1000, pid: 1, role: .forwarded, app: AppIdentity(executable: nil, onHost: false), registrations: [],
                       host: "build01", forward: $0, forwardSession: "/run/user/1000/msso/f.sock")
            } ?? Caller(uid: 1000, pid: 1, role: .app, app: app, registrations: registrations)
            var group: String?
            let arguments = call?(named) ?? .sign(SignRequest(account: named, method: "GET", url: "https://h.example/x"))
            do {
                return .success(try Gate(policy: AccessPolicy(owner: 1000), rules: rules).decide(arguments, caller, locked: false, group: &group).account)
            } catch { return .failure(error) }
        }
        XCTAssertEqual(try account(nil, [registration(nil)]).get(), nil, "the broker's default")
        XCTAssertEqual(try account("admin", [registration(nil)]).get(), "admin")
        XCTAssertEqual(try account(nil, [registration("admin")]).get(), "admin", "the registration's")
        XCTAssertEqual(try account("admin", [registration("admin")]).get(), "admin")
        let other = account("sandbox", [registration("admin")]).error
        XCTAssertEqual(other?.name, .forbidden)
        XCTAssertTrue(other?.message.contains("asked for the account sandbox") == true && other?.message.contains("pins it to the account admin") == true,
                      other?.message ?? "")
        XCTAssertEqual(account(nil, [registration("admin"), registration("sandbox", "mail2")]).error?.name, .forbidden, "two pins")
        XCTAssertEqual(account("-rf", [registration(nil)]).error?.name, .badRequest)
        for verb in [{ CallArguments.token(.init(group: "corp", account: $0)) }, { .check(GroupArguments(group: "corp", account: $0)) },
                     { .login(LoginArguments(group: "corp", account: $0, flow: .device)) }, { .extend(GroupArguments(group: "corp", account: $0)) },
                     { .logout(.init(group: "corp", account: $0)) }] as [(String?) -> CallArguments] {
            XCTAssertEqual(account("sandbox", [registration("admin")], call: verb).error?.name, .forbidden, "every verb about a group")
        }
        XCTAssertEqual(try account(nil, [registration("admin")], call: { _ in .logout(.init(all: true)) }).get(), "admin",
                       "a pinned app's logout --all ends its account alone (found by an outside test)")
        XCTAssertEqual(try account(nil, [registration(nil)], call: { _ in .logout(.init(all: true)) }).get(), nil)
        func mayAdd(_ named: String, _ registrations: [AppRegistration], role: AccessPolicy.Role = .app) -> Bool {
            let rules = Rules(configuration: Configuration(groups: [config]), entitlements: Entitlements(registrations: registrations),
                              logger: Logger(label: "test"))
            let caller = Caller(uid: 1000, pid: 1, role: role, app: app, registrations: registrations)
            var group: String?
            return (try? Gate(policy: AccessPolicy(owner: 1000), rules: rules)
                .decide(.login(LoginArguments(group: "corp", account: named, flow: .device)), caller, locked: false, group: &group).mayAddAccount) ?? false
        }
        XCTAssertFalse(mayAdd("zzz", [registration(nil)]), "an app adds no account (found by an outside test)")
        XCTAssertTrue(mayAdd("admin", [registration("admin")]), "but the one its registration pins")
        XCTAssertTrue(mayAdd("zzz", [], role: .ownTool), "the user's own msso adds any")
        var table = ForwardRule(host: "build01", groups: [mine], confirm: false)
        XCTAssertEqual(try account("sandbox", [], forward: table).get(), "sandbox", "a table without accounts: any")
        table.accounts = ["admin", "ops"]
        XCTAssertEqual(try account(nil, [], forward: table).get(), "admin", "the first the table lists")
        XCTAssertEqual(try account("ops", [], forward: table).get(), "ops")
        var named: String?
        let hostStatus = try Gate(policy: AccessPolicy(owner: 1000), rules: Rules(configuration: Configuration(groups: [config]),
                                                                                  entitlements: Entitlements(registrations: []), logger: Logger(label: "test")))
            .decide(.status(GroupArguments()), Caller(uid: 1000, pid: 1, role: .forwarded, app: AppIdentity(executable: nil, onHost: false),
                                                       registrations: [], host: "build01", forward: table, forwardSession: "/s"), locked: false, group: &named)
        XCTAssertEqual(hostStatus.visibleAccounts, ["admin", "ops"], "a host sees only the accounts its table lists")
        let refused = account("sandbox", [], forward: table).error
        XCTAssertEqual(refused?.name, .forbidden)
        XCTAssertTrue(refused?.message.contains("may not use the account sandbox") == true, refused?.message ?? "")
    }

    func testAHostMayBeGivenOnlyWhatTheTableLetsAHostHave() {
        XCTAssertEqual(ForwardRule.allowedVerbs, [.token, .sign, .status, .check, .login, .extend, .logout, .subscribe])
        XCTAssertEqual(ForwardRule.defaultVerbs, [.token, .sign, .status, .check])
        for action in Action.allCases where AccessPolicy.rule(for: action).givesCredentials {
            XCTAssertEqual(AccessPolicy.rule(for: action).root, .refused, "no token or signature ever reaches root: \(action.rawValue)")
        }
    }
}

extension Result {
    var error: Failure? { if case .failure(let error) = self { error } else { nil } }
}
