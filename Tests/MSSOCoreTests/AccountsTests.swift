import Foundation
import Logging
@testable import MSSOCore
import MSSOProtocol
import XCTest

/// The account a group logs in as (``AccountRules``, ``AccountFile``): a login as another one is
/// refused unless asked for, a new one is announced, the administrator's `login-user` rule.
final class AccountsTests: XCTestCase {
    let clock = TestClock()
    let store = MemoryStore()
    let idp = FakeIdP()
    let group = "com.example.suite"
    let issuer = "https://idp.example"

    func makeBroker(_ accounts: MemoryAccounts = MemoryAccounts(), rule: AccountRule? = nil) async -> Broker {
        var config = GroupConfig(name: group, issuer: issuer, clientID: "msso")
        config.account = rule
        let broker = Broker(configuration: Configuration(groups: [config]), store: store, identity: idp,
                            logger: Logger(label: "test"), clock: clock)
        await broker.keepAccounts(in: accounts)
        return broker
    }

    func login(_ broker: Broker, newAccount: Bool = false) async throws -> SessionStatus {
        try await broker.login(LoginArguments(flow: .password, username: "alice", password: "right", newAccount: newAccount ? true : nil)) { _, _ in }
    }

    func refusal(_ body: () async throws -> SessionStatus) async -> BrokerError? {
        do {
            let status = try await body()
            XCTFail("expected a refusal, got \(status)")
            return nil
        } catch {
            return error as? BrokerError
        }
    }

    /// Found by a blind attack: a password login overtook a `--new-account` device login waiting
    /// for the user (PROTOCOL: such a login waiting, any other login of the group is `Busy`).
    func testNoLoginOvertakesOneThatMaySetTheAccountWhileItWaits() async throws {
        let broker = await makeBroker()
        _ = try await login(broker)
        idp.deviceApproved = false
        let waiting = Task { try await broker.login(LoginArguments(flow: .device, newAccount: true)) { _, _ in } }
        while idp.deviceCounts.begun == 0 { await Task.yield() }
        for newAccount in [true, false] {
            let error = await refusal { try await self.login(broker, newAccount: newAccount) }
            XCTAssertEqual(error?.name, .busy, "a password login, newAccount \(newAccount), while a new-account login waits")
        }
        idp.approveDevice()
        let finished = try await waiting.value
        XCTAssertNil(finished.newAccount, "the same account again")
        _ = try await login(broker)
    }

    func testTheFirstLoginIsANewAccountAndTheGroupRemembersIt() async throws {
        let accounts = MemoryAccounts()
        let broker = await makeBroker(accounts)
        let sink = RecordingSink()
        _ = try await broker.subscribe(sink, groups: nil)
        let first = try await login(broker)
        XCTAssertEqual(first.newAccount, true)
        XCTAssertNil(first.previousAccount)
        XCTAssertEqual(sink.signals.last?.status?.newAccount, true, "the LoggedIn signal says so too (the notifier's cue)")
        XCTAssertEqual(accounts.accounts[group]?.subject, "alice-sub")
        XCTAssertEqual(accounts.accounts[group]?.username, "alice")

        let again = try await login(broker)
        XCTAssertNil(again.newAccount, "the same account again is no news")
        XCTAssertEqual(accounts.saves, 1, "nothing to write down again")
    }

    func testALoginAsAnotherAccountIsRefusedStoresNothingAndRevokesItsTokens() async throws {
        let broker = await makeBroker()
        _ = try await login(broker)
        let before = store.item(group)
        idp.logInAs("bob", subject: "bob-sub")
        let error = await refusal { try await self.login(broker) }
        XCTAssertEqual(error?.name, .loginDenied)
        XCTAssertTrue(error?.message.contains("came back as bob") == true && error?.message.contains("the account of \"\(group)\" is alice") == true
                      && error?.message.contains("--new-account") == true, error?.message ?? "")
        XCTAssertEqual(store.item(group), before, "alice's session is kept")
        XCTAssertEqual(idp.counts.revoked, ["rt-2", "at-2"], "bob's tokens are revoked")
        let kept = await broker.rememberedAccount(group)
        XCTAssertEqual(kept?.subject, "alice-sub")
        let signed = try await BrokerTests.sign(broker)
        XCTAssertEqual(signed, "Bearer at-1", "alice's session still signs")
    }

