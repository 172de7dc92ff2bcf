@testable import MSSOCore
import MSSOProtocol
import XCTest

final class ConfigurationTests: XCTestCase {
    func testTheDocumentedExampleParses() throws {
        let text = """
            # the suite
            [groups."com.example.suite"]
            issuer = "http://127.0.0.1:4593/api/oidc"
            client_id = "msso"
            client_secret_file = "/etc/msso/secret"   # or client_secret = "…"
            scopes = ["openid", "app1"]
            session_timeout = "30m"
            session_max = "12h"
            sign = "header:auth-token"
            """
        let groups = try Configuration.parse(text, file: "/etc/msso/config.toml")
        XCTAssertEqual(groups.count, 1)
        let group = groups[0]
        XCTAssertEqual(group.name, "com.example.suite")
        XCTAssertEqual(group.clientSecret, .file("/etc/msso/secret"))
        XCTAssertEqual(group.scopes, ["openid", "app1"])
        XCTAssertEqual(group.sessionTimeout, 1800)
        XCTAssertEqual(group.sessionMax, 43200)
        XCTAssertEqual(group.signing, SigningProfile(token: .header("auth-token")))
    }

    func testDefaultsAndMultiLineArrays() throws {
        let text = """
            [groups.a]
            issuer = 'https://idp.example.com/realms/x'
            client_id = "a"
            scopes = [
              "openid",   # login
              "email",
            ]
            """
        let group = try Configuration.parse(text, file: "f").first!
        XCTAssertEqual(group.scopes, ["openid", "email"])
        XCTAssertEqual(group.sessionTimeout, 30 * 60)
        XCTAssertEqual(group.sessionMax, 12 * 3600)
        XCTAssertEqual(group.signing, .bearer)
        XCTAssertEqual(group.clientSecret, .none)
    }

    func testErrorsNameFileLineAndKey() {
        let cases: [(String, String)] = [
            ("[groups.a]\nissuer = \"https://i.example\"\nclient_id = \"c\"\nsession_timeout = \"soon\"",
             "/c.toml:4: `session_timeout`: expected a duration like \"90s\", \"30m\" or \"12h\""),
            ("[groups.a]\nissuer = \"https://i.example\"\nclient_id = \"c\"\ncolour = \"blue\"",
             "/c.toml:4: `colour`: unknown key in group \"a\""),
            ("[groups.a]\nclient_id = \"c\"", "/c.toml:1: `issuer`: group \"a\" needs an issuer URL"),
            ("[groups.a]\nissuer = \"http://idp.example.com\"\nclient_id = \"c\"",
             "/c.toml:2: `issuer`: plain http is allowed only on loopback; use https"),
            ("[groups.a]\nissuer = \"https://i.example\n", "/c.toml:2: `issuer`: string is not closed on this line"),
            ("[groups.a]\nissuer = \"https://i.example\"\nissuer = \"https://j.example\"", "/c.toml:3: `issuer`: key is defined twice"),
            ("[groups.a]\nissuer = \"https://i.example\"\nclient_id = \"c\"\nsign = \"dpop-ish\"",
             "/c.toml:4: `sign`: expected \"bearer\", \"header:NAME\", \"dpop\" or \"http-signature\" (or e.g. \"dpop+http-signature\"), got \"dpop-ish\""),
            ("[groups.a]\nissuer = \"https://i.example\"\nclient_id = \"c\"\nsession_timeout = \"2h\"\nsession_max = \"1h\"",
             "/c.toml:5: `session_max`: must not be shorter than session_timeout"),
            ("[daemon]\n", "/c.toml:1: unknown table [daemon]; groups are written [groups.\"NAME\"]"),
            ("[groups.a]\nclient_secret = s3cr3t-value", "/c.toml:2: `client_secret`: unsupported value; strings must be quoted"),
            ("issuer = \"x\"", "/c.toml:1: `issuer`: keys must be inside a [groups.\"NAME\"] table (the only key before the first table is `store`)"),
            ("store = \"cloud\"", "/c.toml:1: `store`: expected \"auto\", \"secret-service\", \"kernel\", got \"cloud\""),
            ("store = true", "/c.toml:1: `store`: expected a quoted string"),
            // A NUL would end the name in the keyring and in PAM: "adm\0" there is the admin's "adm" (outside attack).
            ("[groups.\"adm\\u0000\"]\nissuer = \"https://i.example\"\nclient_id = \"c\"", "/c.toml:1: a NUL character (\\u0000) is not allowed"),
            ("[groups.a]\nissuer = \"https://i.example\\u0000.evil\"\nclient_id = \"c\"", "/c.toml:2: `issuer`: a NUL character (\\u0000) is not allowed"),
            ("[groups.\"adm\\u001b[2J\"]\nissuer = \"https://i.example\"\nclient_id = \"c\"", "/c.toml:1: a group name must not be empty or hold control characters"),
        ]
        for (text, expected) in cases {
            XCTAssertThrowsError(try Configuration.parse(text, file: "/c.toml")) { error in
                XCTAssertEqual("\(error)", expected)
            }
        }
    }

