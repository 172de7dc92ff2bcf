import Foundation
import Logging
@testable import MSSOCore
import MSSOProtocol
import XCTest

/// One device or browser login per group, joined by everyone who asks meanwhile (``SharedLogin``).
final class SharedLoginTests: XCTestCase {
    let store = MemoryStore()
    let idp = FakeIdP()
    let group = "com.example.suite"

    /// A broker whose group remembers alice, as after her first login: a login that can only end
    /// as her (or be refused) is joined. (One that may set the account is not: AccountsTests.)
    func makeBroker() async -> Broker {
        let broker = Broker(configuration: Configuration(groups: [GroupConfig(name: group, issuer: "https://idp.example", clientID: "msso")]),
                            store: store, identity: idp, logger: Logger(label: "test"))
        await broker.keepAccounts(in: MemoryAccounts([group: RememberedAccount(issuer: "https://idp.example", subject: "alice-sub",
                                                                                username: "alice", since: 1_800_000_000)]))
        return broker
    }

    /// What one login call was shown: the codes, and whether it joined a login already waiting.
    final class Shown: @unchecked Sendable {
        private let lock = NSLock()
        private var seen: [(code: String, joined: Bool)] = []
        func add(_ prompt: LoginPrompt, _ joined: Bool) {
            guard case .device(let device) = prompt else { return XCTFail("a device login shows a device prompt") }
            lock.withLock { seen.append((device.userCode, joined)) }
        }
        var all: [(code: String, joined: Bool)] { lock.withLock { seen } }
    }

    func startLogin(_ broker: Broker, _ shown: Shown) -> Task<SessionStatus, any Error> {
        Task { try await broker.login(LoginArguments(flow: .device)) { shown.add($0, $1) } }
    }

    func waitUntil(_ condition: () -> Bool) async {
        while !condition() { await Task.yield() }
    }

    func testEveryLoginAskedWhileOneWaitsJoinsItAndGetsItsResult() async throws {
        idp.deviceApproved = false
        let broker = await makeBroker()
        let callers = (0..<20).map { _ in Shown() }
        var logins: [Task<SessionStatus, any Error>] = []
        for shown in callers {
            logins.append(startLogin(broker, shown))
            await waitUntil { !shown.all.isEmpty } // each has been shown the code before the next asks
        }
        XCTAssertEqual(idp.deviceCounts.begun, 1, "one device authorization for 20 logins")
        XCTAssertEqual(callers.map { $0.all.map(\.code) }, Array(repeating: ["CODE-1"], count: 20), "every caller is shown the one code, once")
        XCTAssertEqual(callers.map { $0.all[0].joined }, [false] + Array(repeating: true, count: 19))
        idp.approveDevice()
        var results: [SessionStatus] = []
        for login in logins { results.append(try await login.value) }
        XCTAssertEqual(Set(results.map(\.state)), [.valid])
        XCTAssertEqual(Set(results.map(\.loggedInAt)).count, 1, "one session, the same for all")
        XCTAssertEqual(store.counts.saves, 1, "stored once")

        // Over: the next login is a new one.
        let later = Shown()
        idp.deviceApproved = false
        let next = startLogin(broker, later)
        await waitUntil { !later.all.isEmpty }
        XCTAssertEqual(later.all.map(\.code), ["CODE-2"])
        XCTAssertEqual(later.all[0].joined, false)
        idp.approveDevice()
        _ = try await next.value
    }

    func testACallerThatGoesLeavesTheLoginToTheOthersAndTheLastOneEndsIt() async throws {
        idp.deviceApproved = false
        let broker = await makeBroker()
        let first = Shown(), second = Shown()
        let starter = startLogin(broker, first)
        await waitUntil { !first.all.isEmpty }
        let joiner = startLogin(broker, second)
        await waitUntil { !second.all.isEmpty }

        starter.cancel() // the terminal that started it was closed
        await XCTAssertThrowsErrorAsync(try await starter.value) { XCTAssertEqual(($0 as? BrokerError)?.name, .loginDenied, "\($0)") }
        XCTAssertEqual(idp.deviceCounts.cancelled, 0, "the other caller still waits: the login goes on")
        idp.approveDevice()
        let joined = try await joiner.value
        XCTAssertEqual(joined.state, .valid)

        // Everyone goes: the IdP poll ends, and the next login starts afresh.
        idp.deviceApproved = false
        let third = Shown(), fourth = Shown()
        let a = startLogin(broker, third)
        await waitUntil { !third.all.isEmpty }
        let b = startLogin(broker, fourth)
        await waitUntil { !fourth.all.isEmpty }
        a.cancel()
        b.cancel()
        _ = try? await a.value
        _ = try? await b.value
        await waitUntil { idp.deviceCounts.cancelled == 1 }
        let fifth = Shown()
        let c = startLogin(broker, fifth)
        await waitUntil { !fifth.all.isEmpty }
        XCTAssertEqual(fifth.all.map(\.joined), [false], "a new login, not the abandoned one")
        idp.approveDevice()
        let fresh = try await c.value
        XCTAssertEqual(fresh.state, .valid)
    }

    func testAPasswordLoginNeverJoins() async throws {
        idp.deviceApproved = false
        let broker = await makeBroker()
        let shown = Shown()
        let device = startLogin(broker, shown)
        await waitUntil { !shown.all.isEmpty }
        let status = try await broker.login(LoginArguments(flow: .password, username: "alice", password: "right")) { _, _ in
            XCTFail("a password login shows nothing")
        }
        XCTAssertEqual(status.state, .valid)
        device.cancel()
        _ = try? await device.value
    }
}

func XCTAssertThrowsErrorAsync<T>(_ expression: @autoclosure () async throws -> T, _ check: (any Error) -> Void,
                                  file: StaticString = #filePath, line: UInt = #line) async {
    do {
        _ = try await expression()
        XCTFail("no error thrown", file: file, line: line)
    } catch {
        check(error)
    }
}