    func testALoginAsAnotherAccountIsRefusedAfterALogoutToo() async throws {
        let accounts = MemoryAccounts()
        _ = try await login(await makeBroker(accounts))
        // Another broker (a restart), logged out: the account is kept where a logout does not reach.
        let broker = await makeBroker(accounts)
        _ = try await broker.logout(nil, all: true)
        idp.logInAs("bob", subject: "bob-sub")
        let error = await refusal { try await self.login(broker) }
        XCTAssertEqual(error?.name, .loginDenied)
        XCTAssertNil(store.item(group))
    }

    func testNewAccountSwitchesAndSaysWhichItReplaced() async throws {
        let accounts = MemoryAccounts()
        let broker = await makeBroker(accounts)
        _ = try await login(broker)
        idp.logInAs("bob", subject: "bob-sub")
        let status = try await login(broker, newAccount: true)
        XCTAssertEqual(status.newAccount, true)
        XCTAssertEqual(status.previousAccount, "alice")
        XCTAssertEqual(status.username, "bob")
        XCTAssertEqual(accounts.accounts[group]?.subject, "bob-sub")
        await waitUntil { !idp.counts.revoked.isEmpty } // (the replaced session's, revoked after the reply)
        XCTAssertEqual(idp.counts.revoked, ["rt-1"], "alice's session, replaced, is revoked (and nothing else)")
        // And now alice is the other account.
        idp.logInAs("alice", subject: "alice-sub")
        let error = await refusal { try await self.login(broker) }
        XCTAssertTrue(error?.message.contains("the account of \"\(group)\" is bob") == true, error?.message ?? "")
    }

    func testASessionFromBeforeAccountsWereKeptCountsAsTheGroupsAccount() async throws {
        let broker = await makeBroker()
        try await store.save(Credential(issuer: issuer, username: "alice", accessToken: "old", refreshToken: "old-rt",
                                        accessTokenExpiresAt: clock.now() + 300, loggedInAt: clock.now(),
                                        sessionExpiresAt: clock.now() + 600, sessionMaxAt: clock.now() + 3600, subject: "alice-sub"),
                             group: group)
        idp.logInAs("bob", subject: "bob-sub")
        let error = await refusal { try await self.login(broker) }
        XCTAssertEqual(error?.name, .loginDenied)
        idp.logInAs("alice", subject: "alice-sub")
        let status = try await login(broker)
        XCTAssertNil(status.newAccount, "the account it was logged in as all along")
    }

    func testALoginWithoutAnIDTokenIsTakenOnlyWhereNoAccountIsKnownOrAskedFor() async throws {
        let accounts = MemoryAccounts()
        let broker = await makeBroker(accounts)
        _ = try await login(broker)
        idp.logInAs(nil, subject: nil)
        let error = await refusal { try await self.login(broker) }
        XCTAssertTrue(error?.message.contains("gave no ID token") == true, error?.message ?? "")
        let status = try await login(broker, newAccount: true)
        XCTAssertEqual(status.newAccount, true)
        XCTAssertNil(accounts.accounts[group], "an account that cannot be named is not remembered")
        let next = try await login(broker)
        XCTAssertEqual(next.newAccount, true, "each such login is announced: nothing says it is the same account")
    }

    func testAnUnreadableRecordIsNoAccountAndTheNextLoginIsAnnounced() async throws {
        let accounts = MemoryAccounts()
        accounts.damaged = "accounts.json is not a file of accounts msso wrote"
        let status = try await login(await makeBroker(accounts))
        XCTAssertEqual(status.newAccount, true)
        XCTAssertEqual(accounts.accounts[group]?.subject, "alice-sub", "written afresh")
    }

