import Foundation

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

/// The broker's configuration: the access groups, from TOML files.
///
/// `/etc/msso/config.toml` (the admin's) is read first, then `$XDG_CONFIG_HOME/msso/config.toml`
/// (the user's); a group defined in both takes the user's table whole. `MSSO_CONFIG` names one
/// file to read instead of both.
public struct Configuration: Equatable, Sendable {
    public var groups: [String: GroupConfig]

    public init(groups: [GroupConfig]) {
        self.groups = Dictionary(groups.map { ($0.name, $0) }, uniquingKeysWith: { _, last in last })
    }

    /// The files read, in order, for an environment.
    public static func searchPath(environment: [String: String]) -> [String] {
        if let only = environment["MSSO_CONFIG"], !only.isEmpty { return [only] }
        let home = environment["HOME"] ?? NSHomeDirectory()
        let userConfig = environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.config"
        return ["/etc/msso/config.toml", userConfig + "/msso/config.toml"]
    }

    /// Reads every existing file of the search path. A missing file is skipped; a bad one throws.
    public static func load(environment: [String: String]) throws -> Configuration {
        var groups: [String: GroupConfig] = [:]
        for path in searchPath(environment: environment) {
            guard FileManager.default.fileExists(atPath: path) else { continue }
            guard let data = FileManager.default.contents(atPath: path),
                  let text = String(data: data, encoding: .utf8) else {
                throw ConfigError(file: path, line: nil, key: nil, problem: "cannot be read as UTF-8 text")
            }
            for group in try parse(text, file: path) { groups[group.name] = group }
        }
        return Configuration(groups: Array(groups.values))
    }

    /// Parses one file's text.
    public static func parse(_ text: String, file: String) throws -> [GroupConfig] {
        let document = try TOMLSubset.parse(text, file: file)
        var groups: [GroupConfig] = []
        for table in document {
            let fail = { (line: Int?, key: String?, problem: String) in
                ConfigError(file: file, line: line, key: key, problem: problem)
            }
            guard table.path.count == 2, table.path[0] == "groups" else {
                throw fail(table.line, nil, "unknown table [\(table.path.joined(separator: "."))]; groups are written [groups.\"NAME\"]")
            }
            let name = table.path[1]
            guard let issuer = table.values["issuer"] else { throw fail(table.line, "issuer", "group \"\(name)\" needs an issuer URL") }
            guard let clientID = table.values["client_id"] else { throw fail(table.line, "client_id", "group \"\(name)\" needs a client_id") }
            var group = GroupConfig(name: name, issuer: try issuer.string(fail, "issuer"), clientID: try clientID.string(fail, "client_id"))
            guard let url = URL(string: group.issuer), url.scheme == "https" || url.scheme == "http", url.host != nil else {
                throw fail(issuer.line, "issuer", "expected an http(s) URL, got \"\(group.issuer)\"")
            }
            if url.scheme == "http", !["127.0.0.1", "localhost", "::1", "[::1]"].contains(url.host!) {
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
                    if !path.hasPrefix("/") { path = (file as NSString).deletingLastPathComponent + "/" + path }
                    group.clientSecret = .file(path)
                case "scopes":
                    group.scopes = try value.strings(fail, key)
                case "session_timeout":
                    group.sessionTimeout = try value.duration(fail, key)
                case "session_max":
                    group.sessionMax = try value.duration(fail, key)
                case "refresh_lead":
                    group.refreshLead = try value.duration(fail, key)
                case "sign":
                    let text = try value.string(fail, key)
                    guard let profile = SigningProfile(configValue: text) else {
                        throw fail(value.line, key, "expected \"bearer\" or \"header:NAME\", got \"\(text)\"")
                    }
                    group.signing = profile
                default:
                    throw fail(value.line, key, "unknown key in group \"\(name)\"")
                }
            }
            if table.values["client_secret"] != nil, table.values["client_secret_file"] != nil {
                throw fail(table.values["client_secret"]!.line, "client_secret", "give client_secret or client_secret_file, not both")
            }
            if group.sessionMax < group.sessionTimeout {
                throw fail(table.values["session_max"]?.line ?? table.line, "session_max", "must not be shorter than session_timeout")
            }
            groups.append(group)
        }
        return groups
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
        return seconds
    }
}
