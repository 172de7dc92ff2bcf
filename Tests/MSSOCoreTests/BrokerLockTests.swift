import Logging
@testable import MSSOCore
import MSSOProtocol
import XCTest

final class BrokerLockTests: XCTestCase {
    let clock = TestClock()
    let store = MemoryStore()
    let idp = FakeIdP()
    let group = "com.example.suite"

    func makeBroker() -> (Broker, GroupConfig) {
        let config = GroupConfig(name: group, issuer: "https://idp.example", clientID: "msso")
        let broker = Broker(configuration: Configuration(groups: [config]), store: store, identity: idp,
                            logger: Logger(label: "test"), clock: clock, passphraseRounds: 1000)
        return (broker, config)
    }

    func assertLocked<T>(_ body: () async throws -> T, file: StaticString = #filePath, line: UInt = #line) async {
        do {
            _ = try await body()
            XCTFail("expected Locked", file: file, line: line)
        } catch {
            XCTAssertEqual((error as? BrokerError)?.name, .locked, "\(error)", file: file, line: line)
        }
    }

    func testLockWithdrawsThePublishedSnapshotAndRefusesEveryTokenVerb() async throws {
        let (broker, config) = makeBroker()
        _ = try await broker.login(LoginArguments(flow: .password, username: "alice", password: "right")) { _, _ in }
        let request = SignRequest(group: group, method: "GET", url: "https://api.example/x")
        _ = try await broker.sign(request)
        XCTAssertNotNil(try broker.signWithoutWaiting(request, group: config))

        let state = try await broker.lock(passphrase: "pass phrase")
        XCTAssertTrue(state.locked)
        XCTAssertEqual(state.lockedAt, clock.now())
        XCTAssertNil(try broker.signWithoutWaiting(request, group: config), "the hot path must not sign while locked")
        await assertLocked { try await broker.sign(request) }
        await assertLocked { try await broker.token(nil, renew: false) }
        await assertLocked { try await broker.extend(nil) }
        await assertLocked { try await broker.login(LoginArguments(flow: .password, username: "alice", password: "right")) { _, _ in } }
        await assertLocked { try await broker.lock(passphrase: "another") }
        let status = try await broker.status(nil)
        XCTAssertEqual(status.first?.locked, true)
        XCTAssertEqual(status.first?.state, .valid)

        let unlocked = try await broker.unlock(passphrase: "pass phrase")
        XCTAssertFalse(unlocked.locked)
        XCTAssertNil(unlocked.lockedAt)
        XCTAssertNotNil(try broker.signWithoutWaiting(request, group: config), "unlock publishes again")
        let statusAfter = try await broker.status(nil)
        XCTAssertNil(statusAfter.first?.locked)
    }

    /// Found by a blind attack: a login that was waiting for the user (or the IdP) when the lock
    /// came was stored anyway, even as a new account.
    func testALoginUnderWayWhenTheLockComesStoresNothingAndLeavesNoLiveToken() async throws {
        let (broker, _) = makeBroker()
        for flow in [LoginFlow.password, .device] {
            if flow == .password { idp.loginGate = AsyncGate() } else { idp.deviceApproved = false }
            let login = Task {
                try await broker.login(LoginArguments(flow: flow, username: "alice", password: "right", newAccount: true)) { _, _ in }
            }
            if flow == .password { await idp.loginGate!.waitUntilEntered() } else { while idp.deviceCounts.begun == 0 { await Task.yield() } }
            _ = try await broker.lock(passphrase: "pass phrase")
            if flow == .password { idp.loginGate!.open() } else { idp.approveDevice() }
            await assertLocked { try await login.value }
            let status = try await broker.status(nil)
            XCTAssertEqual(status.first?.state, .notLoggedIn, "\(flow): nothing stored while locked")
            XCTAssertEqual(idp.counts.revoked.count, flow == .password ? 1 : 2, "\(flow): the login's refresh token is revoked")
            _ = try await broker.unlock(passphrase: "pass phrase")
            idp.loginGate = nil
        }
    }

    func testWrongPassphraseIsRefusedLateAndPausesUnlocking() async throws {
        let (broker, _) = makeBroker()
        _ = try await broker.lock(passphrase: "right one")
        var wrong: Task<LockState, Error>!
        await clock.waitForOneMoreSleeper { wrong = Task { try await broker.unlock(passphrase: "wrong one") } } // its refusal waits 1 s
        clock.advance(0.5) // still inside the 1 s pause: refused unchecked
        do {
            _ = try await broker.unlock(passphrase: "right one")
            XCTFail("expected a pause")
        } catch let error as BrokerError {
            XCTAssertTrue(error.message.contains("unlocking is paused"), error.message)
        }
        clock.advance(0.5)
        await assertLocked { try await wrong.value }
        let state = try await broker.unlock(passphrase: "right one")
        XCTAssertFalse(state.locked)
    }

    func testTheWholeLadderOfDelaysIsWaitedOnTheBrokersClock() async throws {
        let (broker, _) = makeBroker()
        _ = try await broker.lock(passphrase: "right one")
        for delay in [1.0, 2, 4, 8, 16, 32, 60, 60] {
            var wrong: Task<LockState, Error>!
            let before = clock.sleeping
            await clock.waitForOneMoreSleeper { wrong = Task { try await broker.unlock(passphrase: "wrong one") } }
            clock.advance(delay - 0.001)
            XCTAssertEqual(clock.sleeping, before + 1, "the refusal of a wrong passphrase waits \(delay) s")
            clock.advance(0.01) // past it (0.999 + 0.001 need not add up to 1 in floating point)
            await assertLocked { try await wrong.value }
        }
        let state = try await broker.unlock(passphrase: "right one")
        XCTAssertFalse(state.locked)
    }

    func testDelaysDoubleFromOneSecondToAMinute() {
        XCTAssertEqual((1...9).map { BrokerLock.delay(afterFailures: $0) }, [1, 2, 4, 8, 16, 32, 60, 60, 60])
    }

    func testUnlockWhenNotLockedIsAnAnswerNotAnError() async throws {
        let (broker, _) = makeBroker()
        let state = try await broker.unlock(passphrase: "anything")
        XCTAssertFalse(state.locked)
    }

    func testThePassphraseHashNeverShowsThePassphrase() throws {
        let hash = try PassphraseHash("hunter2 hunter2")
        XCTAssertTrue(hash.matches("hunter2 hunter2"))
        XCTAssertFalse(hash.matches("hunter2 hunter3"))
        XCTAssertFalse("\(hash)".contains("hunter"))
        XCTAssertFalse(String(reflecting: hash).contains("hunter"))
        XCTAssertFalse("\(PassphraseArguments(passphrase: "hunter2"))".contains("hunter"))
        XCTAssertNotEqual(try PassphraseHash("same").salt, try PassphraseHash("same").salt)
    }
}
