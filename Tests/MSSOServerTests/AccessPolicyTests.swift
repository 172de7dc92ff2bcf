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
    func admitted(_ kind: Kind, _ role: AccessPolicy.Role, registered: Bool = true) -> Bool {
        do {
            try policy.authorize(kind, role: role, registered: registered, who: "/usr/bin/app")
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
        let management: Set<Kind> = [.apps, .audit, .keys, .diagnose]
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
