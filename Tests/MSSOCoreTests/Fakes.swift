import Foundation
import Logging
@testable import MSSOCore
import MSSOProtocol
import MSSOSigning

// Fakes to inject faults the real keyring and IdP cannot produce on demand. The real parts are
// exercised end to end by Tests/e2e.

/// A clock the test moves: `advance` lets time pass (both clocks), `jump` sets the wall clock alone;
/// a sleeper wakes once either clock has reached its time.
final class TestClock: BrokerClock, @unchecked Sendable {
    private let lock = NSLock()
    private var time: Double = 1_800_000_000
    private var sinceBoot: Double = 1_000
    private var sleepers: [(until: Moment, wake: CheckedContinuation<Void, Never>)] = []

    func now() -> Double { lock.withLock { time } }
    func elapsed() -> Double { lock.withLock { sinceBoot } }

    /// How many are sleeping now.
    var sleeping: Int { lock.withLock { sleepers.count } }

    /// Time passes: both clocks move.
    func advance(_ seconds: Double) { move(wall: seconds, elapsed: seconds) }

    /// The wall clock is set `seconds` forward (or back): no time passes.
    func jump(_ seconds: Double) { move(wall: seconds, elapsed: 0) }

    private func move(wall: Double, elapsed: Double) {
        let due = lock.withLock {
            time += wall
            sinceBoot += elapsed
            let now = Moment(wall: time, elapsed: sinceBoot)
            let due = sleepers.filter { $0.until.reached(by: now) }
            sleepers.removeAll { $0.until.reached(by: now) }
            return due
        }
        due.forEach { $0.wake.resume() }
    }

    func sleep(_ seconds: Double) async {
        await sleep(until: Moment(wall: .infinity, elapsed: elapsed() + seconds))
    }

    func sleep(until deadline: Moment) async {
        await withCheckedContinuation { continuation in
            let wakeNow = lock.withLock {
                guard !deadline.reached(by: Moment(wall: time, elapsed: sinceBoot)) else { return true }
                sleepers.append((deadline, continuation))
                return false
            }
            if wakeNow { continuation.resume() }
        }
    }

    /// Runs `body`, then waits (in real time, briefly) until one more task sleeps on this clock
    /// than before it started.
    func waitForOneMoreSleeper(after body: () -> Void) async {
        let before = sleeping
        body()
        while sleeping <= before { await Task.yield() }
    }
}

final class MemoryStore: CredentialStore, @unchecked Sendable {
    private let lock = NSLock()
    private var items: [String: Credential] = [:]
    private(set) var saves = 0
    private(set) var loads = 0
    var locked = false
    /// Groups whose item reads back as not a credential.
    var corrupt: Set<String> = []
    var saveDelay: UInt64 = 0
    /// As the kernel keyring's quota: bytes left; a save needs twice the payload and 1 KiB.
    var room: Int?

    func cannotSave(_ credential: Credential, group: String) async -> BrokerError? {
        guard let room, let payload = try? JSONEncoder().encode(credential) else { return nil }
        return room < 2 * payload.count + 1024 ? BrokerError(.keyringUnavailable, "quota full") : nil
    }

    func item(_ group: String) -> Credential? { lock.withLock { items[group] } }

    func storedAccounts(group: String) async throws -> [String] {
        let prefix = group + "\u{1F}"
        return lock.withLock { items.keys.filter { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) } }
    }
    var counts: (loads: Int, saves: Int) { lock.withLock { (loads, saves) } }

    func load(group: String) async throws -> Credential? {
        try lock.withLock {
            loads += 1
            if locked { throw BrokerError(.keyringLocked, "locked") }
            if corrupt.contains(group) { throw BrokerError(.corrupt, "not a credential") }
            return items[group]
        }
    }

    func save(_ credential: Credential, group: String) async throws {
        if saveDelay > 0 { try? await Task.sleep(nanoseconds: saveDelay) }
        try lock.withLock {
            if locked { throw BrokerError(.keyringLocked, "locked") }
            if undeletable.contains(group) { throw BrokerError(.keyringUnavailable, "refused") }
            saves += 1
            corrupt.remove(group)
            items[group] = credential
        }
    }

    /// Items whose delete (and write) is refused (as the kernel refuses a key whose permissions were taken away).
    var undeletable: Set<String> = []

    func delete(group: String) async throws -> Bool {
        try lock.withLock {
            if locked { throw BrokerError(.keyringLocked, "locked") }
            if undeletable.contains(group) { throw BrokerError(.keyringUnavailable, "refused") }
            return items.removeValue(forKey: group) != nil || corrupt.remove(group) != nil
        }
    }
}