    /// A directory in /tmp made by root with `mode`, holding `config.toml` with `text`.
    func adminDirectory(mode: mode_t = 0o755, text: String) throws -> String {
        let dir = "/tmp/msso-admin-test-\(UUID().uuidString)"
        XCTAssertEqual(mkdir(dir, mode), 0)
        chmod(dir, mode)
        try text.write(toFile: dir + "/config.toml", atomically: false, encoding: .utf8)
        chmod(dir + "/config.toml", 0o644)
        return dir
    }

    func testTheStoreIsTheUsersChoiceUnlessTheAdministratorMadeIt() throws {
        try XCTSkipUnless(getuid() == 0, "makes root-owned files")
        let group = "[groups.a]\nissuer = \"https://admin.example\"\nclient_id = \"corp\"\n"
        let user = FileManager.default.temporaryDirectory.appendingPathComponent(UUID().uuidString)
        try FileManager.default.createDirectory(at: user.appendingPathComponent("msso"), withIntermediateDirectories: true)
        try "store = \"kernel\"\n".write(to: user.appendingPathComponent("msso/config.toml"), atomically: true, encoding: .utf8)

        let silent = try adminDirectory(text: group)
        var configuration = try Configuration.load(environment: ["MSSO_SYSTEM_DIR": silent, "XDG_CONFIG_HOME": user.path, "HOME": "/nonexistent"])
        XCTAssertEqual(configuration.store, .kernel)
        XCTAssertEqual(configuration.storeSetIn, user.path + "/msso/config.toml")
        XCTAssertEqual(configuration.warnings, [])

        let insisting = try adminDirectory(text: "store = \"secret-service\"\n" + group)
        configuration = try Configuration.load(environment: ["MSSO_SYSTEM_DIR": insisting, "XDG_CONFIG_HOME": user.path, "HOME": "/nonexistent"])
        XCTAssertEqual(configuration.store, .secretService, "the administrator's choice stands")
        XCTAssertEqual(configuration.storeSetIn, insisting + "/config.toml")
        XCTAssertEqual(configuration.warnings.count, 1)
        XCTAssertTrue(configuration.warnings[0].hasSuffix("`store = \"kernel\"` is ignored: the administrator's \(insisting)/config.toml sets `store = \"secret-service\"`"),
                      configuration.warnings[0])

        configuration = try Configuration.load(environment: ["MSSO_SYSTEM_DIR": silent, "HOME": "/nonexistent"])
        XCTAssertEqual(configuration.store, .auto, "nobody chose: auto")
        XCTAssertNil(configuration.storeSetIn)
    }

    func testAUserFileAddsGroupsButCannotRedefineTheAdmins() throws {
        try XCTSkipUnless(getuid() == 0, "makes root-owned files")
        let admin = try adminDirectory(text: "[groups.a]\nissuer = \"https://admin.example\"\nclient_id = \"corp\"\n")
        let user = FileManager.default.temporaryDirectory.appendingPathComponent(UUID().uuidString)
        try FileManager.default.createDirectory(at: user.appendingPathComponent("msso"), withIntermediateDirectories: true)
        try """
            [groups.a]
            issuer = "https://attacker.example"
            client_id = "mine"

            [groups.b]
            issuer = "https://user.example"
            client_id = "mine"
            """.write(to: user.appendingPathComponent("msso/config.toml"), atomically: true, encoding: .utf8)
        let configuration = try Configuration.load(environment: ["MSSO_SYSTEM_DIR": admin, "XDG_CONFIG_HOME": user.path, "HOME": "/nonexistent"])
        XCTAssertEqual(configuration.groups["a"]?.issuer, "https://admin.example", "the admin's group stands")
        XCTAssertEqual(configuration.groups["a"]?.admin, true)
        XCTAssertEqual(configuration.groups["b"]?.admin, false, "the user's own group is the user's")
        XCTAssertEqual(configuration.warnings.count, 1)
        XCTAssertTrue(configuration.warnings[0].contains("group \"a\" is the administrator's"), configuration.warnings[0])

        let path = Configuration.searchPath(environment: ["MSSO_SYSTEM_DIR": admin, "XDG_CONFIG_HOME": user.path, "HOME": "/nonexistent"])
        XCTAssertEqual(path.map(\.path), [admin + "/config.toml", user.path + "/msso/config.toml"])
    }

