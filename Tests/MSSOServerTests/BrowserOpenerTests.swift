import CMSSOSystem
import FoundationEssentials
import Glibc
import XCTest

/// Opening a login address in the browser (the login command and the notifier's Log in): the
/// opener is detached, so no thread of the daemon waits for a browser that stays open.
final class BrowserOpenerTests: XCTestCase {
    func testTheOpenerGetsTheAddressAndIsNotOurChild() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("opener-\(getpid())-\(UInt64.random(in: 0...UInt64.max))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let opener = directory + "/xdg-open", seen = directory + "/seen"
        // Says who started it and what it was asked to open, then stays, as a browser would.
        try "#!/bin/sh\nprintf '%s %s %s' $$ \"$PPID\" \"$1\" > \(seen).tmp && mv \(seen).tmp \(seen)\nexec sleep 30\n"
            .write(toFile: opener, atomically: true, encoding: .utf8)
        chmod(opener, 0o755)
        let url = "http://127.0.0.1:4600/authorize?state=x&code_challenge=y"
        XCTAssertEqual(cmsso_open_in_browser(opener, url), 0)
        // Nothing of ours to reap: the opener's parent was reaped before the call returned.
        var status: Int32 = 0
        let reaped = waitpid(-1, &status, WNOHANG), why = errno
        XCTAssertEqual(reaped, -1)
        XCTAssertEqual(why, ECHILD)
        let deadline = Date().addingTimeInterval(10)
        while !FileManager.default.fileExists(atPath: seen), Date() < deadline { usleep(10_000) }
        let words = try String(contentsOfFile: seen, encoding: .utf8).split(separator: " ", maxSplits: 2)
        defer { if let opened = Int32(words[0]) { kill(opened, SIGTERM) } }
        XCTAssertEqual(words.count, 3)
        XCTAssertNotEqual(Int32(words[1]), getpid(), "the opener is still our child")
        XCTAssertEqual(String(words[2]), url)
    }

    /// An opener the kernel cannot run is said, as posix_spawn said it, not taken as opened.
    func testAnOpenerThatCannotRunIsSaid() throws {
        let opener = FileManager.default.temporaryDirectory.appendingPathComponent("opener-\(getpid())-broken").path
        try "not a program\n".write(toFile: opener, atomically: true, encoding: .utf8)
        defer { unlink(opener) }
        chmod(opener, 0o755)
        XCTAssertEqual(cmsso_open_in_browser(opener, "http://127.0.0.1/"), -ENOEXEC)
        XCTAssertEqual(waitpid(-1, nil, WNOHANG), -1)
    }

    func testAMissingOpenerIsSaidAndNothingIsStarted() {
        XCTAssertEqual(cmsso_open_in_browser("/nonexistent/xdg-open", "http://127.0.0.1/"), -ENOENT)
        XCTAssertEqual(waitpid(-1, nil, WNOHANG), -1)
    }
}
