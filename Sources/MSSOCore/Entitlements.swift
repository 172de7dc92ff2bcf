import Foundation
import MSSOProtocol

/// Which app may use which access group (the Linux analogue of iOS keychain access groups).
///
/// Registrations come from `apps.d/*.toml` in the admin's directory (`/etc/msso`) and, when the
/// admin's policy allows (`user_apps`, default true), in the user's (`~/.config/msso`). An app
/// name defined by the admin cannot be redefined by the user: the user's is ignored (shadowed).
public struct Entitlements: Sendable, Equatable {
    public var registrations: [AppRegistration]
    /// User registrations ignored because the admin defines the same name, or user apps are off.
    public var ignored: [AppRegistration]

    public init(registrations: [AppRegistration], ignored: [AppRegistration] = []) {
        self.registrations = registrations
        self.ignored = ignored
    }

    /// Reads both directories.
    public static func load(systemDirectory: String, userDirectory: String, userApps: Bool) throws -> Entitlements {
        let admin = try read(directory: systemDirectory + "/apps.d", admin: true)
        let user = try read(directory: userDirectory + "/apps.d", admin: false)
        let adminNames = Set(admin.map(\.name))
        let accepted = userApps ? user.filter { !adminNames.contains($0.name) } : []
        return Entitlements(registrations: admin + accepted, ignored: user.filter { !accepted.contains($0) })
    }

    /// The registrations `app` matches: by Flatpak id, or by executable path (and content, when pinned).
    public func matches(_ app: AppIdentity) -> [AppRegistration] {
        var digest: String??
        return registrations.filter { registration in
            if let flatpak = registration.flatpak { return flatpak == app.flatpak }
            guard let executable = registration.executable, executable == app.executable else { return false }
            guard let pinned = registration.sha256 else { return true }
            if digest == nil { digest = .some(app.digest()) }
            return digest! == pinned
        }
    }

    /// Throws `NotEntitled` unless `app` is registered for `group`.
    public func authorize(_ app: AppIdentity, group: String) throws(BrokerError) {
        if matches(app).contains(where: { $0.groups.contains(group) }) { return }
        let who = app.flatpak.map { "Flatpak app \($0)" } ?? app.executable.map { "\($0)" } ?? "an app whose executable is unknown"
        let fix = app.flatpak.map { "msso apps allow --flatpak \($0) --group \(group)" }
            ?? app.executable.map { "msso apps allow \($0) --group \(group)" } ?? "msso apps allow PATH --group \(group)"
        throw BrokerError(.notEntitled, "\(who) is not registered for access group \"\(group)\"; register it with `\(fix)` (or ask your administrator)")
    }

    // MARK: Files

    static func read(directory: String, admin: Bool) throws -> [AppRegistration] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        var out: [AppRegistration] = []
        for name in names.sorted() where name.hasSuffix(".toml") {
            let path = directory + "/" + name
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigError(file: path, line: nil, key: nil, problem: "cannot be read as UTF-8 text")
            }
            out += try parse(text, file: path, admin: admin)
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
                    registration.executable = (path as NSString).resolvingSymlinksInPath
                case "sha256":
                    let hex = try value.string(fail, key).lowercased()
                    guard hex.count == 64, hex.allSatisfy(\.isHexDigit) else { throw fail(value.line, key, "expected 64 hex digits") }
                    registration.sha256 = hex
                case "flatpak":
                    registration.flatpak = try value.string(fail, key)
                case "groups":
                    registration.groups = try value.strings(fail, key)
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
