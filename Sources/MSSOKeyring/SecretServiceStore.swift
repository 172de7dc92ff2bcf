import CLibSecret
import FoundationEssentials
import Synchronization
import MSSOCore
import MSSOProtocol

/// Credentials in the desktop keyring, through libsecret (freedesktop Secret Service).
///
/// One item per access group, schema `org.msso.Credential`, attributes `group` and `issuer`;
/// the whole ``Credential`` is the secret payload. Calls run one at a time on a lane of the
/// pool (libsecret's sync calls block) and each is cancelled after ``timeout``.
public final class SecretServiceStore: CredentialStore, KeyStore, @unchecked Sendable {
    private let timeout: Double
    private let lane = Workers.Lane()
    /// When a call last timed out. Calls that were already waiting then fail at once instead of
    /// each waiting out a hung Secret Service in turn; a call that arrives later tries again.
    private let lastTimeout = Mutex(Date.distantPast)

    public init(timeout: Double = 5) {
        self.timeout = timeout
        _ = Self.typesReady
    }

    /// GLib's D-Bus types, registered once before this store's first call and the notifier's
    /// connect can run at once: GLib deadlocks when two threads first register them together.
    private static let typesReady: Void = msso_glib_types_ready()

    public func load(group: String) async throws(BrokerError) -> Credential? {
        try await read(Credential.self, schema: .credential, group: group)
    }

    public func save(_ credential: Credential, group: String) async throws(BrokerError) {
        try await write(credential, schema: .credential, group: group, attribute: ("issuer", credential.issuer))
    }

    @discardableResult
    public func delete(group: String) async throws(BrokerError) -> Bool {
        try StoredItem.requireCText(group)
        let (result, _, message) = await call { cancellable, message in
            (msso_secret_delete(ItemSchema.credential.pointer, group, cancellable, &message), nil)
        }
        try check(result, message, doing: "delete the credential of \(StoredItem.shown(group))")
        return result == MSSO_SECRET_OK
    }

    public func storedAccounts(group: String) async throws(BrokerError) -> [String] {
        try StoredItem.requireCText(group)
        let prefix = group + "\u{1F}"
        let (result, list, message) = await call { cancellable, message in
            var out: UnsafeMutablePointer<CChar>?
            let result = msso_secret_accounts(ItemSchema.credential.pointer, prefix, &out, cancellable, &message)
            defer { msso_secret_free(out) }
            return (result, out.map { String(cString: $0) })
        }
        try check(result, message, doing: "list the accounts of \(StoredItem.shown(group))")
        return StoredItem.accounts(in: (list ?? "").split(separator: "\n").map(String.init))
    }

    // MARK: Items as JSON

    private func read<T: Decodable>(_ type: T.Type, schema: ItemSchema, group: String) async throws(BrokerError) -> T? {
        let what = schema.item.what
        try StoredItem.requireCText(group)
        let (result, secret, message) = await call { cancellable, message in
            var secret: UnsafeMutablePointer<CChar>?
            let result = msso_secret_lookup(schema.pointer, group, &secret, cancellable, &message)
            defer { msso_secret_free(secret) }
            return (result, secret.map { String(cString: $0) })
        }
        try check(result, message, doing: "read the \(what) of \(StoredItem.shown(group))")
        guard result == MSSO_SECRET_OK, let secret else { return nil }
        return try StoredItem.decode(T.self, from: Data(secret.utf8), schema.item, group: group, store: "keyring")
    }

    private func write<T: Encodable>(_ value: T, schema: ItemSchema, group: String,
                                     attribute: (String, String)) async throws(BrokerError) {
        let what = schema.item.what
        try StoredItem.requireCText(group, attribute.1)
        let payload = String(decoding: try StoredItem.encode(value, schema.item, group: group), as: UTF8.self)
        let (result, _, message) = await call { cancellable, message in
            (msso_secret_store(schema.pointer, group, attribute.0, attribute.1, "msso \(what) for \(group)", payload, cancellable, &message), nil)
        }
        try check(result, message, doing: "store the \(what) of \(StoredItem.shown(group))")
    }

