import Foundation
import Logging
import MSSOCore
import NIOConcurrencyHelpers

/// The rules in force: the configuration and the app registrations. Registrations are re-read
/// when an `apps.d` file changes (checked as each connection arrives), so `msso apps allow` takes
/// effect for the next connection; the configuration is re-read on SIGHUP.
public final class Rules: Sendable {
    private struct State {
        var configuration: Configuration
        var entitlements: Entitlements
        var fingerprint: [String]
    }
    private let state: NIOLockedValueBox<State>
    private let logger: Logger

    public init(configuration: Configuration, logger: Logger) throws {
        self.logger = logger
        state = NIOLockedValueBox(State(configuration: configuration, entitlements: try Self.entitlements(configuration),
                                        fingerprint: Self.fingerprint(configuration)))
    }

    public var configuration: Configuration { state.withLockedValue { $0.configuration } }
    public var entitlements: Entitlements { state.withLockedValue { $0.entitlements } }

    /// Takes a new configuration (SIGHUP) and re-reads the registrations.
    public func reload(_ configuration: Configuration) throws {
        let entitlements = try Self.entitlements(configuration)
        state.withLockedValue {
            $0 = State(configuration: configuration, entitlements: entitlements, fingerprint: Self.fingerprint(configuration))
        }
    }

    /// Re-reads the registrations if an `apps.d` file was added, removed or changed. A broken file
    /// keeps the rules as they were (and says so in the log).
    func refreshIfChanged() {
        let configuration = self.configuration
        let now = Self.fingerprint(configuration)
        guard now != state.withLockedValue({ $0.fingerprint }) else { return }
        do {
            let entitlements = try Self.entitlements(configuration)
            state.withLockedValue {
                $0.entitlements = entitlements
                $0.fingerprint = now
            }
            logger.info("app registrations reloaded", metadata: ["apps": "\(entitlements.registrations.count)"])
        } catch {
            logger.error("app registrations not reloaded: \(error)")
        }
    }

    private static func entitlements(_ configuration: Configuration) throws -> Entitlements {
        try Entitlements.load(systemDirectory: configuration.systemDirectory, userDirectory: configuration.userDirectory,
                              userApps: configuration.policy.userApps)
    }

    /// Name, size and modification time of every `apps.d` file.
    private static func fingerprint(_ configuration: Configuration) -> [String] {
        [configuration.systemDirectory, configuration.userDirectory].flatMap { directory -> [String] in
            let appsDirectory = directory + "/apps.d"
            let names = (try? FileManager.default.contentsOfDirectory(atPath: appsDirectory)) ?? []
            return names.sorted().map { name in
                var info = stat()
                stat(appsDirectory + "/" + name, &info)
                return "\(appsDirectory)/\(name):\(info.st_size):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
            }
        }
    }
}
