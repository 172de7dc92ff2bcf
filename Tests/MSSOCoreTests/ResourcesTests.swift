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

    /// Under a path prefix, a segment a server could read as `.` or `..` is refused: Java servers
    /// (Tomcat) drop a segment's `;params` before resolving, so `/team/..;/admin/x` ran `/admin`
    /// with msso's token (an outside security test); some servers decode twice; a `?`, `#` or NUL
    /// decoded ends the segment for a server that decodes before it parses.
    func testASegmentAServerCouldReadAsADotSegmentIsRefused() throws {
        let resources = try Resources(["https://api.example.com/team/", "https://api.example.com/v;1", "https://git.example.com/"])
        for path in ["..;/admin/x", ".;/x", "..;jsessionid=x/admin", "%2e%2e;x/admin", "%2E./admin", ".%2E/admin", "%2e", "..;",
                     "a/b/..;", ".%3bx", "..%3b/admin", "..%3B/admin", "..%253bx/admin", "%252e%252e/admin", "%25252e%25252E/admin",
                     "%252E%252e;x/admin", "%%32e%%32e/admin", "%%32%65./admin", "..%3f/admin", "..%23/admin", "..%00/admin",
                     "x/%2e%2e%3F", "%252e;/x", "%25%32%65", "a%252fb", "a%25252Fb", "a%255cb", "..%252f..%252fadmin", "x;a%2fb"] {
            XCTAssertFalse(resources.allows("https://api.example.com/team/" + path), path)
        }
        for url in ["https://api.example.com/v;1/..;/admin", "https://api.example.com/v;1/%2e%2e", "https://api.example.com/v;12",
                    "https://api.example.com/v", "https://api.example.com/v/x", "https://api.example.com/team;x/../admin",
                    "https://api.example.com/team;x/admin"] {
            XCTAssertFalse(resources.allows(url), url)
        }
        // Only the path matters; a name that merely holds dots, or dots only after `;`, is no dot segment.
        for path in ["x?a=../../admin", "x#/../admin", "x?..;/", "x?%2e%2e", "x?a=%2f", "..x", "x..", ".hidden", "a;..", ";../x",
                     "x;jsessionid=abc", "x;v=1/y", "a%20b", "%41", "100%25", "%25", "%2541", "%", "%2", "%252", "a%3b..", "%20",
                     "%c3%a9t%c3%a9", "%u00e9", "%uD800", "%u2e", "na%C3%AFve", "%e2%80%a6x", ".%20x", "x%20.."] {
            XCTAssertTrue(resources.allows("https://api.example.com/team/" + path), path)
        }
        // Found by an outside test: readings of lenient servers (IIS's %u, Windows dropping
        // trailing spaces and dots, overlong UTF-8 in old Java decoders, NFKC's full-width dots,
        // slashes folded to `/`) each reached outside the prefix.
        for path in ["%u002e%u002e", "%U002E%U002E", "%u002e%u002e%u002fadmin", "x%u2215..%u2215admin", "..%20", "..%09", "..%0a",
                     "..%0d/admin", "%20..%20", "%c0%ae%c0%ae", "..%c0%af", "%e0%80%ae%e0%80%ae/admin", "%f0%80%80%ae.", "%ef%bc%8e%ef%bc%8e",
                     "%EF%BC%8E./admin", "..%2e", "...", "....", "%2e%2e%2e", ".%2e.", "a%ef%bc%8fb", "a%e2%88%95b", "a%c1%9cb",
                     "a%ef%bc%bcb", "%u2024%u2024", "%25u002e%25u002e", "%%75002e%2e", "..%u0020", "%e2%80%a5", "%u2026", "%e2%80%a4.",
                     // A second outside test's: overlong NUL, space, `;`, `?`, `#`; control and Unicode
                     // white space; more slashes and dots (best-fit ¥ and ₩, ideographic full stops).
                     "..%c0%80/admin", "..%e0%80%80", "..%f0%80%80%80", "..%c0%a0", "..%e0%80%a0", "..%c0%bb", "..%c0%bbjsessionid=1",
                     "..%c0%bf", "..%c0%a3", "%c0%ae%c0%ae%c0%80", "%c0%ae%c0%ae%c0%a0", "..%25c0%2580", "..%01", "..%1c", "..%1f", "..%7f",
                     "..%c2%a0", "..%c2%85", "..%e2%80%80", "..%e2%80%8b", "..%e2%80%a8", "..%e3%80%80", "..%ef%bb%bf", "%1f..", "%c2%a0..",
                     "x%C2%A5..%C2%A5admin", "x%E2%82%A9..", "a%e2%88%96b", "a%e2%95%b1b", "a%e2%95%b2b", "a%e2%9f%8bb", "a%e2%9f%8db",
                     "a%e2%a7%b8b", "a%e2%a7%b9b", "a%cc%b8b", "a%e1%9c%b5b", "a%ef%bf%a5b", "a%ef%bf%a6b", "%EF%BD%A1%EF%BD%A1",
                     "%E3%80%82%E3%80%82",
                     // A third's: IIS's lax overlong forms (a continuation byte's high bits, even its hex, wrong).
                     "%c0%2e%c0%2e/x", "x/%c0%2e%c0%2e/%c0%2e%c0%2e/y", "%e0%80%2e%e0%80%2e/x", "..%c1%1c..%c1%1cy", "..%c0%9v..%c0%9vy",
                     "..%c0%qf..", "..%c1%8s..", "..%c1%pc..", "a%e9b"] {
            XCTAssertFalse(resources.allows("https://api.example.com/team/" + path), path)
        }
        XCTAssertTrue(resources.allows("https://api.example.com/v;1/x"))
        XCTAssertTrue(resources.allows("https://api.example.com/v;1"))
        // A whole origin has nothing outside it to reach.
        for path in ["..;/x", "%252e%252e/x", "a%252fb", "%u002e%u002e", "..%20"] { XCTAssertTrue(resources.allows("https://git.example.com/" + path), path) }
    }

    /// The one-pass decoding agrees with decoding whole passes until nothing changes (what a
    /// server that decodes N times sees, for every N), on random segments made of the bytes that
    /// matter.
    func testDecodingInOnePassAgreesWithRepeatedPasses() {
        func pass(_ bytes: [UInt8]) -> [UInt8] {
            var out: [UInt8] = [], i = 0
            while i < bytes.count {
                if bytes[i] == UInt8(ascii: "%"), i + 2 < bytes.count, Resources.isHex(bytes[i + 1]), Resources.isHex(bytes[i + 2]) {
                    out.append(Resources.hexValue(bytes[i + 1]) << 4 | Resources.hexValue(bytes[i + 2]))
                    i += 3
                } else if bytes[i] == UInt8(ascii: "%"), i + 5 < bytes.count, bytes[i + 1] | 0x20 == UInt8(ascii: "u"),
                          bytes[(i + 2)...(i + 5)].allSatisfy(Resources.isHex),
                          let scalar = Unicode.Scalar(bytes[(i + 2)...(i + 5)].reduce(UInt32(0)) { $0 << 4 | UInt32(Resources.hexValue($1)) }) {
                    out.append(contentsOf: UTF8.encode(scalar)!)
                    i += 6
                } else {
                    out.append(bytes[i])
                    i += 1
                }
            }
            return out
        }
        // The model: whole passes, then the decoded bytes read as the lenient server reads them.
        let alphabet = Array("%25eEfF3bc.;a0uU9".utf8)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let segment = (0..<Int.random(in: 1...16, using: &generator)).map { _ in alphabet.randomElement(using: &generator)! }
            var decoded = segment
            while case let next = pass(decoded), next != decoded { decoded = next }
            let expected = decoded.withUnsafeMutableBufferPointer { Resources.lenientKind($0) }
            XCTAssertEqual(segment.withUnsafeBufferPointer { Resources.decodedKind($0) }, expected, String(decoding: segment, as: UTF8.self))
        }
    }

    /// The refusal of such a path names the segment, why, and what to do instead.
    func testTheRefusalOfAnEscapingPathNamesTheSegmentAndTheFix() throws {
        let resources = try Resources(["https://api.example.com/team/"])
        for (url, segment, words) in [("https://api.example.com/team/..;/admin/x", "..;", "read as `..`"),
                                      ("https://api.example.com/team/%252e%252e/admin", "%252e%252e", "read as `..`"),
                                      ("https://api.example.com/team/a%252fb", "a%252fb", "encoded slash"),
                                      ("https://api.example.com/team/../admin", "..", "is a dot segment")] {
            do {
                try resources.authorize(url, group: "g", verb: "signature")
                XCTFail("allowed: \(url)")
            } catch {
                XCTAssertEqual(error.name, .resourceForbidden)
                XCTAssertTrue(error.message.contains("\"\(segment)\"") && error.message.contains(words), error.message)
                XCTAssertTrue(error.message.contains("https://api.example.com/team/") && error.message.contains("`resources`"), error.message)
            }
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
        XCTAssertNoThrow(try Resources(["https://git.example.com/", "https://k8s.example.com:6443", "http://localhost:1/", "https://a/b/c",
                                     "https://a/b;v=1/", "https://a/b..;"]))
        for bad in [[], ["https://*.example.com/"], ["git.example.com"], ["https://git.example.com/?q"], ["https://git.example.com/#f"],
                    ["https://user@git.example.com/"], ["http://git.example.com/"], ["https://git.example.com/a/../b"],
                    ["https://git.example.com/a%2fb"], ["https://git.example.com/a/..;/b"], ["https://git.example.com/a/%252e%252e/b"],
                    ["https://git.example.com/a%252fb/"], ["https://git.example.com:70000/"], ["ftp://git.example.com/"],
                    ["https://git.example.com/ x"], Array(repeating: "https://a/", count: 65),
                    // An address or host in a form requests never use (an outside test split one server in two with them).
                    ["https://[2001:0db8::1]/"], ["https://[0:0::1]/"], ["https://[::g]/"], ["https://h.example./"],
                    ["https://010.0.0.1/"], ["https://10.0.1/"], ["https://1.2.3.4.5/"]] {
            XCTAssertThrowsError(try Resources(bad), "\(bad)")
        }
        XCTAssertNoThrow(try Resources(["https://[2001:db8::1]/", "https://[2001:DB8::2]/", "https://[::1]:8443/x", "https://10.0.0.1/", "http://127.0.0.1:8080/"]))
    }

    /// Found by an outside test: where two entries share a server (each with a token of its own),
    /// an entry written `//admin/`, `%61dmin/` or `admin;x/` gave `/admin/x` the `/` entry's token.
    func testEntriesThatShareAServerHavePlainPaths() throws {
        for odd in ["https://h.example//admin/", "https://h.example/%61dmin/", "https://h.example/admin;x/", "https://h.example/a//b/",
                    "https://h.example/admin~1/"] {
            XCTAssertNotNil(try Resources(["https://h.example/", odd]).entryProblemWherePathsShareAServer(), odd)
            XCTAssertNil(try Resources(["https://other.example/", odd]).entryProblemWherePathsShareAServer(), "alone on its server: \(odd)")
        }
        for plain in ["https://h.example/admin/", "https://h.example/admin", "https://h.example/a/b-c_d.e/"] {
            XCTAssertNil(try Resources(["https://h.example/", plain]).entryProblemWherePathsShareAServer(), plain)
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

    /// Found by an outside test: paths a lenient server reads under `/team/` (IIS drops trailing
    /// spaces and NTFS stream names; others read full-width dots) got the root entry's token.
    /// Where two entries share a server, only plain segments get either.
    func testAnEntrysSegmentIsNoneOfTheOthersWithMoreAfterIt() throws {
        // `/r10/` beside `/r1/` is its own entry (the kernel keyring's sixteen servers); `/r100/` is neither's.
        let resources = try Resources((0..<16).map { "http://127.0.0.1:9/r\($0)/" })
        for n in 0..<16 { XCTAssertNil(resources.unplainSegment("http://127.0.0.1:9/r\(n)/x"), "r\(n)") }
        XCTAssertNotNil(resources.unplainSegment("http://127.0.0.1:9/r100/x"))
        XCTAssertNotNil(resources.unplainSegment("http://127.0.0.1:9/r1x/x"))
    }

    func testWhereTwoEntriesShareAServerOnlyPlainSegmentsGetAToken() throws {
        let resources = try Resources(["https://x.example.com/", "https://x.example.com/team/", "https://other.example.com/"])
        for url in ["https://x.example.com/team%20/a", "https://x.example.com/team.%20/a", "https://x.example.com/team%20./a",
                    "https://x.example.com/TEAM%20/a", "https://x.example.com/team::$INDEX_ALLOCATION/a",
                    "https://x.example.com/team:$i30:$INDEX_ALLOCATION/a", "https://x.example.com/team%09/a",
                    "https://x.example.com/x/..%20/team/a", "https://x.example.com/team/..%20/a",
                    "https://x.example.com/team/%ef%bc%8e%ef%bc%8e/a", "https://x.example.com/team/..%u2215a",
                    "https://x.example.com/team/%252e%252e/a", "https://x.example.com/a/./b", "https://x.example.com/a%2fb",
                    // A second outside test's: IIS short names, Spring's suffix patterns.
                    "https://x.example.com/TEAM~1/a", "https://x.example.com/team~1/a", "https://x.example.com/team~/a",
                    "https://x.example.com/team.json", "https://x.example.com/Team.aspx", "https://x.example.com/team.php/x",
                    "https://x.example.com/x/.../team/a",
                    // A third's: nginx's `location /team` takes any segment that begins so.
                    "https://x.example.com/teamx/y", "https://x.example.com/team-x/y", "https://x.example.com/team+/x",
                    "https://x.example.com/team@x/y", "https://x.example.com/team(x)/y"] {
            XCTAssertNotNil(resources.unplainSegment(url), url)
        }
        for url in ["https://x.example.com/team/repo.git/info/refs?service=git-upload-pack", "https://x.example.com/api/v1/pods",
                    "https://x.example.com/team/a-b_c.d.e@f", "https://other.example.com/a%20b/c:d", "https://x.example.com/",
                    "https://x.example.com/tea/x", "https://x.example.com/x/team.json", "https://x.example.com/x/teams",
                    "https://other.example.com/team~1/a"] {
            XCTAssertNil(resources.unplainSegment(url), url)
        }
    }
}
