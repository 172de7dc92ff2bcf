import FoundationEssentials
import MSSOProtocol

/// Which app may use which access group (the Linux analogue of iOS keychain access groups).
///
/// Registrations come from `apps.d/*.toml` in the admin's directory (`/etc/msso`, counted as the
/// admin's only when root owns it: see ``AdminFiles``) and, when the admin's policy allows
/// (`user_apps`, default true), in the user's (`~/.config/msso`). An app name defined by the admin
/// cannot be redefined by the user: the user's is ignored (shadowed). A file that cannot be read
/// or parsed is skipped, with a warning naming it: one bad file never takes the others down.
///
/// Matching a caller is a dictionary lookup by executable path or Flatpak id.
public struct Entitlements: Sendable, Equatable {
    public private(set) var registrations: [AppRegistration]
    /// User registrations ignored because the admin defines the same name.
    public private(set) var ignored: [AppRegistration]
    /// Files skipped, each with the reason and the fix.
    public private(set) var warnings: [String]
    /// Whether the user's own registrations are read (`[policy] user_apps`): what a refusal
    /// tells the user to do.
    public private(set) var userApps = true
    private var byExecutable: [String: [AppRegistration]] = [:]
    private var byFlatpak: [String: [AppRegistration]] = [:]

    public init(registrations: [AppRegistration], ignored: [AppRegistration] = [], warnings: [String] = []) {
        self.registrations = registrations
        self.ignored = ignored
        self.warnings = warnings
        for registration in registrations {
            if let executable = registration.executable { byExecutable[executable, default: []].append(registration) }
            if let flatpak = registration.flatpak { byFlatpak[flatpak, default: []].append(registration) }
        }
    }

    /// The biggest `apps.d` file read: far above any real registration list.
    public static let maximumFileSize = 1 << 20

    /// Reads both directories. The user's is not even listed when `userApps` is false.
    public static func load(systemDirectory: String, userDirectory: String, userApps: Bool) -> Entitlements {
        var warnings: [String] = []
        let admin = read(directory: systemDirectory + "/apps.d", admin: true, warnings: &warnings)
        let user = userApps ? read(directory: userDirectory + "/apps.d", admin: false, warnings: &warnings) : []
        let adminNames = Set(admin.map(\.name))
        var loaded = Entitlements(registrations: admin + user.filter { !adminNames.contains($0.name) },
                                  ignored: user.filter { adminNames.contains($0.name) }, warnings: warnings)
        loaded.userApps = userApps
        return loaded
    }

    /// The registrations `app` matches: by Flatpak id for a sandboxed app; by executable path
    /// (and content, when pinned) for a process that sees the daemon's file system.
    public func matches(_ app: AppIdentity) -> [AppRegistration] {
        if let flatpak = app.flatpak { return byFlatpak[flatpak] ?? [] }
        guard app.onHost, let executable = app.executable else { return [] }
        return (byExecutable[executable] ?? []).filter { registration in
            registration.sha256 == nil || registration.sha256 == app.digest
        }
    }

    /// Whether a registration names `executable` (so the path must be checked against the file
    /// the caller runs).
    public func registers(_ executable: String) -> Bool {
        byExecutable[executable] != nil
    }

    /// Whether a registration of `executable` pins its content (so its digest must be computed).
    public func pins(_ executable: String) -> Bool {
        byExecutable[executable]?.contains { $0.sha256 != nil } ?? false
    }

    /// The pinned digest `app`'s executable failed to match, if that is why it matches nothing.
    public func pinMismatch(_ app: AppIdentity) -> (expected: String, actual: String?)? {
        guard app.onHost, app.flatpak == nil, let executable = app.executable,
              let pinned = byExecutable[executable]?.first(where: { $0.sha256 != nil && $0.sha256 != app.digest }),
              matches(app).isEmpty else { return nil }
        return (pinned.sha256!, app.digest)
    }

    /// Throws `NotEntitled` unless `app` is registered for `group`, in a sentence naming the app,
    /// the group and the fix.
    public func authorize(_ app: AppIdentity, group: String) throws(BrokerError) {
        if matches(app).contains(where: { $0.groups.contains(group) }) { return }
        if let (expected, actual) = pinMismatch(app), let executable = app.executable {
            throw BrokerError(.notEntitled, "\(executable) is not the binary registered for access group \"\(group)\": its sha256 is \(actual ?? "unreadable"), the registration pins \(expected); re-pin it with `msso apps allow \(executable) --group \(group) --pin` (or ask your administrator)")
        }
        if app.flatpak == nil, !app.onHost, let executable = app.executable {
            throw BrokerError(.notEntitled, "\(executable) runs in a mount, pid or user namespace of its own, or is another file than the one at that path, and is not a Flatpak app, so no registration by path applies to it; run it from the host's file system, or register its Flatpak id")
        }
        let who = app.flatpak.map { "Flatpak app \($0)" } ?? app.executable.map { "\($0)" } ?? "an app whose executable is unknown"
        guard userApps else {
            throw BrokerError(.notEntitled, "\(who) is not registered for access group \"\(group)\"; only your administrator can register it (in /etc/msso/apps.d: `[policy] user_apps = false` leaves your own registrations unread)")
        }
        let fix = app.flatpak.map { "msso apps allow --flatpak \($0) --group \(group)" }
            ?? app.executable.map { "msso apps allow \($0) --group \(group)" } ?? "msso apps allow PATH --group \(group)"
        throw BrokerError(.notEntitled, "\(who) is not registered for access group \"\(group)\"; register it with `\(fix)` (or ask your administrator)")
    }