    func testTheAdministratorsLoginUserRule() async throws {
        let broker = await makeBroker(rule: .loginUser)
        await broker.setLoginUser("alice")
        idp.logInAs("bob", subject: "bob-sub")
        for newAccount in [false, true] {
            let error = await refusal { try await self.login(broker, newAccount: newAccount) }
            XCTAssertEqual(error?.name, .loginDenied)
            XCTAssertTrue(error?.message.contains("came back as bob (`preferred_username`)") == true
                          && error?.message.contains("your login name, alice") == true, error?.message ?? "")
        }
        XCTAssertNil(store.item(group))
        idp.logInAs("alice", subject: "alice-sub")
        idp.claims = ["email": "alice"]
        let noClaim = await refusal { try await self.login(broker) }
        XCTAssertTrue(noClaim?.message.contains("names no `preferred_username`") == true, noClaim?.message ?? "")
        idp.claims = ["preferred_username": "alice"]
        let status = try await login(broker)
        XCTAssertEqual(status.state, .valid)
        await broker.setLoginUser(nil)
        let nameless = await refusal { try await self.login(broker) }
        XCTAssertTrue(nameless?.message.contains("no name in the password database") == true, nameless?.message ?? "")
    }

    // MARK: Joining

    final class Shown: @unchecked Sendable {
        private let lock = NSLock()
        private var seen: [Bool] = []
        func add(_ joined: Bool) { lock.withLock { seen.append(joined) } }
        var all: [Bool] { lock.withLock { seen } }
    }

    func device(_ broker: Broker, _ shown: Shown, newAccount: Bool = false, by requester: String) -> Task<SessionStatus, any Error> {
        Task { try await broker.login(LoginArguments(flow: .device, newAccount: newAccount ? true : nil), requester: requester) { shown.add($1) } }
    }

    func waitUntil(_ condition: () -> Bool) async {
        while !condition() { await Task.yield() }
    }

    func testALoginThatMaySetTheAccountIsNeverJoined() async throws {
        idp.deviceApproved = false
        let broker = await makeBroker()
        let first = Shown()
        let starter = device(broker, first, by: "/usr/bin/attacker (pid 42)")
        await waitUntil { !first.all.isEmpty }
        // The group's first login: nobody else is shown its code, and whoever asks is told who started it.
        let error = await refusal { try await broker.login(LoginArguments(flow: .device)) { _, _ in XCTFail("shown another's code") } }
        XCTAssertEqual(error?.name, .busy)
        XCTAssertTrue(error?.message.contains("started by /usr/bin/attacker (pid 42)") == true, error?.message ?? "")
        idp.approveDevice()
        let status = try await starter.value
        XCTAssertEqual(status.newAccount, true)

        // Now the group has an account: a login is joined, but not by one asking for a new account.
        idp.deviceApproved = false
        let second = Shown(), third = Shown()
        let again = device(broker, second, by: "msso (pid 7)")
        await waitUntil { !second.all.isEmpty }
        let joiner = device(broker, third, by: "kubectl (pid 8)")
        await waitUntil { !third.all.isEmpty }
        XCTAssertEqual(third.all, [true])
        let switching = await refusal { try await broker.login(LoginArguments(flow: .device, newAccount: true)) { _, _ in } }
        XCTAssertEqual(switching?.name, .busy)
        idp.approveDevice()
        _ = try await again.value
        _ = try await joiner.value

        // And a login asked with newAccount is joined by nobody either.
        idp.deviceApproved = false
        let fourth = Shown()
        let change = device(broker, fourth, newAccount: true, by: "msso (pid 9)")
        await waitUntil { !fourth.all.isEmpty }
        let refused = await refusal { try await broker.login(LoginArguments(flow: .device)) { _, _ in } }
        XCTAssertTrue(refused?.message.contains("may make a new account") == true, refused?.message ?? "")
        idp.approveDevice()
        _ = try await change.value
    }

    func testAJoinedLoginFinishedAsAnotherAccountIsRefusedForEveryone() async throws {
        idp.deviceApproved = false
        let broker = await makeBroker(MemoryAccounts([group: RememberedAccount(issuer: issuer, subject: "alice-sub", username: "alice", since: 0)]))
        let first = Shown(), second = Shown()
        let user = device(broker, first, by: "msso (pid 1)")
        await waitUntil { !first.all.isEmpty }
        let attacker = device(broker, second, by: "python3 (pid 2)")
        await waitUntil { !second.all.isEmpty }
        idp.logInAs("bob", subject: "bob-sub") // the joiner finished it at the IdP first, as bob
        idp.approveDevice()
        for login in [user, attacker] {
            do {
                _ = try await login.value
                XCTFail("bob's login was taken")
            } catch {
                XCTAssertEqual((error as? BrokerError)?.name, .loginDenied)
            }
        }
        XCTAssertNil(store.item(group))
    }