    /// Runs one shim call on the keyring's lane with a cancellable that fires after `timeout`.
    func call(
        _ body: @escaping @Sendable (UnsafeMutablePointer<GCancellable>?, inout UnsafeMutablePointer<CChar>?) -> (msso_secret_result, String?)
    ) async -> (msso_secret_result, String?, String?) {
        let queued = Date()
        return await withCheckedContinuation { continuation in
            lane.async { [self] in
                guard lastTimeout.withLock({ $0 < queued }) else {
                    return continuation.resume(returning: (MSSO_SECRET_TIMEOUT, nil, nil))
                }
                var outcome = attempt(body)
                if outcome.0 == MSSO_SECRET_UNAVAILABLE {
                    // The Secret Service may have restarted under a new bus name, or the bus
                    // itself: libsecret keeps talking to the old ones until they are dropped.
                    msso_secret_reset()
                    outcome = attempt(body)
                }
                if outcome.0 == MSSO_SECRET_TIMEOUT {
                    lastTimeout.withLock { $0 = Date() }
                }
                continuation.resume(returning: outcome)
            }
        }
    }

    private func attempt(
        _ body: (UnsafeMutablePointer<GCancellable>?, inout UnsafeMutablePointer<CChar>?) -> (msso_secret_result, String?)
    ) -> (msso_secret_result, String?, String?) {
        let cancellable = g_cancellable_new()
        var message: UnsafeMutablePointer<CChar>?
        let (result, secret) = Deadline.run(within: timeout, interrupt: { g_cancellable_cancel(cancellable) }) {
            body(cancellable, &message)
        }
        g_object_unref(cancellable)
        let text = message.map { String(cString: $0) }
        g_free(message)
        return (result, secret, text)
    }

    func check(_ result: msso_secret_result, _ message: String?, doing what: String) throws(BrokerError) {
        switch result {
        case MSSO_SECRET_OK, MSSO_SECRET_ABSENT:
            return
        case MSSO_SECRET_LOCKED:
            throw BrokerError(.keyringLocked, "the keyring is locked, so msso could not \(what); unlock it (log in to the desktop, or unlock it in your keyring manager) and try again")
        case MSSO_SECRET_FOREIGN:
            throw BrokerError(.keyringUnavailable, "the Secret Service on this session bus is not yours (\(message ?? "another user's")), so msso could not \(what); check DBUS_SESSION_BUS_ADDRESS (your own bus is usually unix:path=$XDG_RUNTIME_DIR/bus)")
        case MSSO_SECRET_TIMEOUT:
            throw BrokerError(.keyringUnavailable, "the Secret Service did not answer within \(Int(timeout)) s, so msso could not \(what); check that gnome-keyring-daemon (or another Secret Service) is running")
        default:
            throw BrokerError(.keyringUnavailable, "no Secret Service on this session bus, so msso could not \(what) (\(message ?? "unknown error")); start gnome-keyring-daemon or another Secret Service")
        }
    }
}

extension SecretServiceStore {
    public func loadKey(group: String) async throws(BrokerError) -> StoredKey? {
        try await read(StoredKey.self, schema: .key, group: group)
    }

    public func saveKey(_ key: StoredKey, group: String) async throws(BrokerError) {
        try await write(key, schema: .key, group: group, attribute: ("kind", key.kind.rawValue))
    }
}

/// The shim's two item schemas.
enum ItemSchema: Sendable {
    case credential, key
    var item: StoredItem { self == .credential ? .credential : .key }
    /// Static C data: the pointer stays valid.
    var pointer: UnsafePointer<SecretSchema> { self == .credential ? msso_credential_schema_ref() : msso_key_schema_ref() }
}