    func testAnAdminDirectoryThatIsNotRootsAloneIsIgnored() throws {
        try XCTSkipUnless(getuid() == 0, "makes root-owned files")
        let text = "[groups.a]\nissuer = \"https://evil.example\"\nclient_id = \"c\"\n[policy]\nuser_apps = false\n"
        let writable = try adminDirectory(mode: 0o777, text: text)
        var configuration = try Configuration.load(environment: ["MSSO_SYSTEM_DIR": writable, "HOME": "/nonexistent"])
        XCTAssertTrue(configuration.groups.isEmpty)
        XCTAssertTrue(configuration.policy.userApps, "no policy from a file anyone may have written")
        XCTAssertTrue(configuration.warnings.first?.contains("can be written by others than root") ?? false, "\(configuration.warnings)")

        let owned = try adminDirectory(text: text)
        chown(owned, 65534, 65534)
        configuration = try Configuration.load(environment: ["MSSO_SYSTEM_DIR": owned, "HOME": "/nonexistent"])
        XCTAssertTrue(configuration.groups.isEmpty)
        XCTAssertTrue(configuration.warnings.first?.contains("belongs to uid 65534, not root") ?? false, "\(configuration.warnings)")
        XCTAssertTrue(configuration.warnings.first?.contains("chown root:root \(owned)") ?? false, "the sentence names the fix")

        let good = try adminDirectory(text: text)
        configuration = try Configuration.load(environment: ["MSSO_SYSTEM_DIR": good, "HOME": "/nonexistent"])
        XCTAssertEqual(configuration.groups["a"]?.admin, true)
        XCTAssertFalse(configuration.policy.userApps)
        XCTAssertEqual(AdminFiles.problem(with: "/tmp"), "/tmp is not the administrator's (/tmp can be written by others than root), so it is ignored; fix it with `chmod go-w /tmp`")
    }

    func testAnAdminPathThatCannotBeResolvedIsNotTheAdministrators() throws {
        // Links whose real path is longer than PATH_MAX: open(2) follows them, realpath(3) fails.
        let text = "[groups.a]\nissuer = \"https://evil.example\"\nclient_id = \"c\"\n[policy]\nuser_apps = false\n"
        let top = try adminDirectory(text: text)
        defer { try? FileManager.default.removeItem(atPath: top) }
        var near = top
        for index in 0..<20 {
            near += "/" + String(repeating: "d", count: 250)
            XCTAssertEqual(mkdir(near, 0o755), 0)
            if index % 10 == 9 {
                let link = top + "/link\(index)"
                XCTAssertEqual(symlink(near, link), 0)
                near = link
            }
        }
        XCTAssertTrue(FileManager.default.createFile(atPath: near + "/config.toml", contents: Data(text.utf8)))
        XCTAssertNotNil(FileManager.default.contents(atPath: near + "/config.toml"), "open(2) reaches it")
        XCTAssertNil(AdminFiles.realPath(near + "/config.toml"), "realpath(3) does not")
        XCTAssertEqual(AdminFiles.problem(with: near + "/config.toml"),
                       "\(near)/config.toml: its real path cannot be worked out (File name too long), so it is not taken as the administrator's; name the directory by its real path")
        guard case .refused = AdminFiles.read(near + "/config.toml", maximumSize: 1024) else { return XCTFail("read as the admin's") }
        let configuration = try Configuration.load(environment: ["MSSO_SYSTEM_DIR": near, "HOME": "/nonexistent"])
        XCTAssertTrue(configuration.groups.isEmpty)
        XCTAssertTrue(configuration.policy.userApps)
        XCTAssertEqual(AdminFiles.problem(with: top + "/nothing-here"), nil, "a missing file is nothing to trust or refuse")
        XCTAssertEqual(AdminFiles.read(top + "/nothing-here", maximumSize: 1024), .missing)
        guard getuid() == 0 else { return }
        XCTAssertEqual(AdminFiles.read(top + "/config.toml", maximumSize: 1024), .contents(Data(text.utf8)), "root's own file is read")
        XCTAssertEqual(AdminFiles.read(top + "/config.toml", maximumSize: 10), .contents(nil), "past the cap: not read")
    }

    func testAbsurdDurationsAreRefused() {
        XCTAssertThrowsError(try Configuration.parse("[groups.a]\nissuer = \"https://i.example\"\nclient_id = \"c\"\nsession_timeout = \"99999999d\"\nsession_max = \"99999999d\"",
                                                     file: "/c.toml")) { error in
            XCTAssertEqual("\(error)", "/c.toml:4: `session_timeout`: must be at most 3650d")
        }
        XCTAssertNil(SessionDuration.parse(String(repeating: "9", count: 400) + "d"), "not a finite number of seconds")
    }

    func testSigningProfiles() {
        for (text, profile) in [("bearer", SigningProfile.bearer), ("dpop", SigningProfile(token: .dpop)),
                                ("http-signature", SigningProfile(token: .bearer, messageSignature: true)),
                                ("dpop+http-signature", SigningProfile(token: .dpop, messageSignature: true)),
                                ("header:auth-token+http-signature", SigningProfile(token: .header("auth-token"), messageSignature: true))] {
            XCTAssertEqual(SigningProfile(configValue: text), profile, text)
            XCTAssertEqual(profile.description, text)
        }
        for bad in ["", "dpop+bearer", "http-signature+dpop", "header:", "header:a b", "mtls"] {
            XCTAssertNil(SigningProfile(configValue: bad), bad)
        }
    }

