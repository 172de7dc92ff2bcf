import CMSSOSystem
import Foundation
@testable import MSSOServer
import XCTest

final class AppIdentityTests: XCTestCase {
    func testFlatpakInfoGivesTheApplicationName() {
        let info = """
            [Instance]
            name=not-this
            [Application]
            name=com.example.Notes
            runtime=runtime/org.gnome.Platform/x86_64/45
            """
        XCTAssertEqual(ProcessHandle.flatpakID(info: info), "com.example.Notes")
        XCTAssertNil(ProcessHandle.flatpakID(info: "[Instance]\nname=x\n"))
    }

    func testFlatpakScopesNameTheApp() {
        XCTAssertEqual(ProcessHandle.flatpakID(unit: "app-flatpak-com.example.Notes-12345.scope"), "com.example.Notes")
        XCTAssertNil(ProcessHandle.flatpakID(unit: "app-gnome-firefox-1234.scope"))
        XCTAssertNil(ProcessHandle.flatpakID(unit: "msso.service"))
    }

    func testOurOwnProcessIsIdentifiedFromTheKernel() {
        let me = ProcessHandle(pid: getpid(), pidfd: nil)
        let identity = me.identity()
        XCTAssertEqual(identity.executable, try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
        XCTAssertEqual(identity.digest()?.count, 64)
        XCTAssertNil(identity.flatpak)
    }

    func testAnExitedProcessHasNoIdentity() throws {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/bin/true")
        try child.run()
        let pid = child.processIdentifier
        let pidfd = cmsso_pidfd_open(pid) // taken while the child runs (or is a zombie)
        child.waitUntilExit()
        guard pidfd >= 0 else { throw XCTSkip("pidfd_open is not available") }
        XCTAssertNil(ProcessHandle(pid: pid, pidfd: pidfd).identity().executable, "the pidfd says the process is gone")
    }
}