final class FakeIdP: IdentityProvider, @unchecked Sendable {
    private let lock = NSLock()
    private var issued = 0
    private(set) var refreshes = 0
    private(set) var revoked: [String] = []
    var refreshDelay: UInt64 = 0
    /// `IdPUnavailable` is thrown as the real provider does for a refresh: as ``IdPBusy``.
    var refreshError: BrokerError?
    var retryAfter: Double?
    var lifetime: Double = 300
    /// Whom a login's ID token names (nil subject: no ID token).
    var subject: String? = "alice-sub"
    var username: String? = "alice"
    var claims: [String: String] = ["preferred_username": "alice"]

    var counts: (refreshes: Int, revoked: [String]) { lock.withLock { (refreshes, revoked) } }

    private func next() -> TokenSet {
        lock.withLock {
            issued += 1
            var tokens = TokenSet(accessToken: "at-\(issued)", refreshToken: "rt-\(issued)", expiresIn: lifetime,
                                  username: username, subject: subject)
            tokens.claims = subject == nil ? [:] : claims
            return tokens
        }
    }

    /// The next logins come back as this account.
    func logInAs(_ name: String?, subject: String?) {
        lock.withLock {
            (username, self.subject) = (name, subject)
            claims = name.map { ["preferred_username": $0] } ?? [:]
        }
    }

    /// When set, a password login waits here until the test opens it.
    var loginGate: AsyncGate?

    func passwordLogin(_ group: GroupConfig, username: String, password: String, dpop: SigningKey?) async throws -> TokenSet {
        guard password == "right" else { throw BrokerError(.invalidCredentials, "refused") }
        if let loginGate { await loginGate.enter() }
        return next()
    }

    /// Device logins begun, and those that ended cancelled.
    private(set) var deviceLogins = 0
    private(set) var deviceLoginsCancelled = 0
    /// When set, a device login waits (cancellably) after its prompt until this is true, as a
    /// user approving it would make it.
    var deviceApproved: Bool?

    func deviceLogin(_ group: GroupConfig, dpop: SigningKey?, prompt: @Sendable (DevicePrompt) -> Void) async throws -> TokenSet {
        let number = lock.withLock { deviceLogins += 1; return deviceLogins }
        prompt(DevicePrompt(verificationURI: "https://idp.example/device", verificationURIComplete: nil, userCode: "CODE-\(number)", expiresAt: 0))
        while lock.withLock({ deviceApproved == false }) {
            do {
                try await Task.sleep(nanoseconds: 1_000_000) // an IdP poll
            } catch {
                lock.withLock { deviceLoginsCancelled += 1 }
                throw error
            }
        }
        return next()
    }

    func approveDevice() { lock.withLock { deviceApproved = true } }
    var deviceCounts: (begun: Int, cancelled: Int) { lock.withLock { (deviceLogins, deviceLoginsCancelled) } }

    func browserLogin(_ group: GroupConfig, dpop: SigningKey?, prompt: @Sendable (BrowserPrompt) -> Void) async throws -> TokenSet {
        next()
    }
    func refresh(_ group: GroupConfig, refreshToken: String, dpop: SigningKey?) async throws -> TokenSet {
        lock.withLock { refreshes += 1 }
        if refreshDelay > 0 { try? await Task.sleep(nanoseconds: refreshDelay) }
        if let refreshError {
            if refreshError.name == .idpUnavailable { throw IdPBusy(refreshError, retryAfter: retryAfter) }
            throw refreshError
        }
        return next()
    }

    /// Mints asked for, in the order the IdP saw them: the target and the refresh token spent.
    private(set) var mints: [(target: TokenTarget, spent: String?)] = []
    /// Refresh tokens spent twice (a one-use provider would end the session).
    private(set) var reused: [String] = []
    private var spent: Set<String> = []
    var mintDelay: UInt64 = 0
    var mintError: BrokerError?
    var mechanism: TokenRequest = .resource

