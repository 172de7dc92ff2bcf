import Foundation
import Logging
@testable import MSSOCore
import MSSOProtocol
import MSSOSigning

// Fakes to inject faults the real keyring and IdP cannot produce on demand. The real parts are
// exercised end to end by Tests/e2e.

final class TestClock: @unchecked Sendable {
    private let lock = NSLock()
    private var time: Double = 1_800_000_000
    var now: Double { lock.withLock { time } }
    func advance(_ seconds: Double) { lock.withLock { time += seconds } }
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

    func item(_ group: String) -> Credential? { lock.withLock { items[group] } }
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
            saves += 1
            corrupt.remove(group)
            items[group] = credential
        }
    }

    func delete(group: String) async throws -> Bool {
        try lock.withLock {
            if locked { throw BrokerError(.keyringLocked, "locked") }
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

    var counts: (refreshes: Int, revoked: [String]) { lock.withLock { (refreshes, revoked) } }

    private func next() -> TokenSet {
        lock.withLock {
            issued += 1
            return TokenSet(accessToken: "at-\(issued)", refreshToken: "rt-\(issued)", expiresIn: lifetime)
        }
    }

    func passwordLogin(_ group: GroupConfig, username: String, password: String, dpop: SigningKey?) async throws -> TokenSet {
        guard password == "right" else { throw BrokerError(.invalidCredentials, "refused") }
        return next()
    }

    func deviceLogin(_ group: GroupConfig, dpop: SigningKey?, prompt: @Sendable (DevicePrompt) -> Void) async throws -> TokenSet {
        prompt(DevicePrompt(verificationURI: "https://idp.example/device", verificationURIComplete: nil, userCode: "ABCD", expiresAt: 0))
        return next()
    }

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

    func revoke(_ group: GroupConfig, refreshToken: String) async {
        lock.withLock { revoked.append(refreshToken) }
    }
}

final class RecordingSink: SignalSink, @unchecked Sendable {
    private let lock = NSLock()
    private var received: [Signal] = []
    var signals: [Signal] { lock.withLock { received } }
    func deliver(_ signal: Signal) { lock.withLock { received.append(signal) } }
}
