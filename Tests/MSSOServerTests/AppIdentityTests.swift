import CMSSOSystem
import Foundation
import Logging
import MSSOCore
import MSSOProtocol
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
        XCTAssertEqual(Callers.flatpakID(info: info), "com.example.Notes")
        XCTAssertNil(Callers.flatpakID(info: "[Instance]\nname=x\n"))
        XCTAssertNil(Callers.flatpakID(info: "[Application]\nname=\n"), "an empty name is no name")
    }

    func testOurOwnProcessIsIdentifiedFromTheKernelAsAHostProcess() throws {
        let own = ProcessFacts.of(pid: 0)
        let found = try XCTUnwrap(Callers.identify(pid: getpid(), pidfd: -1, own: own, entitlements: Entitlements(registrations: [])))
        let (facts, identity) = (found.facts, found.identity)
        XCTAssertEqual(identity.executable, try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
        XCTAssertTrue(identity.onHost, "same mount namespace and root as the daemon")
        XCTAssertNil(identity.flatpak, "a host process has no sandbox identity, whatever files it can write")
        XCTAssertNil(identity.digest, "hashed only when a registration pins the executable")
        XCTAssertEqual(facts, ProcessFacts.of(pid: getpid()))
    }

    func testAPinnedExecutableIsHashedAndTheDigestKeyedByItsChangeTime() throws {
        let me = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let pinned = Entitlements(registrations: [AppRegistration(name: "me", executable: me, sha256: String(repeating: "0", count: 64),
                                                                  flatpak: nil, groups: ["g"], source: "-", admin: true)])
        let identity = try XCTUnwrap(Callers.identify(pid: getpid(), pidfd: -1, own: ProcessFacts.of(pid: 0), entitlements: pinned)).identity
        XCTAssertEqual(identity.digest?.count, 64)
        XCTAssertTrue(pinned.matches(identity).isEmpty, "a digest that differs from the pin matches nothing")
        XCTAssertEqual(pinned.pinMismatch(identity)?.actual, identity.digest)
    }

    func testARegisteredPathCountsOnlyForTheFileAtThatPath() throws {
        let me = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let running = try XCTUnwrap(ProcessFacts.of(pid: getpid()).executable)
        XCTAssertTrue(Callers.isFile(me, running), "our own executable is the file at its path")
        XCTAssertFalse(Callers.isFile("/bin/sh", running), "another file")
        XCTAssertFalse(Callers.isFile(me + " (deleted)", running), "no file there")
        let registered = Entitlements(registrations: [AppRegistration(name: "me", executable: me, sha256: nil, flatpak: nil,
                                                                      groups: ["g"], source: "-", admin: true)])
        let found = try XCTUnwrap(Callers.identify(pid: getpid(), pidfd: -1, own: ProcessFacts.of(pid: 0), entitlements: registered))
        XCTAssertTrue(found.pathChecked, "a registered path is checked")
        XCTAssertTrue(found.identity.onHost)
        XCTAssertEqual(registered.matches(found.identity).map(\.name), ["me"])
        let unregistered = try XCTUnwrap(Callers.identify(pid: getpid(), pidfd: -1, own: ProcessFacts.of(pid: 0),
                                                          entitlements: Entitlements(registrations: [])))
        XCTAssertFalse(unregistered.pathChecked, "a path nothing names is not looked up")
    }

    func testASenderWithoutItsConnectionsPidfdIsNobodyWhenTheKernelGivesPidfds() throws {
        let rules = Rules(configuration: Configuration(groups: []), entitlements: Entitlements(registrations: []),
                          logger: Logger(label: "test"))
        let me = Sender(uid: getuid(), gid: getgid(), pid: getpid())
        guard case .gone = Callers(reactor: try Reactor(), rules: rules, pidfds: true).identity(of: me, then: { _ in }) else {
            return XCTFail("the pid alone was trusted though the kernel should have pinned it with a pidfd")
        }
        guard case .known(let identity, _) = Callers(reactor: try Reactor(), rules: rules, pidfds: false).identity(of: me, then: { _ in }) else {
            return XCTFail("a kernel without pidfds: the pid is all there is")
        }
        XCTAssertEqual(identity.executable, try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
    }

    func testAnExitedProcessHasNoIdentity() throws {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/bin/true")
        try child.run()
        let pid = child.processIdentifier
        let pidfd = cmsso_pidfd_open(pid) // taken while the child runs (or is a zombie)
        child.waitUntilExit()
        guard pidfd >= 0 else { throw XCTSkip("pidfd_open is not available") }
        defer { close(pidfd) }
        XCTAssertNil(Callers.identify(pid: pid, pidfd: pidfd, own: ProcessFacts.of(pid: 0), entitlements: Entitlements(registrations: [])),
                     "the pidfd says the process is gone")
    }

    func testTheSmallFileReaderStopsAtItsCap() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("big-\(getpid())").path
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: nil))
        defer { unlink(path) }
        XCTAssertEqual(truncate(path, 300 << 20), 0, "a sparse 300 MB file")
        XCTAssertNil(Callers.readSmall(path, capacity: 64 * 1024), "refused, not read whole")
        XCTAssertNil(Callers.readSmall("/dev/zero", capacity: 64), "not a regular file")
    }
}
