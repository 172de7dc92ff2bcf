import FoundationEssentials
import MSSOProtocol

/// A store that can say whether it is usable without reading an item or prompting the user:
/// for `msso doctor`.
public protocol KeyringProbe: Sendable {
    /// Nil when the keyring is there and unlocked; else `KeyringLocked` or `KeyringUnavailable`
    /// with a sentence saying what to do. Bounded in time like every store call.
    func probe() async -> BrokerError?
}

/// An identity provider whose discovery can be fetched afresh, bypassing any cache: for `msso doctor`.
public protocol DiscoveryProbe: Sendable {
    /// Nil when the group's discovery document answers and is valid; else why not.
    func probeDiscovery(_ group: GroupConfig) async -> BrokerError?
}

extension Broker {
    /// Which store keeps the sessions, and why (nil for a store that cannot say: the tests').
    public nonisolated func storeDescription() async -> StoreDescription? {
        await (store as? any StoreDescribing)?.describe()
    }

    /// The daemon's checks for `msso doctor`, except the caller's registrations (the server's):
    /// the keyring; the configuration files read again now (with `environment`, the daemon's);
    /// each group's discovery, all groups at once, each timed.
    public func diagnose(environment: [String: String]) async -> (keyring: Finding, configuration: Finding, changed: Bool,
                                                                  warnings: [String], discovery: [DiscoveryCheck]) {
        let inForce = configuration
        async let keyring = (store as? any KeyringProbe)?.probe()
        var configuration = Finding.fine
        var changed = false
        var warnings: [String] = []
        do {
            let fresh = try Configuration.load(environment: environment)
            changed = fresh.groups != inForce.groups || fresh.policy != inForce.policy
            warnings = fresh.warnings
        } catch let error as ConfigError {
            configuration = Finding(BrokerError(.configInvalid, "\(error); fix it, then reload mssod (`systemctl --user reload msso`, or send it SIGHUP): until then it keeps the configuration it read before"))
        } catch {
            configuration = Finding(BrokerError(.configInvalid, "the configuration could not be read: \(error)"))
        }
        let probe = identity as? any DiscoveryProbe
        let clock = ContinuousClock()
        var discovery = await withTaskGroup(of: DiscoveryCheck.self) { tasks in
            for config in inForce.groups.values {
                tasks.addTask {
                    let start = clock.now
                    let failure = await probe?.probeDiscovery(config)
                        ?? (probe == nil ? BrokerError(.internal, "this broker cannot probe identity providers") : nil)
                    let elapsed = start.duration(to: clock.now)
                    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
                    return DiscoveryCheck(group: config.name, issuer: config.issuer, seconds: seconds, failure: failure)
                }
            }
            var checks: [DiscoveryCheck] = []
            for await check in tasks { checks.append(check) }
            return checks.sorted { $0.group < $1.group }
        }
        for index in discovery.indices where discovery[index].ok {
            guard let config = inForce.groups[discovery[index].group] else { continue }
            let outcomes = sessions.filter { $0.key.group == config.name }.flatMap(\.value.mintOutcomes.values).sorted { $0.target < $1.target }
            if !outcomes.isEmpty { discovery[index].mints = outcomes }
            guard config.tokens == .perResource, let entry = config.resources?.entries.first else { continue }
            do {
                switch try await identity.mintingMechanism(config, for: TokenTarget(resource: entry)) {
                case .exchange:
                    discovery[index].minting = "mints a token for each of its \(config.resources!.entries.count) resources by token exchange (RFC 8693)\(config.tokenRequest == nil ? ", which its provider's discovery lists" : "")"
                case .resource:
                    discovery[index].minting = "mints a token for each of its \(config.resources!.entries.count) resources by resource indicators (RFC 8707)\(config.tokenRequest == nil ? ", as its provider's discovery lists no token exchange" : ""); a provider cannot say beforehand whether it honours them: msso checks the audience of each token it mints, logins must be device or browser logins at providers that ignore `resource` on the password grant (glewlwyd), and a provider that narrows a rotated refresh token to the server it minted for last (glewlwyd with one-use refresh tokens, django-oauth-toolkit when it rotates them) mints the first server only: let its refresh tokens be used more than once, or use the exchange"
                }
            } catch {
                discovery[index].minting = (error as? BrokerError)?.message ?? "\(error)"
                discovery[index].mintingFails = true
            }
        }
        let keyringFailure = await keyring
        let keyringFinding = keyringFailure.map(Finding.init) ?? (store is any KeyringProbe ? .fine
            : Finding(BrokerError(.internal, "this broker's store cannot be probed")))
        return (keyringFinding, configuration, changed, warnings, discovery)
    }
}