    func testDurations() {
        XCTAssertEqual(SessionDuration.parse("90s"), 90)
        XCTAssertEqual(SessionDuration.parse("30m"), 1800)
        XCTAssertEqual(SessionDuration.parse("12h"), 43200)
        XCTAssertEqual(SessionDuration.parse("1h30m"), 5400)
        XCTAssertEqual(SessionDuration.parse("2d"), 172_800)
        for bad in ["", "30", "m", "0s", "-5m", "5 m", "1.5h", "10x"] {
            XCTAssertNil(SessionDuration.parse(bad), bad)
        }
        XCTAssertEqual(SessionDuration.format(5400), "1h30m")
    }

    // MARK: Where the administrator's files are, and what the environment may change

    func testAReleaseBuildReadsTheAdministratorsFilesFromEtcMssoWhateverTheEnvironmentSays() {
        let environment = ["MSSO_SYSTEM_DIR": "/usr", "MSSO_CONFIG": "/home/u/mine.toml", "XDG_CONFIG_HOME": "/home/u/.config",
                           "HOME": "/home/u"]
        XCTAssertEqual(Configuration.directories(environment: environment, testPaths: false).system, "/etc/msso")
        XCTAssertEqual(Configuration.directories(environment: environment, testPaths: false).user, "/home/u/.config/msso")
        let path = Configuration.searchPath(environment: environment, testPaths: false)
        XCTAssertEqual(path.map(\.path), ["/etc/msso/config.toml", "/home/u/mine.toml"], "MSSO_CONFIG stands in for the user's file only")
        XCTAssertEqual(path.map(\.admin), [true, false])
        XCTAssertEqual(Configuration.searchPath(environment: ["HOME": "/home/u"], testPaths: false).map(\.path),
                       ["/etc/msso/config.toml", "/home/u/.config/msso/config.toml"])
        // The tests' build (debug: MSSO_TEST_PATHS) takes the directory from the environment.
        XCTAssertTrue(Configuration.testPaths, "unit tests run the debug build")
        XCTAssertEqual(Configuration.directories(environment: environment, testPaths: true).system, "/usr")
        XCTAssertEqual(Configuration.searchPath(environment: environment, testPaths: true).map(\.path), ["/usr/config.toml", "/home/u/mine.toml"])
    }

    func testAReleaseBuildKeepsThePolicyOfEtcMssoWhenTheEnvironmentNamesAnotherRootDirectory() throws {
        try XCTSkipUnless(getuid() == 0, "makes root-owned files")
        // A root-owned directory holding no policy: what MSSO_SYSTEM_DIR=/usr did to mssod.
        let elsewhere = try adminDirectory(text: "[groups.z]\nissuer = \"https://elsewhere.example\"\nclient_id = \"c\"\n")
        let etc = try Configuration.load(environment: ["HOME": "/nonexistent"], testPaths: false)
        let moved = try Configuration.load(environment: ["MSSO_SYSTEM_DIR": elsewhere, "HOME": "/nonexistent"], testPaths: false)
        XCTAssertEqual(moved.groups, etc.groups, "the groups of /etc/msso, not of \(elsewhere)")
        XCTAssertEqual(moved.policy, etc.policy)
        XCTAssertEqual(moved.systemDirectory, "/etc/msso")
        XCTAssertNil(moved.groups["z"])
        XCTAssertEqual(moved.warnings.last, "MSSO_SYSTEM_DIR=\(elsewhere) is ignored: mssod reads the administrator's files from /etc/msso only (a debug build made for msso's tests reads the variable)",
                       "said in the log and by msso doctor")
        XCTAssertEqual(try Configuration.load(environment: ["MSSO_SYSTEM_DIR": elsewhere, "HOME": "/nonexistent"], testPaths: true).groups["z"]?.admin,
                       true, "the tests' build reads it")
    }

    func testMSSOConfigReplacesTheUsersFileNeverTheAdministrators() throws {
        try XCTSkipUnless(getuid() == 0, "makes root-owned files")
        let admin = try adminDirectory(text: "[groups.a]\nissuer = \"https://admin.example\"\nclient_id = \"corp\"\n[policy]\nuser_apps = false\n")
        // Root's file, in a root-owned directory: before, MSSO_CONFIG read it alone, as the admin's.
        let other = try adminDirectory(text: "[groups.b]\nissuer = \"https://user.example\"\nclient_id = \"mine\"\n")
        let configuration = try Configuration.load(environment: ["MSSO_SYSTEM_DIR": admin, "MSSO_CONFIG": other + "/config.toml", "HOME": "/nonexistent"])
        XCTAssertEqual(configuration.groups["a"]?.admin, true, "the admin's groups are read whatever MSSO_CONFIG says")
        XCTAssertEqual(configuration.groups["b"]?.admin, false, "MSSO_CONFIG's groups are the user's, whoever owns the file")
        XCTAssertFalse(configuration.policy.userApps, "the admin's policy stands")
        XCTAssertEqual(configuration.warnings, [])

        let withPolicy = try adminDirectory(text: "[policy]\nuser_apps = true\n")
        XCTAssertThrowsError(try Configuration.load(environment: ["MSSO_SYSTEM_DIR": admin, "MSSO_CONFIG": withPolicy + "/config.toml", "HOME": "/nonexistent"])) { error in
            XCTAssertEqual("\(error)", "\(withPolicy)/config.toml:1: only the administrator's config.toml may set [policy]")
        }
        let same = try Configuration.load(environment: ["MSSO_SYSTEM_DIR": admin, "MSSO_CONFIG": admin + "/config.toml", "HOME": "/nonexistent"])
        XCTAssertEqual(same.groups["a"]?.admin, true)
        XCTAssertEqual(same.warnings, [], "the admin's file named again is read once, as the admin's")
    }

