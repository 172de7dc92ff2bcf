import FoundationEssentials
import Glibc
import MSSOProtocol
import MSSOSigning

/// A configuration problem, located precisely enough to fix: file, line and key.
public struct ConfigError: Error, Equatable, CustomStringConvertible {
    public let file: String
    public let line: Int?
    public let key: String?
    public let problem: String

    public var description: String {
        var out = file
        if let line { out += ":\(line)" }
        if let key { out += ": `\(key)`" }
        return out + ": " + problem
    }
}

/// The admin's rules, read from the admin's config file only (a user cannot lift them).
public struct Policy: Equatable, Sendable {
    /// Whether the user's `apps.d` may register apps.
    public var userApps = true
    public var auditMaxRows = 100_000
    public var auditMaxAge: Double = 90 * 86400
    /// Whether `msso ssh` may make the broker reachable from remote hosts (`[forward."HOST"]`
    /// tables); false refuses every forward, whatever the user's file says.
    public var forwarding = true
    public init() {}
}

/// Where mssod keeps credentials and signing keys: the file's top-level `store`.
public enum StorePreference: String, Sendable, Equatable, CaseIterable {
    /// The Secret Service when one answers on the session bus with its default keyring unlocked,
    /// else the kernel keyring; chosen once, at the first use.
    case auto
    /// The Secret Service only: without one, every verb that needs the store fails, saying so.
    case secretService = "secret-service"
    /// The kernel keyring only (keyrings(7)), even where a Secret Service runs.
    case kernel
}

/// The broker's configuration: the access groups and the admin's policy, from TOML files.
///
/// The admin's directory, ``administratorDirectory`` (`/etc/msso`, fixed when msso is built),
/// holds `config.toml` and `apps.d/`; so does the user's (`$XDG_CONFIG_HOME/msso`). The admin's
/// files count as the admin's only when root owns them and the directories above them
/// (``AdminFiles``); otherwise they are ignored, with a warning. `[policy]` is read from the
/// admin's file only. The user's file may add groups, never redefine one of the admin's (its
/// issuer, client or policy). `MSSO_CONFIG` names a file to read instead of the user's
/// `config.toml`, never instead of the admin's: whoever sets the daemon's environment is the user,
/// so nothing in it may move, hide or replace the administrator's files. Only a build made for
/// the tests (`MSSO_TEST_PATHS`, defined for debug builds) takes the admin's directory from
/// `$MSSO_SYSTEM_DIR`.
public struct Configuration: Equatable, Sendable {
    public var groups: [String: GroupConfig]
    /// What each remote host may do through an SSH forward, by host (``ForwardRule``).
    public var forwards: [String: ForwardRule] = [:]
    public var policy = Policy()
    public var systemDirectory = Configuration.administratorDirectory
    public var userDirectory = "~/.config/msso"
    public var store = StorePreference.auto
    /// The file whose `store` is in force (nil: the default, `auto`).
    public var storeSetIn: String?
    /// What was ignored while reading, each in a sentence naming the file and the fix.
    public var warnings: [String] = []

    public init(groups: [GroupConfig]) {
        self.groups = Dictionary(groups.map { ($0.name, $0) }, uniquingKeysWith: { _, last in last })
    }

    /// Where the administrator's `config.toml` and `apps.d/` are: fixed when msso is built.
    public static let administratorDirectory = "/etc/msso"

    /// Whether this build takes the administrator's directory from `$MSSO_SYSTEM_DIR`: only one
    /// made for the tests (debug builds define `MSSO_TEST_PATHS`; a release build never does).
    #if MSSO_TEST_PATHS
    public static let testPaths = true
    #else
    public static let testPaths = false
    #endif

    /// The admin's and the user's configuration directories. `testPaths` is the build's
    /// (``testPaths``); the tests pass `false` to check what a release build reads.
    public static func directories(environment: [String: String], testPaths: Bool = Configuration.testPaths)
        -> (system: String, user: String) {
        let home = environment["HOME"] ?? homeDirectory()
        let userConfig = environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.config"
        let override = testPaths ? environment["MSSO_SYSTEM_DIR"].flatMap { $0.isEmpty ? nil : $0 } : nil
        return (override ?? administratorDirectory, userConfig + "/msso")
    }

