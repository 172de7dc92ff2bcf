import FoundationEssentials
import MSSOCore
import MSSOProtocol

/// The desktop verbs' part of dispatch: `diagnose`, and the lock and the audit log in `status`.
extension Dispatcher {
    /// `status`'s result, saying whether the broker is locked and whether audit rows are not written.
    func statusResult(_ groups: [SessionStatus]) async -> Methods.Status.Result {
        let lock = await broker.lockState
        return Methods.Status.Result(groups: groups, locked: lock.locked ? true : nil, lockedAt: lock.lockedAt,
                                     store: await broker.storeDescription(), audit: audit?.health.flatMap { $0.problem == nil ? nil : $0 })
    }

    /// `diagnose`: the broker's checks, and how the caller is registered.
    func diagnosis(_ caller: Caller) async -> Diagnosis {
        let configuration = rules.configuration
        let found = await broker.diagnose(environment: ProcessInfo.processInfo.environment)
        let app = caller.app
        let description = CallerDescription(executable: app.executable, flatpak: app.flatpak, unit: app.unit,
                                            apps: caller.registrations.map(\.name),
                                            groups: caller.usableGroups(configuration).sorted())
        return Diagnosis(keyring: found.keyring, configuration: found.configuration, configurationChanged: found.changed,
                         configurationWarnings: found.warnings, groups: configuration.groups.keys.sorted(),
                         discovery: found.discovery, caller: description, locked: await broker.lockState.locked,
                         resources: configuration.groups.compactMapValues { $0.resources?.entries },
                         store: await broker.storeDescription(), audit: audit?.health)
    }
}