    // MARK: The route to an identity provider

    func testClientAuthenticationPromptAndTheRedirectAddress() throws {
        func group(_ lines: String) throws -> GroupConfig {
            try Configuration.parse("[groups.a]\nissuer = \"https://i.example\"\nclient_id = \"c\"\n" + lines, file: "/etc/msso/c.toml")[0]
        }
        XCTAssertNil(try group("").clientAuthentication, "unset: chosen from discovery")
        XCTAssertEqual(try group("client_secret = \"s\"\ntoken_endpoint_auth_method = \"client_secret_post\"").clientAuthentication, .clientSecretPost)
        XCTAssertEqual(try group("client_secret_file = \"s\"\ntoken_endpoint_auth_method = \"client_secret_basic\"").clientAuthentication, .clientSecretBasic)
        let keyed = try group("client_key = \"keys/c.pem\"\ntoken_endpoint_auth_method = \"private_key_jwt\"")
        XCTAssertEqual(keyed.clientAuthentication, .privateKeyJWT)
        XCTAssertEqual(keyed.clientKeyFile, "/etc/msso/keys/c.pem", "relative to the file, as client_secret_file")
        XCTAssertEqual(try group("token_endpoint_auth_method = \"none\"").clientAuthentication, ClientAuthentication.none)
        XCTAssertNil(try group("token_endpoint_auth_method = \"private_key_jwt\"").clientKeyFile, "the group's own key signs")

        XCTAssertNil(try group("").effectivePrompt)
        XCTAssertEqual(try group("scopes = [\"openid\", \"offline_access\"]").effectivePrompt, "consent",
                       "OpenID Connect Core §11: offline access is asked for with prompt=consent")
        XCTAssertNil(try group("scopes = [\"openid\", \"offline_access\"]\nprompt = \"\"").effectivePrompt, "\"\" sends none")
        XCTAssertEqual(try group("prompt = \"login consent\"").effectivePrompt, "login consent")

        let refusals: [(String, String)] = [
            ("token_endpoint_auth_method = \"client_secret_jwt\"",
             "`token_endpoint_auth_method`: expected one of \"client_secret_basic\", \"client_secret_post\", \"private_key_jwt\", \"none\", got \"client_secret_jwt\""),
            ("token_endpoint_auth_method = \"client_secret_basic\"", "`token_endpoint_auth_method`: client_secret_basic needs client_secret or client_secret_file"),
            ("client_secret = \"s\"\ntoken_endpoint_auth_method = \"private_key_jwt\"", "`token_endpoint_auth_method`: private_key_jwt sends no client secret"),
            ("client_secret = \"s\"\ntoken_endpoint_auth_method = \"none\"", "`token_endpoint_auth_method`: \"none\" is for a public client"),
            ("client_secret = \"s\"\nclient_key = \"/k.pem\"", "`client_key`: give a client secret or client_key, not both"),
            ("prompt = \"always\"", "`prompt`: expected \"login\", \"consent\""),
            ("prompt = \"none login\"", "`prompt`: expected"),
            ("redirect_uri = \"http://[::1]:4600/callback\"", "`redirect_uri`: expected a loopback http URL on 127.0.0.1"),
            ("redirect_uri = \"http://localhost:4600/callback\"", "msso's redirect listener serves 127.0.0.1 only"),
        ]
        for (lines, expected) in refusals {
            XCTAssertThrowsError(try group(lines), lines) { error in
                XCTAssertTrue("\(error)".contains(expected), "\(error)")
            }
        }
    }

    func testProxyIsAGroupKey() throws {
        let text = """
            [groups.a]
            issuer = "https://idp.example"
            client_id = "c"
            proxy = "http://proxy.corp:3128"
            [groups.b]
            issuer = "https://idp.example"
            client_id = "c"
            proxy = "socks5://127.0.0.1:1080"
            """
        let groups = try Configuration.parse(text, file: "/etc/msso/config.toml")
        XCTAssertEqual(groups.map(\.proxy), ["http://proxy.corp:3128", "socks5://127.0.0.1:1080"])
        for bad in ["proxy.corp:3128", "ftp://proxy.corp", "http://", "http://proxy.corp:3128/path", "http://proxy.corp:0"] {
            XCTAssertThrowsError(try Configuration.parse("[groups.a]\nissuer = \"https://i.example\"\nclient_id = \"c\"\nproxy = \"\(bad)\"\n", file: "/c.toml"), bad) { error in
                XCTAssertTrue("\(error)".hasPrefix("/c.toml:4: `proxy`: expected a proxy URL"), "\(error)")
            }
        }
        // A user's group may name its own proxy: it could set https_proxy for mssod anyway.
        let user = try Configuration.parseFile(text, file: "/home/u/.config/msso/config.toml", admin: false).groups
        XCTAssertEqual(user.map(\.proxy), ["http://proxy.corp:3128", "socks5://127.0.0.1:1080"])
    }

