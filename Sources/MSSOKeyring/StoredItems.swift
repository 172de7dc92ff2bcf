import FoundationEssentials
import MSSOCore
import MSSOProtocol

/// What both stores keep per group: a credential, and a signing key, each as one JSON item.
enum StoredItem: Sendable {
    case credential, key

    /// In sentences: "the credential of \"g\"".
    var what: String { self == .credential ? "credential" : "signing key" }

    static func encode<T: Encodable>(_ value: T, _ item: StoredItem, group: String) throws(BrokerError) -> Data {
        do {
            return try JSONEncoder().encode(value)
        } catch {
            throw BrokerError(.internal, "could not encode the \(item.what) of \(StoredItem.shown(group))")
        }
    }

    /// An item that does not decode is reported as Corrupt, never as "none stored": a damaged or
    /// planted item must not look like a logout, and `logout` is what clears it.
    static func decode<T: Decodable>(_ type: T.Type, from payload: Data, _ item: StoredItem, group: String,
                                     store: String) throws(BrokerError) -> T {
        do {
            return try JSONDecoder().decode(T.self, from: payload)
        } catch {
            throw corrupt(item, group: group, store: store)
        }
    }

    static func corrupt(_ item: StoredItem, group: String, store: String) -> BrokerError {
        BrokerError(.corrupt, "the \(store)'s \(item.what) item of \(StoredItem.shown(group)) is damaged or not msso's; `msso logout \(AccountName(storeName: group).options)` clears it")
    }

    /// A store name in sentences: "\"g\"", or "\"g\" (account admin)" (``AccountName/storeName``).
    static func shown(_ storeName: String) -> String {
        let parts = storeName.split(separator: "\u{1F}", maxSplits: 1, omittingEmptySubsequences: false)
        return parts.count == 2 ? "\"\(parts[0])\" (account \(parts[1]))" : "\"\(storeName)\""
    }

    /// The account names among `names` (what follows a group's name in item names), each once;
    /// anything else an item could be named is left out.
    static func accounts(in names: [String]) -> [String] {
        Array(Set(names.filter(AccountName.isValid))).sorted()
    }

    /// Item names reach C as strings, which end at a NUL: "adm\u{0}x" would name the item of
    /// "adm". The configuration refuses such names; this keeps a store from ever mistaking one
    /// item for another whatever reaches it.
    static func requireCText(_ texts: String...) throws(BrokerError) {
        guard !texts.contains(where: { $0.utf8.contains(0) }) else {
            throw BrokerError(.internal, "a group or issuer with a NUL character cannot name a keyring item")
        }
    }
}
