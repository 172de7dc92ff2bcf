import CMSSOSystem
import FoundationEssentials
import Glibc
import MSSOCore
import MSSOProtocol

/// Credentials and signing keys in the kernel's key retention service (keyrings(7)), for sessions
/// without a Secret Service: SSH logins, containers, servers.
///
/// Each is a "user" key named `msso:credential:GROUP` or `msso:key:GROUP` holding the same JSON as
/// the Secret Service's item, in the user's persistent keyring (``CMSSOSystem/cmsso_keys_home``):
/// in kernel memory, bound to the uid (and to the user namespace), kept for
/// `/proc/sys/kernel/keys/persistent_keyring_expiry` seconds after msso last used it, never
/// across a reboot, as with ssh-agent. A write replaces the payload in one step. System calls
/// only: nothing to wait for, so no queue and no timeout.
public final class KernelKeyringStore: CredentialStore, KeyStore, KeyringProbe, Sendable {
    /// The biggest payload of a "user" key.
    static let maximumPayload = 32_767

    public init() {}

    public func load(group: String) async throws(BrokerError) -> Credential? {
        try read(Credential.self, .credential, group: group)
    }

    public func save(_ credential: Credential, group: String) async throws(BrokerError) {
        try write(credential, .credential, group: group)
    }

    @discardableResult
    public func delete(group: String) async throws(BrokerError) -> Bool {
        let home = try self.home(doing: "delete the credential of \(StoredItem.shown(group))")
        guard let key = try find(.credential, group: group, in: home, doing: "delete the credential of \(StoredItem.shown(group))") else { return false }
        let result = cmsso_keys_delete(home, key)
        guard result == 0 || result == -ENOKEY || result == -EKEYREVOKED else {
            throw failure(result, doing: "delete the credential of \(StoredItem.shown(group))")
        }
        return true
    }