    func testAnAdministratorsGroupAndAUsersGroupNamingTheSameIssuerNeverShareARoute() {
        var admin = GroupConfig(name: "corp", issuer: "https://login.corp/realms/x", clientID: "msso")
        admin.admin = true
        var user = GroupConfig(name: "mine", issuer: admin.issuer, clientID: "msso")
        user.admin = false
        XCTAssertEqual(IdPRoute(admin).proxy, .direct, "an admin's group never takes the environment's proxy")
        XCTAssertEqual(IdPRoute(user).proxy, .environment)
        XCTAssertNotEqual(IdPRoute(admin), IdPRoute(user), "the same issuer: still two routes, two discovery documents")
        user.caFile = "/home/u/evil-ca.pem"
        user.proxy = "http://127.0.0.1:8080"
        XCTAssertNotEqual(IdPRoute(admin), IdPRoute(user))
        var twin = admin
        twin.name = "corp2"
        XCTAssertEqual(IdPRoute(admin), IdPRoute(twin), "two admin groups of one provider, CA and proxy share its document")
        twin.caFile = "/etc/msso/corp-ca.pem"
        XCTAssertNotEqual(IdPRoute(admin), IdPRoute(twin), "another CA: another fetch")
        twin.caFile = nil
        twin.proxy = "http://proxy.corp:3128"
        XCTAssertEqual(IdPRoute(twin).proxy, .configured("http://proxy.corp:3128"))
        XCTAssertNotEqual(IdPRoute(admin), IdPRoute(twin), "another proxy: another fetch")
    }

    // MARK: [forward."HOST"]

    func testForwardTablesTheirDefaultsAndTheirVerbs() throws {
        let text = """
            [forward."Build01.example.com"]
            groups = ["com.example.suite"]

            [forward.ci]
            groups = ["a", "b"]
            verbs = ["token", "login", "logout", "subscribe"]
            confirm = false
            """
        let rules = try Configuration.parseForwards(text, file: "/u/config.toml")
        XCTAssertEqual(rules.count, 2)
        XCTAssertEqual(rules[0].host, "build01.example.com", "host names compare without case")
        XCTAssertEqual(rules[0].groups, ["com.example.suite"])
        XCTAssertEqual(rules[0].verbs, [.token, .sign, .status, .check], "by default: tokens, signatures, and how sessions stand")
        XCTAssertTrue(rules[0].confirm, "each new request asks, unless the table says otherwise")
        XCTAssertEqual(rules[0].source, "/u/config.toml:1")
        XCTAssertFalse(rules[0].admin)
        XCTAssertEqual(rules[1].verbs, [.token, .login, .logout, .subscribe])
        XCTAssertFalse(rules[1].confirm)
    }

    func testForwardTablesRefuseWhatAHostMayNeverDoNamingFileLineAndKey() {
        let cases: [(String, String)] = [
            ("[forward.h]\nverbs = [\"token\"]",
             "/c.toml:1: `groups`: [forward.\"h\"] must name the access groups the host may use, like groups = [\"com.example.suite\"]"),
            ("[forward.h]\ngroups = []", "/c.toml:2: `groups`: names no group; remove the table to forward nothing to h"),
            ("[forward.h]\ngroups = \"g\"", "/c.toml:2: `groups`: expected an array of strings, like [\"openid\"]"),
            ("[forward.h]\ngroups = [\"g\"]\nconfirm = \"yes\"", "/c.toml:3: `confirm`: expected true or false"),
            ("[forward.h]\ngroups = [\"g\"]\nshell = true", "/c.toml:3: `shell`: unknown key in [forward.\"h\"]; expected groups, verbs, confirm, accounts"),
            ("[forward.\"user@h\"]\ngroups = [\"g\"]",
             "/c.toml:1: expected [forward.\"HOST\"], HOST as you give it to ssh without a user name: letters, digits, `.`, `-`, `_` and `:`, at most 253 bytes"),
            ("[forward]\ngroups = [\"g\"]",
             "/c.toml:1: expected [forward.\"HOST\"], HOST as you give it to ssh without a user name: letters, digits, `.`, `-`, `_` and `:`, at most 253 bytes"),
            ("[forward.h]\ngroups = [\"g\"]\n[forward.H]\ngroups = [\"g\"]",
             "/c.toml:3: host \"h\" already has a table, at line 1 (host names compare without case)"),
            ("[forward.h]\ngroups = [\"g\"]\nverbs = [\"token\", \"teleport\"]",
             "/c.toml:3: `verbs`: unknown verb \"teleport\"; expected some of check, extend, login, logout, sign, status, subscribe, token"),
            ("[policy]\nforwarding = \"no\"", "/c.toml:2: `forwarding`: expected true or false"),
        ]
        for (text, expected) in cases {
            XCTAssertThrowsError(try Configuration.parseForwards(text, file: "/c.toml", admin: true)) { error in
                XCTAssertEqual("\(error)", expected)
            }
        }
        // Management, locking, registering and forwarding on are never the remote host's.
        for verb in ["lock", "unlock", "apps", "keys", "audit", "diagnose", "forward", "hello"] {
            XCTAssertThrowsError(try Configuration.parseForwards("[forward.h]\ngroups = [\"g\"]\nverbs = [\"\(verb)\"]", file: "/c.toml")) { error in
                XCTAssertTrue("\(error)".hasPrefix("/c.toml:3: `verbs`: \"\(verb)\" is never allowed from a forwarded host"), "\(error)")
            }
        }
        XCTAssertFalse(ForwardRule.allowedVerbs.contains(.lock) || ForwardRule.allowedVerbs.contains(.forward) || ForwardRule.allowedVerbs.contains(.apps))
    }

