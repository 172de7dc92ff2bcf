import Foundation
import MSSOCore
import MSSOProtocol

/// Wrappers that count calls to the real store and IdP, to show the hot path makes none.
final class CountingStore: CredentialStore, @unchecked Sendable {
    private let inner: any CredentialStore
    private let lock = NSLock()
    private var calls = 0
    var count: Int { lock.withLock { calls } }
    init(_ inner: any CredentialStore) { self.inner = inner }
    private func tick() { lock.withLock { calls += 1 } }

    func load(group: String) async throws -> Credential? { tick(); return try await inner.load(group: group) }
    func save(_ credential: Credential, group: String) async throws { tick(); try await inner.save(credential, group: group) }
    func delete(group: String) async throws -> Bool { tick(); return try await inner.delete(group: group) }
}

final class CountingIdP: IdentityProvider, @unchecked Sendable {
    private let inner: any IdentityProvider
    private let lock = NSLock()
    private var calls = 0
    var count: Int { lock.withLock { calls } }
    init(_ inner: any IdentityProvider) { self.inner = inner }
    private func tick() { lock.withLock { calls += 1 } }

    func passwordLogin(_ group: GroupConfig, username: String, password: String) async throws -> TokenSet {
        tick()
        return try await inner.passwordLogin(group, username: username, password: password)
    }
    func deviceLogin(_ group: GroupConfig, prompt: @Sendable (DevicePrompt) -> Void) async throws -> TokenSet {
        tick()
        return try await inner.deviceLogin(group, prompt: prompt)
    }
    func refresh(_ group: GroupConfig, refreshToken: String) async throws -> TokenSet {
        tick()
        return try await inner.refresh(group, refreshToken: refreshToken)
    }
    func revoke(_ group: GroupConfig, refreshToken: String) async { tick(); await inner.revoke(group, refreshToken: refreshToken) }
}