    /// msso's own state (the audit log, where sessions are kept): `$XDG_STATE_HOME/msso`, by
    /// default `~/.local/state/msso`.
    public static func stateDirectory(environment: [String: String]) -> String {
        let home = environment["HOME"] ?? homeDirectory()
        return (environment["XDG_STATE_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.local/state") + "/msso"
    }

    /// The home directory of the user this process runs as, from the password database.
    public static func homeDirectory() -> String {
        guard let entry = getpwuid(getuid()), let directory = entry.pointee.pw_dir else { return "/" }
        return String(cString: directory)
    }

    /// The files read, in order, each with whether it is the admin's: the admin's `config.toml`
    /// always, then the user's (or `$MSSO_CONFIG`, which is the user's whoever owns it).
    public static func searchPath(environment: [String: String], testPaths: Bool = Configuration.testPaths)
        -> [(path: String, admin: Bool)] {
        let (system, user) = directories(environment: environment, testPaths: testPaths)
        let admin = system + "/config.toml"
        guard let only = environment["MSSO_CONFIG"], !only.isEmpty else { return [(admin, true), (user + "/config.toml", false)] }
        // The admin's own file named again: read once, as the admin's.
        if let resolved = AdminFiles.realPath(only), resolved == AdminFiles.realPath(admin) { return [(admin, true)] }
        return [(admin, true), (only, false)]
    }

    /// The biggest config.toml read.
    public static let maximumFileSize = 1 << 20

    /// Reads every existing file of the search path. A missing file is skipped, as is an admin's
    /// file root does not own (with a warning); a malformed one throws.
    public static func load(environment: [String: String], testPaths: Bool = Configuration.testPaths) throws -> Configuration {
        var groups: [String: GroupConfig] = [:]
        var forwards: [String: ForwardRule] = [:]
        var policy = Policy()
        var warnings: [String] = []
        var store: (StorePreference, String)?
        for (path, admin) in searchPath(environment: environment, testPaths: testPaths) {
            guard let text = try AdminFiles.text(of: path, admin: admin, maximumSize: maximumFileSize, warnings: &warnings) else { continue }
            let (fileGroups, filePolicy, fileStore, fileForwards) = try parseFile(text, file: path, admin: admin)
            if let fileStore {
                if let (chosen, file) = store, chosen != fileStore {
                    warnings.append("\(path): `store = \"\(fileStore.rawValue)\"` is ignored: the administrator's \(file) sets `store = \"\(chosen.rawValue)\"`")
                } else if store == nil {
                    store = (fileStore, path)
                }
            }
            for group in fileGroups {
                if !admin, let theirs = groups[group.name], theirs.admin {
                    warnings.append("\(path): group \"\(group.name)\" is the administrator's; a user's file cannot redefine it, so this table is ignored")
                    continue
                }
                groups[group.name] = group
            }
            for rule in fileForwards {
                // As with groups: the administrator's table for a host stands over the user's.
                if !admin, let theirs = forwards[rule.host], theirs.admin {
                    warnings.append("\(rule.source): [forward.\"\(rule.host)\"] is ignored: the administrator's \(theirs.source) sets what that host may do")
                    continue
                }
                forwards[rule.host] = rule
            }
            if let filePolicy { policy = filePolicy }
        }
        for rule in forwards.values.sorted(by: { $0.host < $1.host }) {
            for group in rule.groups where groups[group] == nil {
                warnings.append("\(rule.source): [forward.\"\(rule.host)\"] names group \"\(group)\", which is not configured")
            }
            // Any program of the user can open a forward (it runs `msso ssh` with an ssh of its
            // own), so a user's table naming an administrator's group would be a registration the
            // administrator's policy never allowed: only the administrator's tables reach them.
            let theirs = rule.admin ? [] : rule.groups.filter { groups[$0]?.admin == true }
            if !theirs.isEmpty {
                warnings.append("\(rule.source): [forward.\"\(rule.host)\"] cannot name the administrator's group\(theirs.count == 1 ? "" : "s") \(theirs.map { "\"\($0)\"" }.joined(separator: ", ")): only a [forward] table in the administrator's config.toml can")
                forwards[rule.host]?.groups.removeAll { theirs.contains($0) }
            }
        }
        if !testPaths, let ignored = environment["MSSO_SYSTEM_DIR"], !ignored.isEmpty, ignored != administratorDirectory {
            warnings.append("MSSO_SYSTEM_DIR=\(ignored) is ignored: mssod reads the administrator's files from \(administratorDirectory) only (a debug build made for msso's tests reads the variable)")
        }
        var configuration = Configuration(groups: Array(groups.values))
        configuration.policy = policy
        configuration.forwards = forwards
        configuration.warnings = warnings
        if let (chosen, file) = store { (configuration.store, configuration.storeSetIn) = (chosen, file) }
        (configuration.systemDirectory, configuration.userDirectory) = directories(environment: environment, testPaths: testPaths)
        return configuration
    }