    func testTheAdministratorsForwardTableStandsAndForwardingFalseIsTheAdministratorsAlone() throws {
        try XCTSkipUnless(getuid() == 0, "makes root-owned files")
        let admin = try adminDirectory(text: """
            [groups.a]
            issuer = "https://admin.example"
            client_id = "corp"

            [forward.build01]
            groups = ["a"]
            verbs = ["status"]
            """)
        let user = FileManager.default.temporaryDirectory.appendingPathComponent(UUID().uuidString)
        try FileManager.default.createDirectory(at: user.appendingPathComponent("msso"), withIntermediateDirectories: true)
        try """
            [forward.build01]
            groups = ["a"]
            verbs = ["token", "sign"]
            confirm = false

            [forward.laptop]
            groups = ["a", "nowhere"]
            """.write(to: user.appendingPathComponent("msso/config.toml"), atomically: true, encoding: .utf8)
        let environment = ["MSSO_SYSTEM_DIR": admin, "XDG_CONFIG_HOME": user.path, "HOME": "/nonexistent"]
        let configuration = try Configuration.load(environment: environment)
        XCTAssertEqual(configuration.forwards["build01"]?.verbs, [.status], "the administrator's table for the host stands")
        XCTAssertEqual(configuration.forwards["build01"]?.admin, true)
        XCTAssertEqual(configuration.forwards["laptop"]?.admin, false, "a host the administrator says nothing about is the user's")
        XCTAssertTrue(configuration.policy.forwarding)
        XCTAssertEqual(configuration.forwards["laptop"]?.groups, ["nowhere"],
                       "a user's table cannot give a host the administrator's group (any program of the user can open a forward)")
        XCTAssertEqual(configuration.warnings.count, 3, "\(configuration.warnings)")
        XCTAssertTrue(configuration.warnings[0].hasSuffix("config.toml:1: [forward.\"build01\"] is ignored: the administrator's \(admin)/config.toml:5 sets what that host may do"),
                      configuration.warnings[0])
        XCTAssertTrue(configuration.warnings[1].hasSuffix("[forward.\"laptop\"] names group \"nowhere\", which is not configured"), configuration.warnings[1])
        XCTAssertTrue(configuration.warnings[2].hasSuffix("[forward.\"laptop\"] cannot name the administrator's group \"a\": only a [forward] table in the administrator's config.toml can"),
                      configuration.warnings[2])

        let off = try adminDirectory(text: "[policy]\nforwarding = false\n")
        XCTAssertFalse(try Configuration.load(environment: ["MSSO_SYSTEM_DIR": off, "XDG_CONFIG_HOME": user.path, "HOME": "/nonexistent"]).policy.forwarding)
        // The user's file cannot say it: [policy] is the administrator's.
        XCTAssertThrowsError(try Configuration.parseFile("[policy]\nforwarding = true\n", file: "/u.toml", admin: false))
    }

