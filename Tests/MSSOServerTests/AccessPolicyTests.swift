import MSSOProtocol
@testable import MSSOServer
import XCTest

final class AccessPolicyTests: XCTestCase {
    let policy = AccessPolicy(owner: 1000)

    func assertForbidden(_ method: String, _ role: AccessPolicy.Role, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertThrowsError(try policy.authorize(method, role: role), "\(method) as \(role)", file: file, line: line) { error in
            XCTAssertEqual((error as? BrokerError)?.name, .forbidden, file: file, line: line)
        }
    }

    func testRootMayNeitherLockNorUnlock() {
        assertForbidden(Methods.Lock.name, .root)
        assertForbidden(Methods.Unlock.name, .root)
    }

    func testDiagnoseIsForTheUsersToolsOnly() {
        assertForbidden(Methods.Diagnose.name, .app)
        assertForbidden(Methods.Diagnose.name, .root)
        XCTAssertNoThrow(try policy.authorize(Methods.Diagnose.name, role: .ownTool))
    }

    func testTheUsersToolsAndAppsReachLockAndUnlock() throws {
        for role in [AccessPolicy.Role.ownTool, .app] {
            XCTAssertNoThrow(try policy.authorize(Methods.Lock.name, role: role))
            XCTAssertNoThrow(try policy.authorize(Methods.Unlock.name, role: role))
        }
    }
}
