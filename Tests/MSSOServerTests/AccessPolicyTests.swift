import MSSOCore
import MSSOProtocol
@testable import MSSOServer
import XCTest

/// The table of who may call what (``AccessPolicy/rule(for:)``), row by row, as a user would state
/// it: each line below is a rule of docs/SECURITY.md.
final class AccessPolicyTests: XCTestCase {
    let policy = AccessPolicy(owner: 1000)
    typealias Kind = CallArguments.Kind

    /// Whether `role` gets past the table for `kind` (registered for some group, or not).
    func admitted(_ kind: Kind, _ role: AccessPolicy.Role, registered: Bool = true, forward: ForwardRule? = nil) -> Bool {
        do {
            try policy.authorize(kind, role: role, registered: registered, who: "/usr/bin/app", forward: forward)
            return true
        } catch {
            XCTAssertEqual((error as BrokerError).name, .forbidden)
            return false
        }
    }

    func testRootReachesOnlyStatusCheckLoginAndLogout() {
        let allowed: Set<Kind> = [.hello, .ping, .status, .check, .login, .logout]
        for kind in Kind.allCases {
            XCTAssertEqual(admitted(kind, .root), allowed.contains(kind), "root, \(kind)")
        }
    }

    func testRootLogsInOnlyWithThePasswordToAnAdministratorsGroup() throws {
        let admin = GroupConfig(name: "corp", issuer: "https://idp.example", clientID: "msso")
        var users = admin
        users.admin = false
        XCTAssertNoThrow(try policy.authorize(.password, role: .root, group: admin))
        XCTAssertThrowsError(try policy.authorize(.device, role: .root, group: admin))
        XCTAssertThrowsError(try policy.authorize(.browser, role: .root, group: admin))
        XCTAssertThrowsError(try policy.authorize(.password, role: .root, group: users))
        for role in [AccessPolicy.Role.ownTool, .app] {
            XCTAssertNoThrow(try policy.authorize(.device, role: role, group: users))
        }
    }

    // MARK: A host reached through an SSH forward

    func testAForwardedHostGetsTheVerbsOfItsTableOnItsGroupsAndNeverManagement() {
        let table = ForwardRule(host: "build01", groups: ["g"])
        let everything = ForwardRule(host: "build01", groups: ["g"], verbs: ForwardRule.allowedVerbs)
        for kind in Kind.allCases {
            let basic = kind == .hello || kind == .ping
            XCTAssertEqual(admitted(kind, .forwarded, forward: table), basic || ForwardRule.defaultVerbs.contains(kind), "default table, \(kind)")
            XCTAssertEqual(admitted(kind, .forwarded, forward: everything), basic || ForwardRule.allowedVerbs.contains(kind), "every verb, \(kind)")
            XCTAssertEqual(admitted(kind, .forwarded, forward: nil), basic, "no table (any more): nothing, \(kind)")
        }
        for kind: Kind in [.apps, .audit, .keys, .diagnose, .lock, .unlock, .forward] {
            XCTAssertEqual(AccessPolicy.rule(for: kind).forwarded, .refused, "\(kind) is never a host's")
        }
        for kind in ForwardRule.allowedVerbs {
            XCTAssertTrue(policy.needsEntitlement(kind, role: .forwarded), "a host uses only the groups its table names, \(kind)")
        }
        XCTAssertEqual(ForwardRule.defaultVerbs, [.token, .sign, .status, .check])
    }

    func testOnlyTheUsersToolsAskForANewAccount() {
        let group = GroupConfig(name: "corp", issuer: "https://idp.example", clientID: "msso")
        for flow in [LoginFlow.password, .device, .browser] {
            XCTAssertNoThrow(try policy.authorize(flow, role: .ownTool, group: group, newAccount: true), "\(flow)")
        }
        for role in [AccessPolicy.Role.app, .forwarded, .root] {
            let flow: LoginFlow = role == .root ? .password : .device
            XCTAssertThrowsError(try policy.authorize(flow, role: role, group: group, newAccount: true), "\(role)") { error in
                XCTAssertEqual((error as? BrokerError)?.name, .forbidden)
                XCTAssertTrue((error as? BrokerError)?.message.contains("--new-account") == true)
            }
            XCTAssertNoThrow(try policy.authorize(flow, role: role, group: group, newAccount: false), "\(role): the group's own account")
        }
    }

