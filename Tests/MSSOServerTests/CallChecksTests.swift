import MSSOCore
import MSSOProtocol
@testable import MSSOServer
import XCTest

/// A connection's per-call checks without a socket, rule by rule (``CallChecks``): the process
/// probes are the test's.
final class CallChecksTests: XCTestCase {
    let pid: Int32 = 4242

    /// The connection's process as the kernel would describe it.
    struct Process: CallChecks.Probes {
        var image: Bool? = true
        var gone = false
        func sameImage() -> Bool? { image }
        func ended() -> Bool { gone }
    }

    func decoded(_ json: String) -> InboundFrames.Decoded {
        let bytes = Array(json.utf8)
        do {
            return .call(try bytes.withUnsafeBytes { try IncomingCall.read($0) })
        } catch {
            return .malformed(0, error as? BrokerError ?? BrokerError(.badRequest, "\(error)"))
        }
    }

    func call(_ method: String, serial: Int = 1, args: String = "{}") -> InboundFrames.Decoded {
        decoded("{\"type\":\"call\",\"serial\":\(serial),\"method\":\"\(method)\",\"args\":\(args)}")
    }

    func greeted() -> CallChecks {
        var checks = CallChecks(connectedPid: pid)
        XCTAssertEqual(checks.greet(.init(), nothingBehind: true), .greeted)
        return checks
    }

    /// The verdict in words: "call METHOD", "echo", "unknown METHOD", or "refused SERIAL ErrorName".
    func verdict(_ checks: CallChecks, _ decoded: InboundFrames.Decoded, from sender: Int32? = nil, _ process: Process = Process()) -> String {
        switch checks.check(decoded, senderPid: sender ?? pid, probes: process) {
        case .call(_, let method, _, _): "call \(method)"
        case .echo: "echo"
        case .unknown(_, let method): "unknown \(method)"
        case .refuse(let serial, let error): "refused \(serial) \(error.name.rawValue)"
        }
    }

    func testACallIsACallWithASerialFromOne() {
        let checks = greeted()
        XCTAssertEqual(verdict(checks, call("status")), "call status")
        XCTAssertEqual(verdict(checks, decoded("{\"type\":\"reply\",\"serial\":3,\"result\":{}}")), "refused 3 BadRequest")
        XCTAssertEqual(verdict(checks, decoded("{\"type\":\"call\",\"method\":\"status\",\"args\":{}}")), "refused 0 BadRequest")
        XCTAssertEqual(verdict(checks, call("status", serial: 0)), "refused 0 BadRequest", "0 means no call")
        XCTAssertEqual(verdict(checks, .malformed(7, BrokerError(.badRequest, "not JSON"))), "refused 7 BadRequest")
        XCTAssertEqual(verdict(checks, call("status", args: "{\"group\":5}")), "refused 1 BadRequest", "arguments that do not read")
    }

    func testOnlyTheProcessThatConnectedMayCall() {
        let checks = greeted()
        XCTAssertEqual(verdict(checks, call("sign"), from: pid + 1), "refused 1 Forbidden")
        guard case .refuse(_, let error) = checks.check(call("sign"), senderPid: 99, probes: Process()) else { return XCTFail() }
        XCTAssertTrue(error.message.contains("opened by pid 4242; the call came from pid 99"), error.message)
        XCTAssertEqual(verdict(CallChecks(connectedPid: 0), call("hello"), from: 0), "refused 1 Forbidden", "no pid known: nobody's")
    }

    func testAProcessThatExecdSinceTheAcceptIsRefusedAndOneGoneIsSaidToBe() {
        let checks = greeted()
        XCTAssertEqual(verdict(checks, call("sign"), Process(image: false)), "refused 1 Forbidden")
        guard case .refuse(_, let execd) = checks.check(call("sign"), senderPid: pid, probes: Process(image: false)),
              case .refuse(_, let gone) = checks.check(call("sign"), senderPid: pid, probes: Process(image: false, gone: true)) else { return XCTFail() }
        XCTAssertEqual(execd, CallChecks.execdSince)
        XCTAssertEqual(gone, CallChecks.senderGone)
        XCTAssertEqual(verdict(checks, call("status"), Process(image: nil)), "call status", "an address space mssod may not open: the executable decides")
    }

    func testHelloComesFirstOnceAndAlone() {
        var checks = CallChecks(connectedPid: pid)
        XCTAssertEqual(verdict(checks, call("status")), "refused 1 BadRequest", "before hello")
        XCTAssertEqual(verdict(checks, call("ping", args: "{\"data\":\"x\"}")), "refused 1 BadRequest", "not even a ping")
        XCTAssertEqual(verdict(checks, call("hello", args: "{\"version\":\(protocolVersion)}")), "call hello")
        guard case .refusedClosing(let error) = checks.greet(.init(), nothingBehind: false) else { return XCTFail("hello with company") }
        XCTAssertTrue(error.message.contains("something was sent after hello before its answer came"))
        XCTAssertFalse(checks.greeted)
        XCTAssertEqual(checks.greet(.init(version: protocolVersion + 1), nothingBehind: true),
                       .refused(BrokerError(.unsupportedVersion, "this mssod speaks protocol version \(protocolVersion), not \(protocolVersion + 1); update the client or the daemon")))
        XCTAssertFalse(checks.greeted)
        XCTAssertEqual(checks.greet(.init(), nothingBehind: true), .greeted)
        XCTAssertEqual(checks.greet(.init(), nothingBehind: true), .refused(BrokerError(.badRequest, "hello may be sent only once, first")))
    }

    func testPingIsEchoedAndAnUnknownMethodIsTheDispatchersToRefuse() {
        let checks = greeted()
        XCTAssertEqual(verdict(checks, call("ping", args: "{\"data\":\"x\"}")), "echo")
        XCTAssertEqual(verdict(checks, call("fly")), "unknown fly")
    }

    func testAnotherProgramSinceTheLastCallIsRefused() {
        let file = ProcessFacts.FileIdentity(device: 1, inode: 10, size: 100, modified: 0, changed: 0)
        var checks = CallChecks(connectedPid: pid, running: file)
        XCTAssertNil(checks.sameProgram(running: file))
        var other = file
        other.inode = 11
        XCTAssertEqual(checks.sameProgram(running: other), CallChecks.execdSince)
        XCTAssertEqual(checks.sameProgram(running: nil), CallChecks.unreadable, "no executable now: a process whose main thread ended")
        var rewritten = file
        rewritten.changed = 5
        XCTAssertNil(checks.sameProgram(running: rewritten), "the same file changed in place: the identity's business, not an exec")
        var unknown = CallChecks(connectedPid: pid)
        XCTAssertNil(unknown.sameProgram(running: other), "the first look remembers")
        XCTAssertEqual(unknown.sameProgram(running: file), CallChecks.execdSince)
    }
}
