import Foundation
import MSSOCore
import MSSOProtocol
import MSSOSigning

/// A thread-safe call counter.
final class CallCounter: @unchecked Sendable {
    private let lock = NSLock()
    private var calls = 0
    var count: Int { lock.withLock { calls } }
    func tick() { lock.withLock { calls += 1 } }
}

/// Wrappers that count calls to the real store and IdP, to show the hot path makes none.
final class CountingStore: CredentialStore {
    private let inner: any CredentialStore
    let calls = CallCounter()
    init(_ inner: any CredentialStore) { self.inner = inner }

    func load(group: String) async throws -> Credential? { calls.tick(); return try await inner.load(group: group) }
    func save(_ credential: Credential, group: String) async throws { calls.tick(); try await inner.save(credential, group: group) }
    func delete(group: String) async throws -> Bool { calls.tick(); return try await inner.delete(group: group) }
}

final class CountingIdP: IdentityProvider {
    private let inner: any IdentityProvider
    let calls = CallCounter()
    init(_ inner: any IdentityProvider) { self.inner = inner }

    func passwordLogin(_ group: GroupConfig, username: String, password: String, dpop: SigningKey?) async throws -> TokenSet {
        calls.tick()
        return try await inner.passwordLogin(group, username: username, password: password, dpop: dpop)
    }
    func deviceLogin(_ group: GroupConfig, dpop: SigningKey?, prompt: @Sendable (DevicePrompt) -> Void) async throws -> TokenSet {
        calls.tick()
        return try await inner.deviceLogin(group, dpop: dpop, prompt: prompt)
    }
    func browserLogin(_ group: GroupConfig, dpop: SigningKey?, prompt: @Sendable (BrowserPrompt) -> Void) async throws -> TokenSet {
        calls.tick()
        return try await inner.browserLogin(group, dpop: dpop, prompt: prompt)
    }
    func refresh(_ group: GroupConfig, refreshToken: String, dpop: SigningKey?) async throws -> TokenSet {
        calls.tick()
        return try await inner.refresh(group, refreshToken: refreshToken, dpop: dpop)
    }
    func revoke(_ group: GroupConfig, refreshToken: String) async {
        calls.tick()
        await inner.revoke(group, refreshToken: refreshToken)
    }
}