    public func storedAccounts(group: String) async throws(BrokerError) -> [String] {
        let doing = "list the accounts of \(StoredItem.shown(group))"
        let home = try self.home(doing: doing)
        var serials = [Int32](repeating: 0, count: 4096)
        let count = serials.withUnsafeMutableBufferPointer { cmsso_keys_list(home, $0.baseAddress, $0.count) }
        guard count >= 0 else { throw failure(Int32(count), doing: doing) }
        let prefix = Self.name(.credential, group: group) + "\u{1F}"
        var names: [String] = []
        var buffer = [CChar](repeating: 0, count: 4096)
        for serial in serials.prefix(min(Int(count), serials.count)) {
            let length = buffer.withUnsafeMutableBufferPointer { cmsso_keys_describe(serial, $0.baseAddress, $0.count) }
            guard length > 0 else { continue } // gone meanwhile, or not ours to see
            // "user;UID;GID;PERM;DESCRIPTION": the description is after the fourth ';'.
            let text = String(decoding: buffer.prefix(Int(length) - 1).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let fields = text.split(separator: ";", maxSplits: 4, omittingEmptySubsequences: false)
            guard fields.count == 5, fields[0] == "user", fields[4].hasPrefix(prefix) else { continue }
            names.append(String(fields[4].dropFirst(prefix.count)))
        }
        return StoredItem.accounts(in: names)
    }

    public func loadKey(group: String) async throws(BrokerError) -> StoredKey? {
        try read(StoredKey.self, .key, group: group)
    }

    public func saveKey(_ key: StoredKey, group: String) async throws(BrokerError) {
        try write(key, .key, group: group)
    }

    /// Whether msso can use the keyring: the persistent (or user) keyring can be had.
    public func probe() async -> BrokerError? {
        do {
            _ = try home(doing: "use the kernel keyring")
            return nil
        } catch {
            return error
        }
    }

    /// The quota must have room for the refreshed credential (the kernel charges the new payload
    /// before it frees the old) and for the answer kept beside it until then (about as large).
    public func cannotSave(_ credential: Credential, group: String) async -> BrokerError? {
        guard let room = Self.quotaLeft(), let payload = try? StoredItem.encode(credential, .credential, group: group) else { return nil }
        return room < 2 * payload.count + 1024 ? failure(-EDQUOT, doing: "store a refreshed access token of \(StoredItem.shown(group)) (so the refresh token was not spent)") : nil
    }

    /// Bytes left of this uid's key quota (/proc/key-users), nil when it cannot be read.
    static func quotaLeft() -> Int? {
        guard let text = wholeFile("/proc/key-users") else { return nil }
        return quotaLeft(uid: getuid(), in: text)
    }

    static func quotaLeft(uid: uid_t, in text: String) -> Int? {
        let me = "\(uid):"
        for line in text.split(separator: "\n") {
            // "  UID:     USAGE NKEYS/NIKEYS QNKEYS/MAXKEYS QNBYTES/MAXBYTES"
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count == 5, fields[0] == me else { continue }
            let bytes = fields[4].split(separator: "/").compactMap { Int($0) }
            return bytes.count == 2 ? bytes[1] - bytes[0] : nil
        }
        return nil
    }

    /// All of a file of /proc. Foundation's `String(contentsOfFile:)` reads a seq_file's first
    /// 4 KiB only, and /proc/key-users lists every uid that holds keys (40 bytes each): a uid
    /// further down went unfound, and refreshes were made with no room to store their answer.
    static func wholeFile(_ path: String, limit: Int = 16 << 20) -> String? {
        let file = open(path, O_RDONLY | O_CLOEXEC)
        guard file >= 0 else { return nil }
        defer { close(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while bytes.count <= limit {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(file, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { return String(decoding: bytes, as: UTF8.self) }
            bytes += chunk[..<count]
        }
        return nil
    }

    /// Where the items are, in a sentence for `status` and `msso doctor`.
    public static func place() -> String {
        var persistent: Int32 = 1
        _ = cmsso_keys_home(&persistent) // failing (a full quota) says nothing of which keyring it is
        guard persistent == 1 else {
            return "the kernel keyring (the user keyring of uid \(getuid()): in memory, kept while you have processes, never across a reboot)"
        }
        let kept = setting("persistent_keyring_expiry").map { "kept \(SessionDuration.format(Double($0))) after msso last used it" } ?? "kept for a while after msso last used it"
        return "the kernel keyring (the persistent keyring of uid \(getuid()): in memory, \(kept), never across a reboot)"
    }

    /// A number in /proc/sys/kernel/keys.
    static func setting(_ name: String) -> Int? {
        wholeFile("/proc/sys/kernel/keys/" + name).flatMap { Int(String($0.prefix { $0.isNumber })) }
    }

    // MARK: Items

    private static func name(_ item: StoredItem, group: String) -> String {
        "msso:\(item == .credential ? "credential" : "key"):\(group)"
    }

    private func read<T: Decodable>(_ type: T.Type, _ item: StoredItem, group: String) throws(BrokerError) -> T? {
        let doing = "read the \(item.what) of \(StoredItem.shown(group))"
        let home = try self.home(doing: doing)
        guard let key = try find(item, group: group, in: home, doing: doing) else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let length = buffer.withUnsafeMutableBytes { cmsso_keys_read(key, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
            if length == -Int(ENOKEY) || length == -Int(EKEYREVOKED) || length == -Int(EKEYEXPIRED) { return nil } // gone meanwhile
            guard length >= 0 else { throw failure(Int32(length), doing: doing) }
            if length <= buffer.count {
                return try StoredItem.decode(T.self, from: Data(buffer[..<length]), item, group: group, store: "kernel keyring")
            }
            guard length <= Self.maximumPayload else {
                throw StoredItem.corrupt(item, group: group, store: "kernel keyring")
            }
            buffer = [UInt8](repeating: 0, count: length) // it grew between the two reads: read again
        }
    }

    private func write<T: Encodable>(_ value: T, _ item: StoredItem, group: String) throws(BrokerError) {
        let doing = "store the \(item.what) of \(StoredItem.shown(group))"
        try StoredItem.requireCText(group)
        let payload = try StoredItem.encode(value, item, group: group)
        guard payload.count <= Self.maximumPayload else {
            throw BrokerError(.keyringUnavailable, "the \(item.what) of \(StoredItem.shown(group)) is \(payload.count) bytes, more than a kernel key holds (\(Self.maximumPayload)), so msso could not store it; use the Secret Service (`store = \"secret-service\"`)")
        }
        let home = try self.home(doing: doing)
        let result = payload.withUnsafeBytes { cmsso_keys_write(home, Self.name(item, group: group), $0.baseAddress, $0.count) }
        guard result >= 0 else { throw failure(result, doing: doing) }
    }

    private func find(_ item: StoredItem, group: String, in home: Int32, doing: String) throws(BrokerError) -> Int32? {
        try StoredItem.requireCText(group)
        let key = cmsso_keys_find(home, Self.name(item, group: group))
        guard key >= 0 else { throw failure(key, doing: doing) }
        return key == 0 ? nil : key
    }

    private func home(doing: String) throws(BrokerError) -> Int32 {
        var persistent: Int32 = 0
        let home = cmsso_keys_home(&persistent)
        guard home >= 0 else { throw failure(home, doing: doing) }
        return home
    }

    /// A system call's -errno, in a sentence that says what to do.
    private func failure(_ result: Int32, doing: String) -> BrokerError {
        switch -result {
        case EDQUOT:
            let file = getuid() == 0 ? "root_maxbytes" : "maxbytes"
            let bytes = Self.setting(file).map { "\($0) bytes in all, " } ?? ""
            return BrokerError(.keyringUnavailable, "your kernel keyring quota (\(bytes)/proc/sys/kernel/keys/\(file)) is full, so msso could not \(doing); log out of groups you no longer use (`msso logout --group NAME`), or find what holds the rest (your line of /proc/key-users counts keys of every program of your uid, in any namespace; `keyctl show @u` lists those in your user keyring), or ask the administrator to raise the quota")
        case ENOSYS, EPERM:
            return BrokerError(.keyringUnavailable, "this process may not use the kernel's key retention service (a container's seccomp profile forbids keyctl?), so msso could not \(doing); run mssod where keyctl is allowed, or use a Secret Service (`store = \"secret-service\"`)")
        default:
            return BrokerError(.keyringUnavailable, "the kernel keyring refused (\(String(cString: strerror(-result)))), so msso could not \(doing)")
        }
    }
}
