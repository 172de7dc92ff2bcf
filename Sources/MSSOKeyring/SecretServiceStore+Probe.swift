import CLibSecret
import MSSOCore
import MSSOProtocol

extension SecretServiceStore: KeyringProbe {
    /// Whether the default collection is there and unlocked, without reading an item.
    public func probe() async -> BrokerError? {
        let (result, _, message) = await call { cancellable, message in (msso_secret_probe(cancellable, &message), nil) }
        do {
            try check(result, message, doing: "use the keyring")
            return nil
        } catch {
            return error
        }
    }
}

extension SecretServiceStore {
    /// What `store = "auto"` needs to know of the Secret Service.
    public enum Presence: Sendable, Equatable {
        /// There, its default keyring unlocked.
        case unlocked
        /// There, its default keyring locked; `holdsSessions`: with msso's items in it.
        case locked(holdsSessions: Bool)
        /// On the bus, but it did not answer in time.
        case silent
        /// Nothing answers for it (no session bus, or no Secret Service on it).
        case absent
        /// The bus, or the Secret Service on it, is another user's: why.
        case foreign(String)
    }

    public func presence() async -> Presence {
        let (result, _, message) = await call { cancellable, message in (msso_secret_probe(cancellable, &message), nil) }
        switch result {
        case MSSO_SECRET_OK: return .unlocked
        case MSSO_SECRET_TIMEOUT: return .silent
        case MSSO_SECRET_FOREIGN: return .foreign(message ?? "another user's")
        case MSSO_SECRET_LOCKED:
            let (held, _, _) = await call { cancellable, message in (msso_secret_holds_any(cancellable, &message), nil) }
            // Unknown counts as held: sessions in a keyring must not be hidden by a fresh one elsewhere.
            return .locked(holdsSessions: held != MSSO_SECRET_ABSENT)
        default: return .absent
        }
    }
}
