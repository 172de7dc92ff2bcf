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