    /// The group named `name`, or the only configured group when `name` is nil.
    public func group(named name: String?) throws(BrokerError) -> GroupConfig {
        if let name {
            guard let config = groups[name] else {
                throw BrokerError(.unknownGroup, "no access group named \"\(name)\" is configured; `msso status` lists the configured groups")
            }
            return config
        }
        switch groups.count {
        case 1: return groups.values.first!
        case 0: throw BrokerError(.configInvalid, "no access group is configured; add one to ~/.config/msso/config.toml (see the README)")
        default:
            throw BrokerError(.badRequest, "several access groups are configured (\(groups.keys.sorted().joined(separator: ", "))): name one with --group")
        }
    }

    /// Parses one file's groups.
    public static func parse(_ text: String, file: String) throws -> [GroupConfig] {
        try parseFile(text, file: file, admin: true).groups
    }

    /// Parses one file's `[forward."HOST"]` tables.
    public static func parseForwards(_ text: String, file: String, admin: Bool = false) throws -> [ForwardRule] {
        try parseFile(text, file: file, admin: admin).forwards
    }

    /// Parses one file: its groups, its policy when it is the admin's, and its forward tables.
    static func parseFile(_ text: String, file: String, admin: Bool) throws
        -> (groups: [GroupConfig], policy: Policy?, store: StorePreference?, forwards: [ForwardRule]) {
        let document = try TOMLSubset.parse(text, file: file)
        var groups: [GroupConfig] = []
        var policy: Policy?
        var store: StorePreference?
        var forwards: [ForwardRule] = []
        for table in document {
            let fail = { (line: Int?, key: String?, problem: String) in
                ConfigError(file: file, line: line, key: key, problem: problem)
            }
            if table.path.isEmpty {
                for (key, value) in table.values.sorted(by: { $0.value.line < $1.value.line }) {
                    guard key == "store" else { throw fail(value.line, key, "keys must be inside a [groups.\"NAME\"] table (the only key before the first table is `store`)") }
                    let text = try value.string(fail, key)
                    guard let chosen = StorePreference(rawValue: text) else {
                        throw fail(value.line, key, "expected \(StorePreference.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")), got \"\(text)\"")
                    }
                    store = chosen
                }
                continue
            }
            if table.path == ["policy"] {
                guard admin else { throw fail(table.line, nil, "only the administrator's config.toml may set [policy]") }
                policy = try parsePolicy(table, fail)
                continue
            }
            if table.path.first == "forward" {
                let rule = try parseForward(table, file: file, admin: admin, fail)
                if let twice = forwards.first(where: { $0.host == rule.host }) {
                    throw fail(table.line, nil, "host \"\(rule.host)\" already has a table, at line \(twice.source.split(separator: ":").last ?? "?") (host names compare without case)")
                }
                forwards.append(rule)
                continue
            }
            if table.path.count == 3, table.path[0] == "groups", table.path[2] == "audiences" || table.path[2] == "resource_scopes" {
                try parseServerNames(table, into: &groups, fail)
                continue
            }
            guard table.path.count == 2, table.path[0] == "groups" else {
                throw fail(table.line, nil, "unknown table [\(table.path.joined(separator: "."))]; groups are written [groups.\"NAME\"]")
            }
            let name = table.path[1]
            // A name is matched, stored and shown as text: nothing a terminal or a C string reads otherwise.
            guard !name.isEmpty, !name.unicodeScalars.contains(where: { $0.value < 0x20 || (0x7F...0x9F).contains($0.value) }) else {
                throw fail(table.line, nil, "a group name must not be empty or hold control characters")
            }
            guard let issuer = table.values["issuer"] else { throw fail(table.line, "issuer", "group \"\(name)\" needs an issuer URL") }
            guard let clientID = table.values["client_id"] else { throw fail(table.line, "client_id", "group \"\(name)\" needs a client_id") }
            var group = GroupConfig(name: name, issuer: try issuer.string(fail, "issuer"), clientID: try clientID.string(fail, "client_id"))
            group.admin = admin
            guard let url = URL(string: group.issuer), url.scheme == "https" || url.scheme == "http", url.host != nil else {
                throw fail(issuer.line, "issuer", "expected an http(s) URL, got \"\(group.issuer)\"")
            }
            if url.scheme == "http", !Loopback.isHost(url.host!) {
                throw fail(issuer.line, "issuer", "plain http is allowed only on loopback; use https")
            }
            for (key, value) in table.values.sorted(by: { $0.value.line < $1.value.line }) {
                switch key {
                case "issuer", "client_id":
                    break
                case "client_secret":
                    group.clientSecret = .inline(try value.string(fail, key))
                case "client_secret_file":
                    var path = try value.string(fail, key)
                    if !path.hasPrefix("/") { path = AdminFiles.parent(of: file) + "/" + path }
                    group.clientSecret = .file(path)
                case "client_key":
                    var path = try value.string(fail, key)
                    if !path.hasPrefix("/") { path = AdminFiles.parent(of: file) + "/" + path }
                    group.clientKeyFile = path
                case "token_endpoint_auth_method":
                    let text = try value.string(fail, key)
                    guard let method = ClientAuthentication(rawValue: text) else {
                        throw fail(value.line, key, "expected one of \(ClientAuthentication.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")), got \"\(text)\"")
                    }
                    group.clientAuthentication = method
                case "prompt":
                    let text = try value.string(fail, key)
                    let words = text.split(separator: " ")
                    guard words.allSatisfy({ ["none", "login", "consent", "select_account"].contains($0) }), !(words.contains("none") && words.count > 1) else {
                        throw fail(value.line, key, "expected \"login\", \"consent\", \"select_account\" (or several, space-separated), \"none\", or \"\" to send no prompt; got \"\(text)\"")
                    }
                    group.prompt = words.joined(separator: " ")
                case "ca_file":
                    var path = try value.string(fail, key)
                    if !path.hasPrefix("/") { path = AdminFiles.parent(of: file) + "/" + path }
                    group.caFile = path
                case "scopes":
                    group.scopes = try value.strings(fail, key)
                case "session_timeout":
                    group.sessionTimeout = try value.duration(fail, key)
                case "session_max":
                    group.sessionMax = try value.duration(fail, key)
                case "refresh_lead":
                    group.refreshLead = try value.duration(fail, key)
                case "expiring_lead":
                    group.expiringLead = try value.duration(fail, key)
                case "browser_timeout":
                    group.browserTimeout = try value.duration(fail, key)
                case "redirect_uri":
                    let text = try value.string(fail, key)
                    guard let url = URL(string: text), url.scheme == "http", url.host == "127.0.0.1" else {
                        // The listener serves 127.0.0.1 alone: it tells the user's connections from other
                        // users' through IPv4 sockets only, so an [::1] or localhost URI would be a
                        // promise it cannot keep.
                        throw fail(value.line, key, "expected a loopback http URL on 127.0.0.1 such as http://127.0.0.1:4600/callback (RFC 8252); msso's redirect listener serves 127.0.0.1 only, so register that address at the IdP")
                    }
                    group.redirectURI = text
                case "sign":
                    let text = try value.string(fail, key)
                    guard let profile = SigningProfile(configValue: text) else {
                        throw fail(value.line, key, "expected \"bearer\", \"header:NAME\", \"dpop\" or \"http-signature\" (or e.g. \"dpop+http-signature\"), got \"\(text)\"")
                    }
                    group.signing = profile
                case "key":
                    let text = try value.string(fail, key)
                    guard let kind = SigningKey.Kind(rawValue: text) else {
                        throw fail(value.line, key, "expected \"p-256\" or \"ed25519\", got \"\(text)\"")
                    }
                    group.keyKind = kind
                case "proxy":
                    let text = try value.string(fail, key)
                    guard Self.isProxyURL(text) else {
                        throw fail(value.line, key, "expected a proxy URL such as \"http://proxy.example.com:3128\" or \"socks5://proxy.example.com:1080\", got \"\(text)\"")
                    }
                    group.proxy = text
                case "notifications":
                    guard case .boolean(let on) = value.kind else { throw fail(value.line, key, "expected true or false") }
                    group.notifications = on
                case "resources":
                    do { group.resources = try Resources(try value.strings(fail, key)) } catch let problem as Resources.Problem {
                        throw fail(value.line, key, problem.message)
                    }
                case "tokens":
                    let text = try value.string(fail, key)
                    guard let tokens = TokenScope(rawValue: text) else {
                        throw fail(value.line, key, "expected \"shared\" (one token for every server of the group) or \"per-resource\" (a token minted for each entry of `resources`), got \"\(text)\"")
                    }
                    group.tokens = tokens
                case "default_account":
                    let text = try value.string(fail, key)
                    if let problem = AccountName.problem(text) { throw fail(value.line, key, problem) }
                    group.defaultAccount = text
                case "token_request":
                    let text = try value.string(fail, key)
                    guard let request = TokenRequest(rawValue: text) else {
                        throw fail(value.line, key, "expected \"resource\" (RFC 8707 resource indicators on the refresh grant) or \"exchange\" (RFC 8693 token exchange), got \"\(text)\"")
                    }
                    group.tokenRequest = request
                case _ where !admin && (key == "account" || key == "account_claim"):
                    // The user's own rule would bind nobody: whoever can write the file can change it.
                    throw fail(value.line, key, "only a group of the administrator's config.toml may set `\(key)`; a group of your own remembers the account it logs in as (see msso(1), --new-account)")
                case "account":
                    let text = try value.string(fail, key)
                    guard let rule = AccountRule(rawValue: text) else {
                        throw fail(value.line, key, "expected \"login-user\" (the ID token's `account_claim` must be the login name of the user), got \"\(text)\"")
                    }
                    group.account = rule
                case "account_claim":
                    let text = try value.string(fail, key)
                    guard AccountFile.isSound(text, maximumBytes: 255) else {
                        throw fail(value.line, key, "expected the name of an ID token claim, such as \"preferred_username\"")
                    }
                    group.accountClaim = text
                default:
                    throw fail(value.line, key, "unknown key in group \"\(name)\"")
                }
            }
            if table.values["client_secret"] != nil, table.values["client_secret_file"] != nil {
                throw fail(table.values["client_secret"]!.line, "client_secret", "give client_secret or client_secret_file, not both")
            }
            switch group.clientAuthentication {
            // (One pattern with the condition: in `case A, B where C` the condition guards B alone.)
            case let method? where (method == .clientSecretBasic || method == .clientSecretPost) && group.clientSecret == .none:
                throw fail(table.values["token_endpoint_auth_method"]!.line, "token_endpoint_auth_method", "\(group.clientAuthentication!.rawValue) needs client_secret or client_secret_file")
            case .privateKeyJWT? where group.clientSecret != .none:
                throw fail(table.values["token_endpoint_auth_method"]!.line, "token_endpoint_auth_method", "private_key_jwt sends no client secret: remove it (the key is client_key, else the group's own key that `msso keys` shows)")
            case ClientAuthentication.none? where group.clientSecret != .none || group.clientKeyFile != nil:
                throw fail(table.values["token_endpoint_auth_method"]!.line, "token_endpoint_auth_method", "\"none\" is for a public client: remove the client secret and client_key, or choose the method the IdP registered")
            default: break
            }
            if group.clientKeyFile != nil, group.clientSecret != .none {
                throw fail(table.values["client_key"]!.line, "client_key", "give a client secret or client_key, not both")
            }
            if table.values["account_claim"] != nil, group.account == nil {
                throw fail(table.values["account_claim"]!.line, "account_claim", "does nothing without `account = \"login-user\"`")
            }
            if group.tokens == .perResource, group.resources == nil {
                throw fail(table.values["tokens"]!.line, "tokens", "\"per-resource\" mints a token for each entry of `resources`, and the group names none; list the servers its tokens are for in `resources`")
            }
            if group.tokens == .perResource, let problem = group.resources?.entryProblemWherePathsShareAServer() {
                throw fail(table.values["resources"]?.line ?? table.line, "resources", problem)
            }
            if let request = table.values["token_request"], group.tokens != .perResource {
                throw fail(request.line, "token_request", "does nothing without `tokens = \"per-resource\"`")
            }
            if group.sessionMax < group.sessionTimeout {
                throw fail(table.values["session_max"]?.line ?? table.line, "session_max", "must not be shorter than session_timeout")
            }
            groups.append(group)
        }
        return (groups, policy, store, forwards)
    }

    /// `[groups."NAME".audiences]` and `[groups."NAME".resource_scopes]`: for an entry of the
    /// group's `resources`, the name its provider knows that server by, when a token is minted for
    /// it: the `audience` sent (Keycloak's client id, Auth0's API identifier), or the scope sent in
    /// place of `resource` (Entra ID's `api://…/.default`).
    static func parseServerNames(_ table: TOMLSubset.Table, into groups: inout [GroupConfig],
                                 _ fail: (Int?, String?, String) -> ConfigError) throws {
        let (name, kind) = (table.path[1], table.path[2])
        guard let index = groups.lastIndex(where: { $0.name == name }) else {
            throw fail(table.line, nil, "[groups.\"\(name)\".\(kind)] must come after the group's own table [groups.\"\(name)\"]")
        }
        guard groups[index].tokens == .perResource, let resources = groups[index].resources else {
            throw fail(table.line, nil, "\(kind) are asked for only when the group mints a token per server: set `tokens = \"per-resource\"` and `resources` in [groups.\"\(name)\"]")
        }
        for (entry, value) in table.values.sorted(by: { $0.value.line < $1.value.line }) {
            guard resources.entries.contains(entry) else {
                throw fail(value.line, entry, "is not an entry of the group's `resources` (\(resources.entries.joined(separator: ", "))); name the entry as written there")
            }
            let named = try value.string(fail, entry)
            guard !named.isEmpty, named.utf8.count <= 1024, !named.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }),
                  kind == "audiences" || !named.contains(" ") else {
                throw fail(value.line, entry, kind == "audiences"
                    ? "expected the audience the identity provider knows the server by, such as \"kubernetes\""
                    : "expected the one scope the identity provider knows the server by, such as \"api://kubernetes/.default\"")
            }
            if kind == "audiences" { groups[index].audiences[entry] = named } else { groups[index].resourceScopes[entry] = named }
        }
    }

    /// One `[forward."HOST"]` table: `groups` (required), `verbs`, `confirm`.
    static func parseForward(_ table: TOMLSubset.Table, file: String, admin: Bool,
                             _ fail: (Int?, String?, String) -> ConfigError) throws -> ForwardRule {
        guard table.path.count == 2, let host = ForwardHost.normalized(table.path[1]) else {
            throw fail(table.line, nil, "expected [forward.\"HOST\"], HOST as you give it to ssh without a user name: letters, digits, `.`, `-`, `_` and `:`, at most \(ForwardHost.maximumLength) bytes")
        }
        guard let listed = table.values["groups"] else {
            throw fail(table.line, "groups", "[forward.\"\(host)\"] must name the access groups the host may use, like groups = [\"com.example.suite\"]")
        }
        let groups = try listed.strings(fail, "groups")
        guard !groups.isEmpty else { throw fail(listed.line, "groups", "names no group; remove the table to forward nothing to \(host)") }
        var rule = ForwardRule(host: host, groups: groups, source: "\(file):\(table.line)", admin: admin)
        for (key, value) in table.values.sorted(by: { $0.value.line < $1.value.line }) {
            switch key {
            case "groups":
                break
            case "verbs":
                var verbs = Set<CallArguments.Kind>()
                for name in try value.strings(fail, key) {
                    guard let kind = CallArguments.Kind(rawValue: name), ForwardRule.allowedVerbs.contains(kind) else {
                        let allowed = ForwardRule.allowedVerbs.map(\.rawValue).sorted().joined(separator: ", ")
                        let never = CallArguments.Kind(rawValue: name) != nil || ["logout --all", "unlock"].contains(name)
                        throw fail(value.line, key, never
                            ? "\"\(name)\" is never allowed from a forwarded host; the verbs a host may have are \(allowed)"
                            : "unknown verb \"\(name)\"; expected some of \(allowed)")
                    }
                    verbs.insert(kind)
                }
                rule.verbs = verbs
            case "confirm":
                guard case .boolean(let on) = value.kind else { throw fail(value.line, key, "expected true or false") }
                rule.confirm = on
            case "accounts":
                let accounts = try value.strings(fail, key)
                guard !accounts.isEmpty else { throw fail(value.line, key, "names no account; leave it out to let the host use any") }
                if let problem = accounts.lazy.compactMap(AccountName.problem).first { throw fail(value.line, key, problem) }
                rule.accounts = accounts
            default:
                throw fail(value.line, key, "unknown key in [forward.\"\(host)\"]; expected groups, verbs, confirm, accounts")
            }
        }
        return rule
    }

    /// `http://[user:password@]host:port` (also `https://`, which names the same plain connection to
    /// the proxy, as curl reads it), `socks5://host:port` or `socks5h://host:port`.
    static func isProxyURL(_ text: String) -> Bool {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(),
              ["http", "https", "socks5", "socks5h"].contains(scheme),
              let host = url.host, !host.isEmpty, url.port.map({ (1...65535).contains($0) }) ?? true,
              url.path.isEmpty || url.path == "/", url.query == nil, url.fragment == nil else { return false }
        return true
    }

    static func parsePolicy(_ table: TOMLSubset.Table, _ fail: (Int?, String?, String) -> ConfigError) throws -> Policy {
        var policy = Policy()
        for (key, value) in table.values {
            switch (key, value.kind) {
            case ("user_apps", .boolean(let allowed)): policy.userApps = allowed
            case ("forwarding", .boolean(let allowed)): policy.forwarding = allowed
            case ("forwarding", _): throw fail(value.line, key, "expected true or false")
            case ("audit_max_rows", .integer(let rows)) where rows > 0 && rows <= 100_000_000: policy.auditMaxRows = rows
            case ("audit_max_age", _): policy.auditMaxAge = try value.duration(fail, key)
            case ("user_apps", _): throw fail(value.line, key, "expected true or false")
            case ("audit_max_rows", _): throw fail(value.line, key, "expected a whole number from 1 to 100000000")
            default: throw fail(value.line, key, "unknown key in [policy]")
            }
        }
        return policy
    }
}

extension TOMLSubset.Value {
    func string(_ fail: (Int?, String?, String) -> ConfigError, _ key: String) throws -> String {
        guard case .string(let s) = kind else { throw fail(line, key, "expected a quoted string") }
        return s
    }

    func strings(_ fail: (Int?, String?, String) -> ConfigError, _ key: String) throws -> [String] {
        guard case .strings(let list) = kind else { throw fail(line, key, "expected an array of strings, like [\"openid\"]") }
        return list
    }

    func duration(_ fail: (Int?, String?, String) -> ConfigError, _ key: String) throws -> Double {
        guard case .string(let s) = kind, let seconds = SessionDuration.parse(s) else {
            throw fail(line, key, "expected a duration like \"90s\", \"30m\" or \"12h\"")
        }
        guard seconds <= SessionDuration.maximum else {
            throw fail(line, key, "must be at most \(SessionDuration.format(SessionDuration.maximum))")
        }
        return seconds
    }
}
