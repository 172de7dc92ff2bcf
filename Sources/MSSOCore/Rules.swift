import Logging
import Synchronization

/// The rules in force: the configuration and the app registrations, as one immutable snapshot
/// replaced whole, so that no call ever sees new registrations with old groups. The broker and
/// the server both read it; only ``reload(_:)`` (SIGHUP) and ``reloadRegistrations()`` (an
/// `apps.d` file changed) write it.
public final class Rules: Sendable {
    public struct Snapshot: Sendable {
        public let configuration: Configuration
        public let entitlements: Entitlements
        /// Bumped by every reload, so that what was derived from an older snapshot can tell.
        public let generation: Int
    }

    private let state: Mutex<Snapshot>
    private let logger: Logger

    /// Reads the registrations the configuration points at.
    public convenience init(configuration: Configuration, logger: Logger) {
        self.init(configuration: configuration, entitlements: Self.entitlements(configuration), logger: logger)
    }

    public init(configuration: Configuration, entitlements: Entitlements, logger: Logger) {
        self.logger = logger
        state = Mutex(Snapshot(configuration: configuration, entitlements: entitlements, generation: 1))
        report(configuration.warnings + entitlements.warnings)
    }

    public var current: Snapshot { state.withLock { $0 } }
    public var configuration: Configuration { current.configuration }
    public var entitlements: Entitlements { current.entitlements }

    /// Takes a new configuration (SIGHUP) and re-reads the registrations.
    public func reload(_ configuration: Configuration) {
        let entitlements = Self.entitlements(configuration)
        state.withLock { $0 = Snapshot(configuration: configuration, entitlements: entitlements, generation: $0.generation + 1) }
        report(configuration.warnings + entitlements.warnings)
    }

    /// Re-reads the registrations (an `apps.d` file was added, removed or changed). A file that
    /// cannot be read is skipped, never taken as "no registrations".
    public func reloadRegistrations() {
        let configuration = self.configuration
        let entitlements = Self.entitlements(configuration)
        state.withLock {
            $0 = Snapshot(configuration: $0.configuration, entitlements: entitlements, generation: $0.generation + 1)
        }
        logger.info("app registrations reloaded", metadata: ["apps": "\(entitlements.registrations.count)"])
        report(entitlements.warnings)
    }

    /// The directories whose changes call for ``reloadRegistrations()``.
    public var watchedDirectories: [String] {
        let configuration = self.configuration
        var directories = [configuration.systemDirectory, configuration.systemDirectory + "/apps.d"]
        if configuration.policy.userApps {
            directories += [configuration.userDirectory, configuration.userDirectory + "/apps.d"]
        }
        return directories
    }

    private static func entitlements(_ configuration: Configuration) -> Entitlements {
        Entitlements.load(systemDirectory: configuration.systemDirectory, userDirectory: configuration.userDirectory,
                          userApps: configuration.policy.userApps)
    }

    private func report(_ warnings: [String]) {
        for warning in warnings { logger.warning("\(warning)") }
    }
}