    // MARK: Files

    static func read(directory: String, admin: Bool, warnings: inout [String]) -> [AppRegistration] {
        if admin, let problem = AdminFiles.problem(with: directory) {
            warnings.append(problem)
            return []
        }
        // The admin's directory is listed by its real path, the one just checked.
        let listed = admin ? AdminFiles.realPath(directory) ?? directory : directory
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: listed) else { return [] }
        var out: [AppRegistration] = []
        var seen = Set<String>()
        for name in names.sorted() where name.hasSuffix(".toml") {
            let path = directory + "/" + name
            do {
                guard let text = try AdminFiles.text(of: path, admin: admin, maximumSize: maximumFileSize, warnings: &warnings) else { continue }
                let parsed = try parse(text, file: path, admin: admin)
                if let duplicate = parsed.first(where: { seen.contains($0.name) }) {
                    throw ConfigError(file: path, line: nil, key: nil, problem: "app \"\(duplicate.name)\" is already defined in another file")
                }
                seen.formUnion(parsed.map(\.name))
                out += parsed
            } catch {
                warnings.append("\(error); the file is skipped")
            }
        }
        return out
    }

    public static func parse(_ text: String, file: String, admin: Bool) throws -> [AppRegistration] {
        try TOMLSubset.parse(text, file: file).map { table in
            let fail = { (line: Int?, key: String?, problem: String) in ConfigError(file: file, line: line, key: key, problem: problem) }
            guard table.path.count == 2, table.path[0] == "apps" else {
                throw fail(table.line, nil, "unknown table [\(table.path.joined(separator: "."))]; apps are written [apps.NAME]")
            }
            var registration = AppRegistration(name: table.path[1], executable: nil, sha256: nil, flatpak: nil, groups: [],
                                               source: "\(file):\(table.line)", admin: admin)
            for (key, value) in table.values.sorted(by: { $0.value.line < $1.value.line }) {
                switch key {
                case "executable":
                    let path = try value.string(fail, key)
                    guard path.hasPrefix("/") else { throw fail(value.line, key, "must be an absolute path") }
                    registration.executable = AdminFiles.realPath(path) ?? path
                case "sha256":
                    let hex = try value.string(fail, key).lowercased()
                    guard hex.count == 64, hex.allSatisfy(\.isHexDigit) else { throw fail(value.line, key, "expected 64 hex digits") }
                    registration.sha256 = hex
                case "flatpak":
                    registration.flatpak = try value.string(fail, key)
                case "groups":
                    registration.groups = try value.strings(fail, key)
                case "confirm":
                    guard case .boolean(let on) = value.kind else { throw fail(value.line, key, "expected true or false") }
                    registration.confirm = on ? true : nil
                case "scopes":
                    let scopes = try value.strings(fail, key)
                    guard !scopes.isEmpty, scopes.count <= 64, scopes.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 256 && $0.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && $0 != 0x22 && $0 != 0x5C } }) else {
                        throw fail(value.line, key, "expected the scopes this app's tokens are minted with (1 to 64 OAuth scope tokens, a subset of each group's `scopes`)")
                    }
                    registration.scopes = Array(Set(scopes)).sorted()
                case "account":
                    let account = try value.string(fail, key)
                    if let problem = AccountName.problem(account) { throw fail(value.line, key, problem) }
                    registration.account = account
                default:
                    throw fail(value.line, key, "unknown key in app \"\(registration.name)\"")
                }
            }
            guard (registration.executable == nil) != (registration.flatpak == nil) else {
                throw fail(table.line, nil, "app \"\(registration.name)\" needs either `executable` or `flatpak`")
            }
            if registration.flatpak != nil, registration.sha256 != nil {
                throw fail(table.values["sha256"]!.line, "sha256", "pins apply to executables, not Flatpak apps")
            }
            guard !registration.groups.isEmpty else { throw fail(table.line, "groups", "app \"\(registration.name)\" names no group") }
            return registration
        }
    }
}
