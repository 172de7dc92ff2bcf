import ArgumentParser
import Foundation
import Logging
import MSSOAudit
import MSSOClient
import MSSOCore
import MSSOIdentity
import MSSOKeyring
import MSSOServer
import MSSOSigning

/// msso-bench: how fast `sign` is over the real socket, beside a `ping` floor on the same machinery.
///
/// Runs the daemon's own server in-process on a temporary socket, with the real keyring store and
/// the real IdP client wrapped in counters, logs in once, then measures. Needs a Secret Service
/// and an OpenID Connect provider (scripts/bench provides private ones).
@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "msso-bench",
                                                    abstract: "Measure sign latency and throughput against the ping floor.")

    @Option(help: "The identity provider's issuer URL.") var issuer: String
    @Option(help: "A file holding the client secret.") var clientSecretFile: String
    @Option(help: "The user to log in as (password read from standard input).") var username: String
    @Option(help: "Sequential calls per latency measurement.") var calls = 20000
    @Option(help: "Seconds per throughput measurement.") var seconds = 2.0

    func run() async throws {
        guard let password = readLine(), !password.isEmpty else { throw ValidationError("give the password on standard input") }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("msso-bench-\(getpid())").path
        let socket = directory + "/broker.sock"
        umask(0o077)
        let logger = Logger(label: "msso-bench")
        // One group per signing profile, all against the same IdP.
        let profiles = ["bearer", "dpop", "http-signature", "dpop+http-signature"]
        let groups = profiles.map { profile -> GroupConfig in
            var group = GroupConfig(name: profile == "bearer" ? "bench" : "bench-\(profile)", issuer: issuer, clientID: "msso")
            group.clientSecret = .file(clientSecretFile)
            group.scopes = ["openid", "app1"]
            group.signing = SigningProfile(configValue: profile)!
            return group
        }
        let store = CountingStore(SecretServiceStore())
        let identity = CountingIdP(OpenIDProvider(logger: logger))
        // The bench registers itself for the group, as an admin would register an app, and audits
        // every call as mssod does: the hot path measured is the real one.
        var configuration = Configuration(groups: groups)
        configuration.systemDirectory = directory + "/etc"
        configuration.userDirectory = directory + "/user"
        try FileManager.default.createDirectory(atPath: directory + "/etc/apps.d", withIntermediateDirectories: true)
        let me = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let names = groups.map { "\"\($0.name)\"" }.joined(separator: ", ")
        try "[apps.bench]\nexecutable = \"\(me)\"\ngroups = [\(names)]\n".write(toFile: directory + "/etc/apps.d/bench.toml",
                                                                                   atomically: true, encoding: .utf8)
        let audit = try AuditLog(path: directory + "/audit.sqlite")
        let broker = Broker(rules: Rules(configuration: configuration, logger: logger), store: store, keys: SecretServiceStore(),
                            identity: identity, logger: logger)
        let server = try BrokerServer.start(socketPath: socket, broker: broker, audit: audit, logger: logger)
        defer { try? FileManager.default.removeItem(atPath: directory) }

        let client = try await SSOClient.connect(socketPath: socket)
        for group in groups { _ = try await client.login(group: group.name, username: username, password: password) }
        let request = (method: "GET", url: "https://api.example.com/v1/items?page=2")
        for _ in 0..<2000 { _ = try await client.sign(method: request.method, url: request.url, group: "bench"); _ = try await client.ping("x") }

        let before = (store.calls.count, identity.calls.count)
        let ping = try await latency(calls) { _ = try await client.ping("x") }
        let sign = try await latency(calls) { _ = try await client.sign(method: request.method, url: request.url, group: "bench") }
        print("latency, one client, \(calls) sequential calls over the socket:")
        print(String(format: "  ping (floor)  p50 %7.1f µs   p99 %7.1f µs", ping.p50, ping.p99))
        print(String(format: "  sign (bearer) p50 %7.1f µs   p99 %7.1f µs   p50 = %.2f × floor", sign.p50, sign.p99, sign.p50 / ping.p50))
        var worstP99 = sign.p99
        for group in groups.dropFirst() {
            let body = Data(#"{"hello": "world"}"#.utf8)
            let profile = try await latency(calls / 4) {
                _ = try await client.sign(method: "POST", url: request.url, headers: [Header("Content-Type", "application/json")],
                                          body: Array(body), group: group.name)
            }
            worstP99 = max(worstP99, profile.p99)
            print(String(format: "  sign (%@) p50 %7.1f µs   p99 %7.1f µs", "\(group.signing)", profile.p50, profile.p99))
        }

        print("throughput, \(seconds) s per run, one connection per client:")
        for clients in [1, 8, 32] {
            let connections = try await (0..<clients).asyncMap { _ in try await SSOClient.connect(socketPath: socket) }
            let pings = try await throughput(connections) { _ = try await $0.ping("x") }
            let signs = try await throughput(connections) { _ = try await $0.sign(method: request.method, url: request.url, group: "bench") }
            print(String(format: "  %2d clients   ping %8.0f calls/s   sign %8.0f calls/s", clients, pings, signs))
            for connection in connections { await connection.close() }
        }
        let during = (store.calls.count - before.0, identity.calls.count - before.1)
        print("keyring calls during the sign runs: \(during.0); identity provider calls: \(during.1)")

        let targets = [
            ("sign p50 within 3 × the ping floor", sign.p50 <= 3 * ping.p50),
            ("sign p99 under 1 ms (bearer)", sign.p99 < 1000),
            ("sign p99 under 1 ms (every profile)", worstP99 < 1000),
            ("no keyring or IdP call on the hot path", during == (0, 0)),
        ]
        for (name, met) in targets { print("target: \(name): \(met ? "met" : "NOT MET")") }

        _ = try await client.logoutAll()
        await client.close()
        await server.close()
    }

    private func latency(_ count: Int, _ body: () async throws -> Void) async throws -> (p50: Double, p99: Double) {
        var samples = [Double]()
        samples.reserveCapacity(count)
        let clock = ContinuousClock()
        for _ in 0..<count {
            let elapsed = try await clock.measure { try await body() }
            samples.append(Double(elapsed.components.attoseconds) / 1e12 + Double(elapsed.components.seconds) * 1e6)
        }
        samples.sort()
        return (samples[count / 2], samples[count * 99 / 100])
    }

    private func throughput(_ clients: [SSOClient], _ body: @escaping @Sendable (SSOClient) async throws -> Void) async throws -> Double {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        let total = try await withThrowingTaskGroup(of: Int.self) { tasks in
            for client in clients {
                tasks.addTask {
                    var done = 0
                    while ContinuousClock.now < deadline {
                        try await body(client)
                        done += 1
                    }
                    return done
                }
            }
            return try await tasks.reduce(0, +)
        }
        return Double(total) / seconds
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var out = [T]()
        for element in self { out.append(try await transform(element)) }
        return out
    }
}