    // MARK: The file

    func temporaryDirectory() throws -> URL {
        let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("msso-accounts-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(at: url) }
        return url
    }

    func testTheFileKeepsAccountsAndReadsBackWhatItWrote() async throws {
        let directory = try temporaryDirectory()
        let file = AccountFile(path: directory.path + "/state/msso/accounts.json")
        let none = await file.load()
        XCTAssertTrue(none.accounts.isEmpty)
        XCTAssertNil(none.damaged, "no file is no account, and nothing wrong")
        let alice = RememberedAccount(issuer: issuer, subject: "alice-sub", username: "alice", since: 1_800_000_000)
        try await file.save([group: alice])
        let read = await file.load()
        XCTAssertEqual(read.accounts, [group: alice])
        XCTAssertNil(read.damaged)
        var info = stat()
        XCTAssertEqual(stat(file.path, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
        XCTAssertEqual(stat(directory.path + "/state/msso", &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o700)
    }

    func testAHostileFileIsNoAccountAndSaysWhy() async throws {
        let directory = try temporaryDirectory()
        let path = directory.path + "/accounts.json"
        let file = AccountFile(path: path)
        func loaded(_ contents: String) async -> (accounts: [String: RememberedAccount], damaged: String?) {
            unlink(path)
            FileManager.default.createFile(atPath: path, contents: Data(contents.utf8))
            return await file.load()
        }
        for garbage in ["", "{", "[]", "{\"version\": 2, \"groups\": {}}", "{\"version\": 1, \"groups\": []}",
                        String(repeating: "[", count: 100_000)] {
            let read = await loaded(garbage)
            XCTAssertTrue(read.accounts.isEmpty, garbage.prefix(20).description)
            XCTAssertNotNil(read.damaged, garbage.prefix(20).description)
        }
        let big = await loaded("{\"version\": 1, \"groups\": {\"g\": {\"issuer\": \"i\", \"subject\": \"" + String(repeating: "x", count: 300_000) + "\"}}}")
        XCTAssertTrue(big.accounts.isEmpty)
        XCTAssertTrue(big.damaged?.contains("larger than") == true, big.damaged ?? "")

        // One bad entry leaves the good ones; a name that could not be shown is dropped, not the entry.
        let mixed = await loaded("""
            {"version": 1, "groups": {
              "good": {"issuer": "\(issuer)", "subject": "alice-sub", "username": "alice", "since": 1800000000},
              "escape": {"issuer": "\(issuer)", "subject": "s", "username": "\\u001b[31mred", "since": 1e300},
              "empty": {"issuer": "\(issuer)", "subject": ""},
              "control": {"issuer": "\(issuer)", "subject": "a\\u0000b"},
              "typed": {"issuer": 7, "subject": "x"}
            }}
            """)
        XCTAssertEqual(Set(mixed.accounts.keys), ["good", "escape"])
        XCTAssertNil(mixed.accounts["escape"]?.username)
        XCTAssertEqual(mixed.accounts["escape"]?.since, 0)
        XCTAssertTrue(mixed.damaged?.contains("3 entries") == true, mixed.damaged ?? "")

        // A link (to a file of accounts that would pass) and a FIFO are not read.
        let elsewhere = directory.path + "/elsewhere.json"
        try await AccountFile(path: elsewhere).save(["g": RememberedAccount(issuer: issuer, subject: "bob-sub", username: "bob", since: 0)])
        unlink(path)
        XCTAssertEqual(symlink(elsewhere, path), 0)
        let linked = await file.load()
        XCTAssertTrue(linked.accounts.isEmpty)
        XCTAssertNotNil(linked.damaged)
        unlink(path)
        XCTAssertEqual(mkfifo(path, 0o600), 0)
        let fifo = await file.load()
        XCTAssertTrue(fifo.accounts.isEmpty)
        XCTAssertTrue(fifo.damaged?.contains("not a regular file") == true, fifo.damaged ?? "")
        // And a write replaces whatever is there.
        try await file.save(["g": RememberedAccount(issuer: issuer, subject: "alice-sub", username: nil, since: 0)])
        let replaced = await file.load()
        XCTAssertEqual(replaced.accounts["g"]?.subject, "alice-sub")
    }
}
