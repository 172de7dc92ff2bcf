import Foundation
@testable import MSSOCore
import MSSOProtocol
import XCTest

final class EntitlementsTests: XCTestCase {
    var root: URL!

    override func setUp() {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("ent-\(UUID().uuidString)")
    }

    func write(_ side: String, _ name: String, _ text: String) throws {
        let directory = root.appendingPathComponent(side).appendingPathComponent("apps.d")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try text.write(to: directory.appendingPathComponent(name), atomically: true, encoding: .utf8)
    }

    func load(userApps: Bool = true) throws -> Entitlements {
        Entitlements.load(systemDirectory: root.appendingPathComponent("etc").path,
                          userDirectory: root.appendingPathComponent("user").path, userApps: userApps)
    }

    func testRegisteredExecutablesGetTheirGroupsOnly() throws {
        try write("etc", "suite.toml", """
            [apps.app1]
            executable = "/usr/bin/app1"
            groups = ["suite"]

            [apps.notes]
            flatpak = "com.example.Notes"
            groups = ["suite", "notes"]
            """)
        let entitlements = try load()
        XCTAssertNoThrow(try entitlements.authorize(AppIdentity(executable: "/usr/bin/app1"), group: "suite"))
        XCTAssertThrowsError(try entitlements.authorize(AppIdentity(executable: "/usr/bin/app1"), group: "notes")) { error in
            let error = error as! BrokerError
            XCTAssertEqual(error.name, .notEntitled)
            XCTAssertEqual(error.message, "/usr/bin/app1 is not registered for access group \"notes\"; register it with `msso apps allow /usr/bin/app1 --group notes` (or ask your administrator)")
        }
        XCTAssertThrowsError(try entitlements.authorize(AppIdentity(executable: "/tmp/app1"), group: "suite"), "a copy elsewhere")
        XCTAssertEqual(entitlements.groups(of: AppIdentity(executable: nil, flatpak: "com.example.Notes")), ["suite", "notes"])
        XCTAssertThrowsError(try entitlements.authorize(AppIdentity(executable: "/usr/bin/flatpak-spawn", flatpak: "com.evil.App"), group: "suite"))
        XCTAssertThrowsError(try entitlements.authorize(AppIdentity(executable: "/usr/bin/app1", onHost: false), group: "suite"),
                             "a path seen from another mount namespace means nothing")
    }

    func testAMalformedFileIsSkippedWithAWarningAndTheOthersStand() throws {
        try write("user", "a-broken.toml", "[apps.x]\nexecutable = \"/bin/x\"\ngroups = [\"g\"]\ncolour = 1\n")
        try write("user", "b-good.toml", "[apps.y]\nexecutable = \"/bin/y\"\ngroups = [\"g\"]\n")
        let entitlements = try load()
        XCTAssertEqual(entitlements.registrations.map(\.name), ["y"])
        XCTAssertEqual(entitlements.warnings.count, 1)
        XCTAssertTrue(entitlements.warnings[0].contains("a-broken.toml:4: `colour`: unknown key"), entitlements.warnings[0])
    }

    func testParsingIsLinearInTheNumberOfApps() throws {
        let text = (0..<20_000).map { "[apps.a\($0)]\nexecutable = \"/bin/a\($0)\"\ngroups = [\"g\"]\n" }.joined()
        let started = Date()
        let parsed = try Entitlements.parse(text, file: "/f.toml", admin: true)
        XCTAssertEqual(parsed.count, 20_000)
        XCTAssertLessThan(Date().timeIntervalSince(started), 5, "20,000 apps parse in well under the 15 s a quadratic parser took")
        XCTAssertEqual(Entitlements(registrations: parsed).matches(AppIdentity(executable: "/bin/a19999")).map(\.name), ["a19999"])
    }