    func testAForwardedHostLogsInWithTheDeviceFlowOnly() throws {
        let group = GroupConfig(name: "corp", issuer: "https://idp.example", clientID: "msso")
        XCTAssertNoThrow(try policy.authorize(.device, role: .forwarded, group: group))
        for flow: LoginFlow in [.password, .browser] {
            XCTAssertThrowsError(try policy.authorize(flow, role: .forwarded, group: group)) { error in
                XCTAssertTrue((error as? BrokerError)?.message.contains("only a device login works") == true)
            }
        }
    }

    func testAForwardedHostsRefusalNamesItsTableAndTheFix() {
        let table = ForwardRule(host: "build01", groups: ["g"], source: "/home/u/.config/msso/config.toml:7")
        XCTAssertThrowsError(try policy.authorize(.logout, role: .forwarded, registered: false, who: "host build01", forward: table)) { error in
            XCTAssertEqual((error as? BrokerError)?.message,
                           "host build01 may not call logout: its [forward.\"build01\"] table (/home/u/.config/msso/config.toml:7) allows check, sign, status, token; add \"logout\" to its `verbs` there")
        }
        XCTAssertThrowsError(try policy.authorize(.lock, role: .forwarded, registered: false, who: "host build01", forward: table)) { error in
            XCTAssertEqual((error as? BrokerError)?.message, "host build01 may not call lock through an SSH forward: that is for the msso command on this machine")
        }
    }

    func testNothingThatGivesATokenOrASignatureReachesRoot() {
        for kind in Kind.allCases where AccessPolicy.rule(for: kind).givesCredentials {
            XCTAssertFalse(admitted(kind, .root), "\(kind)")
        }
        XCTAssertEqual(Set(Kind.allCases.filter { AccessPolicy.rule(for: $0).givesCredentials }), [.sign, .token])
    }

    func testTheUsersToolsManageEveryGroupButSignOnlyWhereRegistered() {
        for kind in Kind.allCases {
            XCTAssertTrue(admitted(kind, .ownTool, registered: false), "msso, \(kind)")
        }
        for kind in Kind.allCases {
            let expected: Bool = [.sign, .token].contains(kind)
            XCTAssertEqual(policy.needsEntitlement(kind, role: .ownTool), expected, "msso, \(kind)")
        }
    }

    func testAppsUseOnlyTheirRegisteredGroupsAndNoManagementVerb() {
        let management: Set<Kind> = [.apps, .audit, .keys, .diagnose, .forward]
        for kind in Kind.allCases {
            XCTAssertEqual(admitted(kind, .app), !management.contains(kind), "app, \(kind)")
        }
        for kind: Kind in [.login, .extend, .logout, .status, .check, .sign, .token, .subscribe] {
            XCTAssertTrue(policy.needsEntitlement(kind, role: .app), "app, \(kind)")
        }
        XCTAssertFalse(policy.needsEntitlement(.status, role: .ownTool))
        XCTAssertFalse(policy.needsEntitlement(.status, role: .root))
    }

    func testOnlyAppsRegisteredSomewhereMayLockOrUnlock() {
        for kind: Kind in [.lock, .unlock] {
            XCTAssertTrue(admitted(kind, .app, registered: true))
            XCTAssertFalse(admitted(kind, .app, registered: false))
            XCTAssertTrue(admitted(kind, .ownTool, registered: false))
            XCTAssertFalse(admitted(kind, .root))
        }
    }

    func testWhileLockedNothingSignsHandsOutATokenLogsInOrExtends() {
        let refused = Set(Kind.allCases.filter { !AccessPolicy.rule(for: $0).whileLocked })
        XCTAssertEqual(refused, [.sign, .token, .login, .extend])
    }

    func testRefusalsSayWhoMayAndHow() {
        XCTAssertThrowsError(try policy.authorize(.lock, role: .app, registered: false, who: "/usr/bin/app")) { error in
            XCTAssertTrue((error as? BrokerError)?.message.contains("/usr/bin/app is not registered for any access group") == true)
        }
        XCTAssertThrowsError(try policy.authorize(.audit, role: .app, registered: true, who: "/usr/bin/app")) { error in
            XCTAssertTrue((error as? BrokerError)?.message.contains("only the msso command may call audit") == true)
        }
    }
}
