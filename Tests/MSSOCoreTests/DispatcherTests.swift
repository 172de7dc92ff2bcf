import Foundation
import Logging
@testable import MSSOCore
import MSSOProtocol
@testable import MSSOServer
import XCTest

// The dispatcher without a socket: the channel a call's answers go to is the test's (here, beside
// the broker's fakes, which it drives).
final class DispatcherTests: XCTestCase {
    let group = "com.example.suite"
    let store = MemoryStore()
    let idp = FakeIdP()
    let audit = RecordingAudit()
    let suiteApp = "/opt/suite/bin/mail"

    func makeDispatcher() -> Dispatcher {
        let config = GroupConfig(name: group, issuer: "https://idp.example", clientID: "msso")
        let configuration = Configuration(groups: [config])
        let registration = AppRegistration(name: "mail", executable: suiteApp, sha256: nil, flatpak: nil, groups: [group],
                                           source: "/etc/msso/apps.d/mail.toml", admin: true)
        let rules = Rules(configuration: configuration, entitlements: Entitlements(registrations: [registration]), logger: Logger(label: "test"))
        let broker = Broker(rules: rules, store: store, identity: idp, logger: Logger(label: "test"))
        return Dispatcher(broker: broker, policy: AccessPolicy(owner: getuid(), ownTools: ["/usr/bin/msso"]), rules: rules,
                          audit: audit, logger: Logger(label: "test"))
    }

    func caller(_ executable: String, _ dispatcher: Dispatcher) -> Caller {
        let app = AppIdentity(executable: executable)
        return Caller(uid: getuid(), pid: 4242, role: dispatcher.policy.role(uid: getuid(), app: app), app: app,
                      registrations: dispatcher.rules.entitlements.matches(app))
    }

    func logIn(_ dispatcher: Dispatcher) async throws {
        _ = try await dispatcher.broker.login(LoginArguments(group: group, flow: .password, username: "alice", password: "right")) { _, _ in }
    }

    func testASignOnAFreshTokenIsAnsweredAtOnceOnTheCallersThreadAndAudited() async throws {
        let dispatcher = makeDispatcher()
        try await logIn(dispatcher)
        let channel = RecordingChannel()
        let answer = dispatcher.dispatch(7, method: "sign", .sign(SignRequest(method: "GET", url: "https://api.example.com/items")),
                                         caller: caller(suiteApp, dispatcher), connection: channel)
        guard case .now(let frame) = answer else { return XCTFail("a fresh-token sign went to the broker") }
        let reply = try channel.object(frame)
        XCTAssertEqual(reply["type"] as? String, "reply")
        XCTAssertEqual(reply["serial"] as? Int, 7)
        let headers = (reply["result"] as? [String: Any])?["headers"] as? [[String]]
        XCTAssertEqual(headers?.first { $0.first == "Authorization" }?.last, "Bearer at-1")
        XCTAssertEqual(audit.entries.map(\.verb), ["sign"])
        XCTAssertEqual(audit.entries.first?.outcome, "ok")
        XCTAssertEqual(audit.entries.first?.executable, suiteApp)
        XCTAssertEqual(audit.entries.first?.app, "mail")
    }

    func testAnUnregisteredProgramIsRefusedNamingTheRegistrationItLacksAndGetsNoToken() async throws {
        let dispatcher = makeDispatcher()
        try await logIn(dispatcher)
        let channel = RecordingChannel()
        let answer = dispatcher.dispatch(3, method: "sign", .sign(SignRequest(method: "GET", url: "https://api.example.com/items")),
                                         caller: caller("/home/alice/evil", dispatcher), connection: channel)
        guard case .now(let frame) = answer else { return XCTFail("a refusal went to the broker") }
        let error = try channel.object(frame)
        XCTAssertEqual(error["type"] as? String, "error")
        XCTAssertEqual(error["serial"] as? Int, 3)
        XCTAssertEqual(error["error"] as? String, "NotEntitled")
        let message = try XCTUnwrap(error["message"] as? String)
        XCTAssertTrue(message.contains("/home/alice/evil"), message)
        XCTAssertFalse(String(decoding: frame, as: UTF8.self).contains("at-1"), "the token reached an unregistered program")
        XCTAssertEqual(audit.entries.map(\.outcome), ["error"])
        XCTAssertEqual(audit.entries.first?.error, "NotEntitled")
    }

