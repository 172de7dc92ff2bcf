import ArgumentParser
import CMSSOSystem
import FoundationEssentials
import Glibc
import Logging
import MSSOAudit
import MSSOCore
import MSSODesktop
import MSSOIdentity
import MSSOKeyring
import MSSOProtocol
import MSSOServer
import Synchronization

/// mssod: the per-user msso broker. Wiring only: the logic lives in the MSSO* modules.
@main
struct Daemon: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mssod",
        abstract: "The msso single-sign-on broker (one per user).",
        discussion: """
            Listens on $MSSO_SOCKET, else $XDG_RUNTIME_DIR/msso/broker.sock, or on the socket \
            systemd passes (msso.socket, socket activation). Reads the administrator's \
            /etc/msso/config.toml and /etc/msso/apps.d (always there: no variable or option moves \
            them), then the user's ~/.config/msso/config.toml (or $MSSO_CONFIG instead) and \
            ~/.config/msso/apps.d. An administrator's group reaches its identity provider directly \
            or through its own `proxy`; a user's group through its `proxy`, else https_proxy. \
            Logs to standard error; MSSO_LOG_LEVEL=debug shows every call (never a secret). \
            SIGHUP reloads the configuration; SIGTERM and SIGINT shut down cleanly.
            """)

    @Option(help: "The socket to listen on.")
    var socket: String?

    @Option(help: "Seconds a keyring call may take before it is reported as unavailable.")
    var keyringTimeout: Double = 5

    @Option(help: "Seconds an identity provider request may take.")
    var idpTimeout: Double = 10

    @Option(help: "Seconds a new connection has to send hello.")
    var helloTimeout: Double = 10

    @Option(help: "Seconds a frame, once begun, has to arrive whole.")
    var frameTimeout: Double = 10

    @Option(help: "Seconds after which a connection with nothing going on is closed (subscribers are exempt).")
    var idleTimeout: Double = 600

    @Flag(inversion: .prefixedNo, help: "Show desktop notifications (Expiring, Expired) when a notification server is on the session bus.")
    var notifications = true

    @Option(help: "Connections at once.")
    var maxConnections = 1024

    @Option(help: "Connections at once from any one process.")
    var maxConnectionsPerProcess = 256

    /// Not `async`: an async main ends the main thread in `dispatch_main`, whose `pthread_exit`
    /// unwinds it through the binary's unwind tables, about 600 KB of them kept resident for
    /// nothing. The main thread waits instead; nothing in mssod runs on the main actor.
    static func main() {
        Signals.blockInEveryThread()
        Hardening.name()
        // One malloc heap for all threads, set before any other starts: the reactor does nearly
        // all the allocating, and a thread that runs now and then (a reload of the registrations,
        // an identification) would otherwise leave a heap of its own resident, about 1.3 MB.
        _ = cmsso_one_heap()
        Task.detached {
            do {
                var command = try parseAsRoot()
                if var daemon = command as? Daemon {
                    try await daemon.run()
                } else {
                    try command.run() // --help, --version
                }
            } catch {
                exit(withError: error)
            }
            Glibc.exit(0)
        }
        while true { pause() } // until the task above ends the process (signals are taken by `Signals`)
    }

    mutating func run() async throws {
        Hardening.apply()
        let environment = ProcessInfo.processInfo.environment
        let level = environment["MSSO_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info
        LoggingSystem.bootstrap { label in
            var handler = EscapingLogHandler(StreamLogHandler.standardError(label: label))
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "mssod")

        let inherited = BrokerServer.socketFromSystemd(environment: environment)
        let socketPath = socket ?? SocketPath.resolve(environment: environment) // named in logs when systemd passed it
        // Before anything listens, so that no shutdown request can be lost (see Signals).
        let reloads = ReloadBox()
        let signals = Signals(reload: { await reloads.run() })
        let configuration: Configuration
        do {
            configuration = try Configuration.load(environment: environment)
        } catch let error as ConfigError {
            logger.critical("invalid configuration: \(error)")
            throw ExitCode(78) // EX_CONFIG
        }
        if configuration.groups.isEmpty {
            logger.warning("no access group configured", metadata: ["files": "\(Configuration.searchPath(environment: environment).map(\.path))"])
        }

        switch OneDaemon.claim(stateDirectory: Configuration.stateDirectory(environment: environment)) {
        case .claimed: break
        case .held(let why):
            logger.critical("not started: \(why)")
            throw ExitCode(1)
        case .unavailable(let why):
            logger.warning("serving without the lock that keeps a second mssod of this user from starting: \(why)")
        }
        let rules = Rules(configuration: configuration, logger: logger)
        let audit = Self.openAudit(environment: environment, policy: configuration.policy, logger: logger)
        // From `store` (a reload does not move sessions), chosen from now on: what `auto` finds
        // must not depend on which call comes first. Calls that need the store wait for it; the
        // rest, and a SIGTERM, do not.
        let store = ChosenStore(configuration.store, chosenIn: configuration.storeSetIn,
                                secretService: SecretServiceStore(timeout: keyringTimeout),
                                marker: Configuration.stateDirectory(environment: environment) + "/store")
        Task {
            let kept = await store.describe()
            logger.info("sessions are kept in \(kept.place): \(kept.reason)")
        }
        let identity = OpenIDProvider(logger: logger, requestTimeout: idpTimeout, environment: environment, keys: store)
        let broker = Broker(rules: rules, store: store, keys: store, identity: identity, logger: logger)
        // Beside the audit log, where a logout does not reach: the account each group logs in as.
        await broker.keepAccounts(in: AccountFile(path: Configuration.stateDirectory(environment: environment) + "/accounts.json"))
        var limits = ServerLimits()
        limits.helloTimeout = Self.nanoseconds(helloTimeout)
        limits.frameTimeout = Self.nanoseconds(frameTimeout)
        limits.idleTimeout = Self.nanoseconds(idleTimeout)
        limits.connections = maxConnections
        limits.connectionsPerProcess = maxConnectionsPerProcess
        let server: BrokerServer
        do {
            server = try BrokerServer.start(socketPath: socketPath, inheritedSocket: inherited, broker: broker, audit: audit,
                                            ownTools: Self.ownTools(), logger: logger, limits: limits)
        } catch {
            logger.critical("cannot listen: \(error)")
            await identity.shutdown() // ends the mssod-idp requests under way (but those whose answer is kept)
            throw ExitCode(1)
        }
        reloads.set {
            do {
                rules.reload(try Configuration.load(environment: ProcessInfo.processInfo.environment))
                logger.info("configuration reloaded")
            } catch {
                logger.error("configuration not reloaded: \(error)")
            }
        }
        let notifier = notifications ? await DesktopNotifier.start(broker: broker, logger: logger, environment: environment) : nil
        await server.confirmations.setAsker(notifier) // none: registrations with `confirm` are refused
        // Beside the wait for a shutdown request: a keyring that does not answer must not hold one
        // for the keyring timeout of every group.
        let preloading = Task { await broker.preload() }
        await signals.termination()
        preloading.cancel()
        withExtendedLifetime(notifier) {}
        logger.info("shutting down")
        await server.close()
        await broker.shutdown()
        await identity.shutdown()
        audit.flush()
    }

    /// `msso` and `msso-logout` installed beside this daemon: the user's own tools.
    static func ownTools() -> Set<String> {
        guard let me = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { return [] }
        let directory = AdminFiles.parent(of: me)
        return [directory + "/msso", directory + "/msso-logout"]
    }

    /// Seconds from an option, as nanoseconds (at least 1 ms, at most a year).
    static func nanoseconds(_ seconds: Double) -> UInt64 {
        UInt64(min(max(seconds.isFinite ? seconds : 1, 0.001), 366 * 86400) * 1_000_000_000)
    }

    /// The audit log in `$XDG_STATE_HOME/msso/audit.sqlite`. One that cannot be opened does not
    /// stop mssod (refusing every app because a log file is unwritable helps nobody): it says so
    /// (its log, `msso doctor`, `msso status`) and opens it once it can (AuditLog).
    static func openAudit(environment: [String: String], policy: Policy, logger: Logger) -> AuditLog {
        AuditLog(path: Configuration.stateDirectory(environment: environment) + "/audit.sqlite",
                 maxRows: policy.auditMaxRows, maxAge: policy.auditMaxAge, logger: logger)
    }
}

/// The SIGHUP action, set once the parts it reloads exist (a SIGHUP before that does nothing).
final class ReloadBox: Sendable {
    private let action = Mutex<(@Sendable () async -> Void)?>(nil)
    func set(_ action: @escaping @Sendable () async -> Void) { self.action.withLock { $0 = action } }
    func run() async { await action.withLock({ $0 })?() }
}
