@testable import MSSOCore
import MSSOProtocol
import XCTest

/// A group's `resources`: which URLs are within, and which entries parse.
final class ResourcesTests: XCTestCase {
    func testWithinAndOutside() throws {
        let resources = try Resources(["https://git.example.com/", "https://api.example.com/team", "http://127.0.0.1:8080/x/",
                                       "https://[::1]:6443"])
        for url in ["https://git.example.com/", "https://git.example.com", "https://GIT.example.com:443/a/b?c#d", "HTTPS://git.example.com/x",
                    "https://api.example.com/team", "https://api.example.com/team/", "https://api.example.com/team/repo.git/info/refs?x=1",
                    "http://127.0.0.1:8080/x/y", "https://[::1]:6443/api", "https://git.example.com/a/../b"] {
            XCTAssertTrue(resources.allows(url), url)
        }
        for url in ["https://attacker.example/", "http://git.example.com/", "https://git.example.com:444/", "https://git.example.com./",
                    "https://git.example.com@attacker.example/", "https://attacker.example\\@git.example.com/",
                    "https://git.example.com%2eattacker.example/", "https://git.example.com:0/", "https://git.example.com:99999/",
                    "https://api.example.com/teams", "https://api.example.com/", "https://api.example.com/Team",
                    "https://api.example.com/team/../admin", "https://api.example.com/team/%2E%2e/admin", "https://api.example.com/team/./x",
                    "https://api.example.com/team/a%2fb", "https://api.example.com/team/a%5Cb", "https://api.example.com/team\\..\\x",
                    "http://127.0.0.1:8080/x", "http://127.0.0.1:8080/y/", "https://[::1]/api", "ftp://git.example.com/",
                    "git.example.com/", "https:/git.example.com/", "https://git.example.com/ a", "https://git.example.com/\u{1B}",
                    "https://gït.example.com/", ""] {
            XCTAssertFalse(resources.allows(url), url)
        }
    }

    /// Plain http is allowed on loopback only, and an issuer, a group's `resources` and a provider's
    /// endpoints share one definition of it (there were three, and they disagreed on 127.0.0.2).
    func testLoopbackIsOneDefinitionForIssuersAndResources() throws {
        let loopback = ["127.0.0.1", "127.0.0.2", "127.255.255.255", "localhost", "LocalHost", "::1", "[::1]"]
        let internet = ["127.attacker.example", "127.0.0.1.attacker.example", "127.0.0", "127.0.0.256", "128.0.0.1",
                        "localhost.attacker.example", "0x7f.0.0.1", "127.0.0.01x", "attacker.example"]
        for host in loopback {
            XCTAssertTrue(Loopback.isHost(host), host)
            let url = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
            XCTAssertNoThrow(try Resources(["http://\(url):8080/"]), host)
            XCTAssertNoThrow(try Configuration.parse("[groups.a]\nissuer = \"http://\(url):9000\"\nclient_id = \"c\"", file: "f"), host)
        }
        for host in internet {
            XCTAssertFalse(Loopback.isHost(host), host)
            XCTAssertThrowsError(try Resources(["http://\(host)/"]), host)
            XCTAssertThrowsError(try Configuration.parse("[groups.a]\nissuer = \"http://\(host)\"\nclient_id = \"c\"", file: "f"), host)
        }
    }

    func testEntriesAreParsedStrictly() {
        XCTAssertNoThrow(try Resources(["https://git.example.com/", "https://k8s.example.com:6443", "http://localhost:1/", "https://a/b/c"]))
        for bad in [[], ["https://*.example.com/"], ["git.example.com"], ["https://git.example.com/?q"], ["https://git.example.com/#f"],
                    ["https://user@git.example.com/"], ["http://git.example.com/"], ["https://git.example.com/a/../b"],
                    ["https://git.example.com/a%2fb"], ["https://git.example.com:70000/"], ["ftp://git.example.com/"],
                    ["https://git.example.com/ x"], Array(repeating: "https://a/", count: 65)] {
            XCTAssertThrowsError(try Resources(bad), "\(bad)")
        }
    }

    func testTheRefusalNamesTheResourcesAndTheFix() throws {
        let resources = try Resources(["https://git.example.com/"])
        XCTAssertNoThrow(try resources.authorize("https://git.example.com/x", group: "g", verb: "token"))
        do {
            try resources.authorize("https://attacker.example/", group: "g", verb: "token")
            XCTFail("allowed")
        } catch {
            XCTAssertEqual(error.name, .resourceForbidden)
            XCTAssertTrue(error.message.contains("https://git.example.com/") && error.message.contains("`resources`"), error.message)
        }
        do {
            try resources.authorize(nil, group: "g", verb: "token")
            XCTFail("allowed")
        } catch {
            XCTAssertEqual(error.name, .resourceForbidden)
            XCTAssertTrue(error.message.contains("--resource"), error.message)
        }
    }

    func testTheConfigurationParsesResourcesAndNamesTheLineOfABadOne() throws {
        let good = """
            [groups."g"]
            issuer = "https://login.example.com"
            client_id = "c"
            resources = [
              "https://git.example.com/",
              "https://k8s.example.com:6443/",
            ]
            """
        XCTAssertEqual(try Configuration.parse(good, file: "/c.toml").first?.resources?.entries,
                       ["https://git.example.com/", "https://k8s.example.com:6443/"])
        let none = "[groups.\"g\"]\nissuer = \"https://login.example.com\"\nclient_id = \"c\"\n"
        XCTAssertNil(try Configuration.parse(none, file: "/c.toml").first?.resources)
        XCTAssertThrowsError(try Configuration.parse(none + "resources = [\"https://*.example.com/\"]\n", file: "/c.toml")) { error in
            XCTAssertTrue("\(error)".hasPrefix("/c.toml:4: `resources`: \"https://*.example.com/\" is not a URL prefix"), "\(error)")
        }
        XCTAssertThrowsError(try Configuration.parse(none + "resources = \"https://git.example.com/\"\n", file: "/c.toml")) { error in
            XCTAssertTrue("\(error)".hasPrefix("/c.toml:4: `resources`: expected an array of strings"), "\(error)")
        }
    }
}