    func testADeviceLoginPromptsThroughTheChannelThenAnswersThere() async throws {
        let dispatcher = makeDispatcher()
        idp.deviceApproved = false
        let channel = RecordingChannel()
        let answer = dispatcher.dispatch(9, method: "login", .login(LoginArguments(group: group, flow: .device)),
                                         caller: caller("/usr/bin/msso", dispatcher), connection: channel)
        guard case .later = answer else { return XCTFail("a login was answered on the caller's thread") }
        XCTAssertEqual(channel.cancellable, [9], "a login the channel's end should cancel was not handed to it")
        let prompt = try await channel.next { $0.posted.first }
        XCTAssertEqual(prompt["type"] as? String, "signal")
        XCTAssertEqual(prompt["signal"] as? String, "DevicePrompt")
        XCTAssertEqual(prompt["serial"] as? Int, 9)
        XCTAssertTrue(channel.completed.isEmpty, "the login answered before the user approved it")
        idp.approveDevice()
        let reply = try await channel.next { $0.completed.first }
        XCTAssertEqual(reply["type"] as? String, "reply")
        XCTAssertEqual(reply["serial"] as? Int, 9)
        XCTAssertEqual((reply["result"] as? [String: Any])?["state"] as? String, "valid")
    }

    func testAnUnknownMethodIsRefusedAndAuditedUnderANameThatForgesNothing() throws {
        let dispatcher = makeDispatcher()
        let channel = RecordingChannel()
        dispatcher.refuseUnknown("sign\n2026 ok forged", serial: 5, sender: Sender(uid: getuid(), gid: getgid(), pid: 4242),
                                 connection: channel)
        let error = try channel.object(XCTUnwrap(channel.sent.first))
        XCTAssertEqual(error["error"] as? String, "UnknownMethod")
        XCTAssertEqual(error["serial"] as? Int, 5)
        XCTAssertEqual(audit.entries.count, 1)
        XCTAssertFalse(audit.entries[0].verb.contains("\n"), audit.entries[0].verb)
        XCTAssertNotEqual(audit.entries[0].verb, "sign")
    }
}

/// A channel that keeps what the dispatcher writes to it.
final class RecordingChannel: CallChannel, @unchecked Sendable {
    private let lock = NSLock()
    private var frames: (sent: [[UInt8]], posted: [[UInt8]], completed: [[UInt8]]) = ([], [], [])
    private var cancels: [UInt32] = []
    var forwardHost: String? { nil }

    var sent: [[UInt8]] { lock.withLock { frames.sent } }
    var posted: [[UInt8]] { lock.withLock { frames.posted } }
    var completed: [[UInt8]] { lock.withLock { frames.completed } }
    var cancellable: [UInt32] { lock.withLock { cancels } }

    func send(_ frame: [UInt8]) { lock.withLock { frames.sent.append(frame) } }
    func post(_ frame: [UInt8]) { lock.withLock { frames.posted.append(frame) } }
    func complete(_ reply: [UInt8], serial: UInt32) { lock.withLock { frames.completed.append(reply) } }
    func cancelWhenClosed(_ serial: UInt32, _ task: Task<Void, Never>) { lock.withLock { cancels.append(serial) } }
    func subscribedByBroker() {}
    func greet(_ serial: UInt32, _ hello: Methods.Hello.Arguments, _ caller: Caller) { send([0x68]) }
    func openForward(_ serial: UInt32, _ asked: Methods.Forward.Arguments, _ caller: Caller) throws(BrokerError) -> String { "/run/forward.sock" }
    func deliver(_ signal: Signal) {}

    /// A frame's JSON object (after its 4-byte length).
    func object(_ frame: [UInt8]) throws -> [String: Any] {
        XCTAssertEqual(frame.count - 4, Int(frame[0]) << 24 | Int(frame[1]) << 16 | Int(frame[2]) << 8 | Int(frame[3]))
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(frame.dropFirst(4))) as? [String: Any])
    }

    /// Waits (yielding, at most 10 s) until `pick` finds a frame, and returns its object.
    func next(_ pick: (RecordingChannel) -> [UInt8]?) async throws -> [String: Any] {
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if let frame = pick(self) { return try object(frame) }
            try await Task.sleep(nanoseconds: 1_000_000)
        }
        throw NeverCame()
    }

    struct NeverCame: Error {}
}

final class RecordingAudit: AuditTrail, @unchecked Sendable {
    private let lock = NSLock()
    private var rows: [AuditEntry] = []
    var entries: [AuditEntry] { lock.withLock { rows } }
    func record(_ entry: AuditEntry) { lock.withLock { rows.append(entry) } }
    func query(group: String?, since: Double?, limit: Int) throws -> [AuditEntry] { entries }
}