    var mintLog: (mints: [(target: TokenTarget, spent: String?)], reused: [String]) { lock.withLock { (mints, reused) } }

    func mintingMechanism(_ group: GroupConfig, for target: TokenTarget) async throws -> TokenRequest { mechanism }

    /// As a one-use provider: each mint by resource indicators spends its refresh token and rotates it.
    func mint(_ group: GroupConfig, target: TokenTarget, by mechanism: TokenRequest, refreshToken: String?,
              accessToken: String, dpop: SigningKey?) async throws -> TokenSet {
        lock.withLock {
            mints.append((target, mechanism == .resource ? refreshToken : nil))
            if mechanism == .resource, let refreshToken, !spent.insert(refreshToken).inserted { reused.append(refreshToken) }
        }
        if mintDelay > 0 { try? await Task.sleep(nanoseconds: mintDelay) }
        if let mintError {
            if mintError.name == .idpUnavailable { throw IdPBusy(mintError) }
            throw mintError
        }
        var tokens = next()
        tokens.accessToken = "minted-\(target.resource ?? "-")-\(tokens.accessToken)"
        if mechanism == .exchange { tokens.refreshToken = nil }
        return tokens
    }

    /// What ``revoke(_:token:hint:)`` answers.
    var revocation: Revocation = .revoked

    func revoke(_ group: GroupConfig, token: String, hint: TokenKind) async -> Revocation {
        lock.withLock { revoked.append(token) }
        return revocation
    }
}

final class RecordingSink: SignalSink, @unchecked Sendable {
    private let lock = NSLock()
    private var received: [Signal] = []
    var signals: [Signal] { lock.withLock { received } }
    func deliver(_ signal: Signal) { lock.withLock { received.append(signal) } }
}

/// A door a task waits at until the test opens it; the test can wait until someone is there.
final class AsyncGate: @unchecked Sendable {
    private let lock = NSLock()
    private var entered: [CheckedContinuation<Void, Never>] = []
    private var watchers: [CheckedContinuation<Void, Never>] = []
    private var isOpen = false

    func enter() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let (now, watching) = lock.withLock { () -> (Bool, [CheckedContinuation<Void, Never>]) in
                if isOpen { return (true, []) }
                entered.append(continuation)
                defer { watchers = [] }
                return (false, watchers)
            }
            watching.forEach { $0.resume() }
            if now { continuation.resume() }
        }
    }

    func waitUntilEntered() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let someone = lock.withLock { () -> Bool in
                if !entered.isEmpty { return true }
                watchers.append(continuation)
                return false
            }
            if someone { continuation.resume() }
        }
    }

    func open() {
        let waiting = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
            isOpen = true
            defer { entered = [] }
            return entered
        }
        waiting.forEach { $0.resume() }
    }
}

/// The groups' accounts, kept in memory (as ``AccountFile`` keeps them in a file).
final class MemoryAccounts: AccountMemory, @unchecked Sendable {
    private let lock = NSLock()
    private var kept: [String: RememberedAccount]
    private(set) var saves = 0
    var damaged: String?

    init(_ kept: [String: RememberedAccount] = [:]) { self.kept = kept }

    var accounts: [String: RememberedAccount] { lock.withLock { kept } }

    func load() async -> (accounts: [String: RememberedAccount], damaged: String?) {
        lock.withLock { (kept, damaged) }
    }

    func save(_ accounts: [String: RememberedAccount]) async throws {
        lock.withLock {
            kept = accounts
            saves += 1
        }
    }
}

extension Broker {
    /// A sign as the gate would pass it: its URL checked (``Gate`` checks it, and `resources`).
    func sign(_ request: SignRequest, target: TokenTarget = .session) async throws -> SignResponse {
        try await sign(request, checked: SignDecision(request, url: request.validatedURL(), config: group(request.group)), target: target)
    }

    nonisolated func signWithoutWaiting(_ request: SignRequest, group config: GroupConfig) throws -> SignResponse? {
        try signWithoutWaiting(request, checked: SignDecision(request, url: request.validatedURL(), config: config), group: config)
    }
}