    func testThePinnedDigestMustMatch() throws {
        try write("etc", "a.toml", """
            [apps.app1]
            executable = "/usr/bin/app1"
            sha256 = "\(String(repeating: "ab", count: 32))"
            groups = ["suite"]
            """)
        let entitlements = try load()
        let good = AppIdentity(executable: "/usr/bin/app1", digest: String(repeating: "ab", count: 32))
        let changed = AppIdentity(executable: "/usr/bin/app1", digest: String(repeating: "cd", count: 32))
        XCTAssertNoThrow(try entitlements.authorize(good, group: "suite"))
        XCTAssertThrowsError(try entitlements.authorize(changed, group: "suite")) { error in
            XCTAssertTrue("\(error)".contains("its sha256 is \(String(repeating: "cd", count: 32)), the registration pins \(String(repeating: "ab", count: 32))"), "\(error)")
        }
        XCTAssertTrue(entitlements.pins("/usr/bin/app1"))
    }

    func testTheAdminsDefinitionWinsAndCanLockUserFilesOut() throws {
        try write("etc", "a.toml", "[apps.tool]\nexecutable = \"/usr/bin/tool\"\ngroups = [\"a\"]\n")
        try write("user", "mine.toml", """
            [apps.tool]
            executable = "/usr/bin/tool"
            groups = ["a", "b"]

            [apps.script]
            executable = "/home/u/bin/script"
            groups = ["b"]
            """)
        let entitlements = try load()
        XCTAssertEqual(entitlements.groups(of: AppIdentity(executable: "/usr/bin/tool")), ["a"], "the user cannot widen the admin's app")
        XCTAssertEqual(entitlements.groups(of: AppIdentity(executable: "/home/u/bin/script")), ["b"])
        XCTAssertEqual(entitlements.ignored.map(\.name), ["tool"])
        let locked = try load(userApps: false)
        XCTAssertEqual(locked.groups(of: AppIdentity(executable: "/home/u/bin/script")), [])
        XCTAssertEqual(locked.ignored, [], "with user apps off the user's files are not even read")
    }

    func testErrorsNameFileLineAndKey() {
        let cases: [(String, String)] = [
            ("[apps.a]\nexecutable = \"bin/a\"\ngroups = [\"g\"]", "/f.toml:2: `executable`: must be an absolute path"),
            ("[apps.a]\nexecutable = \"/a\"\nsha256 = \"xyz\"\ngroups = [\"g\"]", "/f.toml:3: `sha256`: expected 64 hex digits"),
            ("[apps.a]\ngroups = [\"g\"]", "/f.toml:1: app \"a\" needs either `executable` or `flatpak`"),
            ("[apps.a]\nexecutable = \"/a\"", "/f.toml:1: `groups`: app \"a\" names no group"),
            ("[apps.a]\nexecutable = \"/a\"\ngroups = [\"g\"]\ncolour = 1", "/f.toml:4: `colour`: unknown key in app \"a\""),
        ]
        for (text, expected) in cases {
            XCTAssertThrowsError(try Entitlements.parse(text, file: "/f.toml", admin: true)) { XCTAssertEqual("\($0)", expected) }
        }
    }

    func testPolicyComesFromTheAdminsFileOnly() throws {
        XCTAssertThrowsError(try Configuration.parseFile("[policy]\nuser_apps = true", file: "/u.toml", admin: false)) {
            XCTAssertEqual("\($0)", "/u.toml:1: only the administrator's config.toml may set [policy]")
        }
        let policy = try Configuration.parseFile("[policy]\nuser_apps = false\naudit_max_rows = 500\naudit_max_age = \"30d\"",
                                                      file: "/etc/msso/config.toml", admin: true).policy
        XCTAssertEqual(policy?.userApps, false)
        XCTAssertEqual(policy?.auditMaxRows, 500)
        XCTAssertEqual(policy?.auditMaxAge, 30 * 86400)
    }
}

extension Entitlements {
    /// The groups `app` may use.
    func groups(of app: AppIdentity) -> Set<String> { Set(matches(app).flatMap(\.groups)) }
}
