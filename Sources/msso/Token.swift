import ArgumentParser
import FoundationEssentials
import Glibc
import MSSOClient

struct Token: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Print the group's access token, for tools that take one (curl, kubectl, scripts).",
        discussion: """
            curl --oauth2-bearer "$(msso token)" https://api.example.com/me
            As a kubectl credential plugin (kubeconfig `user.exec`): command msso, args [token, \
            --group, G, --format, kubernetes]; the apiVersion is taken from KUBERNETES_EXEC_INFO.
            Only for groups whose tokens are bearer tokens; the broker refreshes the token first \
            when it is about to expire. Like `msso sign`, needs the msso command to be registered \
            for the group. When the group names `resources`, the broker hands the token out only \
            for a --resource within them (kubectl: the cluster's server, which kubectl tells the \
            plugin when its exec config says `provideClusterInfo: true`).
            """)

    @OptionGroup var options: CommonOptions

    enum Format: String, ExpressibleByArgument, CaseIterable {
        case raw, header, json, kubernetes
    }

    @Option(help: "raw (the token), header (`Authorization: Bearer …`), json (with its expiry), or kubernetes (an ExecCredential).")
    var format: Format = .raw

    @Option(help: ArgumentHelp("Where the token will be sent (an http(s) URL); needed when the group names `resources`. With --format kubernetes, the cluster's server kubectl names wins.", valueName: "url"))
    var resource: String?

    func run() throws { try Self.perform(options.values, format: format, resource: resource) }

    static func perform(_ options: Common, format: Format, resource given: String?) throws {
        try options.run { broker in
            let resource = format == .kubernetes ? try Kubernetes.resource(given: given) : given
            let token: Methods.Token.Result
            do {
                token = try broker.call(Methods.Token.self, .init(group: options.group, account: options.account, resource: resource))
            } catch let error as BrokerError where format == .kubernetes && resource == nil && error.name == .resourceForbidden {
                throw BrokerError(.resourceForbidden, error.message + "; for kubectl, set `provideClusterInfo: true` in the kubeconfig's exec section, so that kubectl names the cluster's server (msso takes no --resource from a kubeconfig's args)")
            } catch let error as BrokerError where format == .kubernetes && Kubernetes.mayLogIn && (error.name == .notLoggedIn || error.name == .expired) {
                // kubectl runs us on a terminal in interactive mode: log in, as it expects a plugin to.
                Output.error(error.message)
                try Login.interactive(broker, group: options.group, account: options.account, flow: Login.flowThatFits, quiet: false)
                token = try broker.call(Methods.Token.self, .init(group: options.group, account: options.account, resource: resource))
            }
            switch format {
            case .raw: Output.print(token.accessToken)
            case .header: Output.print(token.header == "Bearer" ? "Authorization: Bearer \(token.accessToken)" : "\(token.header): \(token.accessToken)")
            case .json:
                Output.json(["accessToken": token.accessToken, "expiresAt": String(Int(token.expiresAt)),
                             "expiresAtUTC": Kubernetes.timestamp(token.expiresAt), "header": token.header])
            case .kubernetes: Kubernetes.print(token)
            }
        }
    }
}

/// The client.authentication.k8s.io ExecCredential kubectl reads from a credential plugin.
enum Kubernetes {
    struct ExecInfo: Decodable {
        struct Spec: Decodable {
            struct Cluster: Decodable {
                var server: String?
                var insecureSkipTLSVerify: Bool?
                enum CodingKeys: String, CodingKey {
                    case server
                    case insecureSkipTLSVerify = "insecure-skip-tls-verify"
                }
            }
            var interactive: Bool?
            /// Present when the kubeconfig's exec config says `provideClusterInfo: true`.
            var cluster: Cluster?
        }
        var apiVersion: String?
        var spec: Spec?
    }

    /// Where the token goes: the cluster's server, as kubectl (≥ 1.21, which always says what it
    /// runs) names it with `provideClusterInfo: true`. Never `--resource` then: the plugin's args
    /// are the kubeconfig's, and whoever wrote it chose them (found by an outside test: a hostile
    /// kubeconfig named a listed server in them and its own as the cluster's, and got its token).
    /// Without the cluster, no resource is named (a group with `resources` then refuses, the
    /// refusal saying the fix); a cluster whose certificate is not checked gets nothing.
    static func resource(given: String?) throws -> String? {
        guard let info else { return given } // run by hand, or by a kubectl before 1.21
        guard let cluster = info.spec?.cluster, let server = cluster.server else { return nil }
        if cluster.insecureSkipTLSVerify == true {
            throw BrokerError(.resourceForbidden, "kubectl does not check the certificate of the cluster at \(server.prefix(200)) (insecure-skip-tls-verify in the kubeconfig), so the token could go to whoever answers there; msso gives it none: give the cluster its certificate-authority instead")
        }
        return root(server)
    }

    /// A cluster's server as the resource: kubectl sends every request below its URL, so one
    /// named without a path is its root (`https://k8s:6443/`), never "path unknown" (which a URL
    /// without a path means to mssod: git's helper sends one where git names no path).
    static func root(_ server: String) -> String {
        let parts = server.split(separator: "://", maxSplits: 1)
        guard parts.count == 2, !parts[1].contains(where: { "/?#".contains($0) }) else { return server }
        return server + "/"
    }

    /// What kubectl says about this run (KUBERNETES_EXEC_INFO, set by kubectl ≥ 1.21).
    static var info: ExecInfo? {
        ProcessInfo.processInfo.environment["KUBERNETES_EXEC_INFO"].flatMap { try? JSONDecoder().decode(ExecInfo.self, from: Data($0.utf8)) }
    }

    /// kubectl allows a prompt: it said so, or (older kubectl) we have a terminal to prompt on.
    static var mayLogIn: Bool {
        (info?.spec?.interactive ?? (isatty(0) == 1)) && isatty(2) == 1
    }

    static func print(_ token: Methods.Token.Result) {
        struct Credential: Encodable {
            struct Status: Encodable {
                var token: String
                var expirationTimestamp: String
            }
            var apiVersion: String
            var kind = "ExecCredential"
            var status: Status
        }
        let version = info?.apiVersion.flatMap { ["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"].contains($0) ? $0 : nil }
            ?? "client.authentication.k8s.io/v1beta1"
        Output.json(Credential(apiVersion: version, status: .init(token: token.accessToken, expirationTimestamp: timestamp(token.expiresAt))))
    }

    /// RFC 3339 in UTC: `2026-11-23T14:03:12Z`.
    static func timestamp(_ time: Double) -> String { TimeText.utc(time, "%Y-%m-%dT%H:%M:%SZ") }
}