    func testOnlyTheAdministratorTiesAGroupToTheLoginUser() throws {
        let table = "[groups.corp]\nissuer = \"https://i.example\"\nclient_id = \"c\"\n"
        let admin = try Configuration.parseFile(table + "account = \"login-user\"\naccount_claim = \"email\"\n", file: "/etc/msso/config.toml", admin: true).groups[0]
        XCTAssertEqual(admin.account, .loginUser)
        XCTAssertEqual(admin.accountClaim, "email")
        let plain = try Configuration.parseFile(table + "account = \"login-user\"\n", file: "/etc/msso/config.toml", admin: true).groups[0]
        XCTAssertEqual(plain.accountClaim, "preferred_username")
        XCTAssertNil(try Configuration.parseFile(table, file: "/etc/msso/config.toml", admin: true).groups[0].account)
        for (text, words) in [
            (table + "account = \"login-user\"\n", "only a group of the administrator's config.toml"),
            (table + "account_claim = \"sub\"\n", "only a group of the administrator's config.toml"),
        ] {
            XCTAssertThrowsError(try Configuration.parseFile(text, file: "/u.toml", admin: false)) { error in
                XCTAssertTrue("\(error)".contains(words), "\(error)")
            }
        }
        for (text, words) in [
            (table + "account = \"alice\"\n", "expected \"login-user\""),
            (table + "account = \"login-user\"\naccount_claim = \"\"\n", "the name of an ID token claim"),
            (table + "account_claim = \"email\"\n", "does nothing without"),
        ] {
            XCTAssertThrowsError(try Configuration.parseFile(text, file: "/etc/msso/config.toml", admin: true)) { error in
                XCTAssertTrue("\(error)".contains(words), "\(error)")
            }
        }
    }

    /// How a server of `resources` is named to its provider: an audience (Keycloak, Auth0) or a
    /// scope (Entra ID), for an entry as written in `resources`, one scope each.
    func testServersNamedByAudienceOrScope() throws {
        let group = """
            [groups.a]
            issuer = "https://i.example"
            client_id = "c"
            resources = ["https://git.example/", "https://k8s.example/"]
            tokens = "per-resource"

            """
        let parsed = try Configuration.parse(group + """
            [groups.a.audiences]
            "https://k8s.example/" = "6f1c2d9e-k8s"
            [groups.a.resource_scopes]
            "https://git.example/" = "api://git/.default"
            "https://k8s.example/" = "api://k8s/.default"
            """, file: "/c.toml")[0]
        XCTAssertEqual(parsed.audiences, ["https://k8s.example/": "6f1c2d9e-k8s"])
        XCTAssertEqual(parsed.resourceScopes, ["https://git.example/": "api://git/.default", "https://k8s.example/": "api://k8s/.default"])
        let cases: [(String, String)] = [
            (group + "[groups.a.resource_scopes]\n\"https://git.example/\" = \"api://git/read api://git/write\"",
             "/c.toml:7: `https://git.example/`: expected the one scope the identity provider knows the server by, such as \"api://kubernetes/.default\""),
            (group + "[groups.a.resource_scopes]\n\"https://git.example\" = \"api://git/.default\"",
             "/c.toml:7: `https://git.example`: is not an entry of the group's `resources` (https://git.example/, https://k8s.example/); name the entry as written there"),
            (group.replacingOccurrences(of: "tokens = \"per-resource\"", with: "") + "[groups.a.resource_scopes]\n\"https://git.example/\" = \"api://git/.default\"",
             "/c.toml:6: resource_scopes are asked for only when the group mints a token per server: set `tokens = \"per-resource\"` and `resources` in [groups.\"a\"]"),
            ("[groups.b.resource_scopes]\n\"x\" = \"y\"", "/c.toml:1: [groups.\"b\".resource_scopes] must come after the group's own table [groups.\"b\"]"),
        ]
        for (text, expected) in cases {
            XCTAssertThrowsError(try Configuration.parse(text, file: "/c.toml")) { error in
                XCTAssertEqual("\(error)", expected)
            }
        }
    }

    /// The account keys: a group's `default_account`, a registration's `account`, a host's
    /// `accounts`, each a name as ``AccountName`` allows, or an error naming the rule.
    func testAccountKeysTakeAccountNamesOnly() throws {
        let group = "[groups.a]\nissuer = \"https://i.example\"\nclient_id = \"c\"\n"
        XCTAssertEqual(try Configuration.parse(group + "default_account = \"admin\"", file: "/c.toml")[0].defaultAccount, "admin")
        XCTAssertThrowsError(try Configuration.parse(group + "default_account = \"two words\"", file: "/c.toml")) {
            XCTAssertTrue("\($0)".hasPrefix("/c.toml:4: `default_account`: \"two words\" cannot name an account"), "\($0)")
        }
        let registration = "[apps.mail]\nexecutable = \"/opt/mail\"\ngroups = [\"a\"]\n"
        XCTAssertEqual(try Entitlements.parse(registration + "account = \"ops\"", file: "/f.toml", admin: true)[0].account, "ops")
        XCTAssertThrowsError(try Entitlements.parse(registration + "account = \"-x\"", file: "/f.toml", admin: true)) {
            XCTAssertTrue("\($0)".contains("`account`: \"-x\" cannot name an account"), "\($0)")
        }
        let forward = "[forward.h]\ngroups = [\"a\"]\n"
        XCTAssertEqual(try Configuration.parseForwards(forward + "accounts = [\"admin\", \"ops\"]", file: "/c.toml")[0].accounts, ["admin", "ops"])
        for bad in ["accounts = []", "accounts = [\"a b\"]"] {
            XCTAssertThrowsError(try Configuration.parseForwards(forward + bad, file: "/c.toml")) { XCTAssertTrue("\($0)".contains("`accounts`"), "\($0)") }
        }
    }
}
