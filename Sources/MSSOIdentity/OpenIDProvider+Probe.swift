import MSSOCore
import MSSOProtocol

extension OpenIDProvider: DiscoveryProbe {
    /// Fetches the group's discovery document afresh (bounded by the request timeout).
    public func probeDiscovery(_ group: GroupConfig) async -> BrokerError? {
        do {
            _ = try await fetchDiscovery(group)
            return nil
        } catch {
            return error
        }
    }
}
