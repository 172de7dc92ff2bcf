import ArgumentParser
import Glibc
import FoundationEssentials
import MSSOClient

struct Apps: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apps",
        abstract: "List, show, allow and revoke the apps that may use each access group.",
        discussion: """
            Apps are registered in apps.d/*.toml files: the administrator's (/etc/msso/apps.d, which \
            wins) and yours (~/.config/msso/apps.d, if the administrator allows). allow and revoke \
            edit yours; the broker picks changes up at the next connection.
            """,
        subcommands: [List.self, Show.self, Allow.self, Revoke.self],
        defaultSubcommand: List.self)

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the registered apps.")
        @OptionGroup var options: CommonOptions

        func run() throws {
            try options.run { broker in
                let apps = try broker.call(Methods.Apps.self, Empty())
                if options.json { return Output.json(apps) }
                if apps.registrations.isEmpty { Output.print("No app is registered.") }
                for app in apps.registrations { Output.print(Apps.line(app)) }
                for app in apps.ignored { Output.print(Apps.line(app) + "  (ignored: " + (apps.userApps ? "the administrator defines this name)" : "user registrations are off)")) }
            }
        }
    }

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "show", abstract: "Show one app's registration.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The app's name.") var name: String

        func run() throws {
            try options.run { broker in
                let apps = try broker.call(Methods.Apps.self, Empty())
                guard let app = (apps.registrations + apps.ignored).first(where: { $0.name == name }) else {
                    throw BrokerError(.badRequest, "no app named \"\(name)\" is registered; `msso apps` lists them")
                }
                try Apps.requireWritten(app, in: apps.userDirectory, to: "revoke")
                if options.json { return Output.json(app) }
                // A line each: a newline in a name or path (from a file) cannot fake a field.
                Output.print("name:       \(app.name)")
                Output.print(app.flatpak.map { "flatpak:    \($0)" } ?? "executable: \(app.executable ?? "-")")
                Output.print("pinned:     \(app.sha256 ?? "no")")
                Output.print("confirm:    \(app.confirm == true ? "yes: each new requester is asked about in a notification" : "no")")
                Output.print("groups:     \(app.groups.joined(separator: ", "))")
                Output.print("defined in: \(app.source) (\(app.admin ? "administrator" : "user"))")
            }
        }
    }

    struct Allow: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "allow", abstract: "Let an app use an access group (in your apps.d).")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The app's executable.") var executable: String?
        @Option(help: "A Flatpak app id instead of an executable.") var flatpak: String?
        @Option(help: "The registration's name (default: the executable's file name or the Flatpak id).") var name: String?
        @Flag(help: "Pin the executable's current content (SHA-256): a changed binary is refused.") var pin = false
        @Flag(help: "Ask, in a desktop notification, before each new program gets a token or a signature through it (for tools such as msso or git-credential-msso).")
        var confirm = false

        func validate() throws {
            guard (executable == nil) != (flatpak == nil) else { throw ValidationError("give an executable or --flatpak ID") }
            guard options.group != nil else { throw ValidationError("name the access group with --group") }
            if pin && flatpak != nil { throw ValidationError("--pin applies to executables") }
        }

        func run() throws {
            try options.run { broker in
                let apps = try broker.call(Methods.Apps.self, Empty())
                guard apps.userApps else {
                    throw BrokerError(.forbidden, "your administrator does not allow user app registrations; ask them to register the app")
                }
                var app: AppRegistration
                if let flatpak {
                    app = AppRegistration(name: name ?? flatpak, executable: nil, sha256: nil, flatpak: flatpak, groups: [], source: "", admin: false)
                } else {
                    let path = Apps.resolved(executable!)
                    guard FileManager.default.isExecutableFile(atPath: path) else {
                        throw BrokerError(.badRequest, "\(path) is not an executable file")
                    }
                    app = AppRegistration(name: name ?? String(path.split(separator: "/").last ?? "app"), executable: path,
                                          sha256: pin ? try Apps.digest(path) : nil, flatpak: nil, groups: [], source: "", admin: false)
                }
                if let admin = apps.registrations.first(where: { $0.name == app.name && $0.admin }) {
                    throw BrokerError(.badRequest, "the administrator already defines \"\(app.name)\" (\(admin.source)); choose another --name")
                }
                let existing = (apps.registrations + apps.ignored).first { $0.name == app.name && !$0.admin }
                if let existing { try Apps.requireWritten(existing, in: apps.userDirectory, to: "change") }
                app.groups = Array(Set((existing?.groups ?? []) + [options.group!])).sorted()
                app.confirm = confirm || existing?.confirm == true ? true : nil
                app.scopes = existing?.scopes
                // `--account` pins the app to that account of its groups (never MSSO_ACCOUNT: a shell's context is no pin).
                app.account = options.account ?? existing?.account
                if let account = app.account, let problem = AccountName.problem(account) { throw BrokerError(.badRequest, problem) }
                try Apps.write(app, to: apps.userDirectory)
                if options.json { Output.json(app) } else {
                    Output.print("\(app.name) may now use \(app.groups.joined(separator: ", "))\(app.account.map { " as the account \($0)" } ?? "").")
                }
            }
        }
    }

    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "revoke", abstract: "Take an access group (or every group) from an app you registered.")
        @OptionGroup var options: CommonOptions
        @Argument(help: "The app's name.") var name: String

        func run() throws {
            try options.run { broker in
                let apps = try broker.call(Methods.Apps.self, Empty())
                if let admin = apps.registrations.first(where: { $0.name == name && $0.admin }) {
                    throw BrokerError(.forbidden, "\"\(name)\" is registered by the administrator (\(admin.source)); ask them to change it")
                }
                guard var app = (apps.registrations + apps.ignored).first(where: { $0.name == name && !$0.admin }) else {
                    throw BrokerError(.badRequest, "no app named \"\(name)\" is registered; `msso apps` lists them")
                }
                try Apps.requireWritten(app, in: apps.userDirectory, to: "revoke")
                app.groups.removeAll { options.group == nil || $0 == options.group }
                if app.groups.isEmpty {
                    try FileManager.default.removeItem(atPath: apps.userDirectory + "/" + Apps.fileName(name))
                    Output.print("\(name) is no longer registered.")
                } else {
                    try Apps.write(app, to: apps.userDirectory)
                    Output.print("\(name) may now use \(app.groups.joined(separator: ", ")).")
                }
            }
        }
    }

    static func line(_ app: AppRegistration) -> String {
        let who = app.flatpak.map { "flatpak \($0)" } ?? (app.executable ?? "-") + (app.sha256 == nil ? "" : " (pinned)")
        let account = app.account.map { "  account: \($0)" } ?? ""
        let scopes = app.scopes.map { "  scopes: \($0.joined(separator: " "))" } ?? ""
        return "\(app.name)  \(who)  groups: \(app.groups.joined(separator: ", "))\(account)\(scopes)\(app.confirm == true ? "  (confirms)" : "")  [\(app.admin ? "admin" : "user")]"
    }

    /// Throws unless `app` is registered in the file `msso apps` writes for it: a registration the
    /// user wrote in another file stays in force whatever this command writes (found by an outside
    /// test: `revoke` failed with the file system's words, and a partial revoke would have said
    /// "may now use" while that file still gave every group).
    static func requireWritten(_ app: AppRegistration, in directory: String, to verb: String) throws {
        let file = String(app.source[..<(app.source.lastIndex(of: ":") ?? app.source.endIndex)])
        guard file != directory + "/" + fileName(app.name) else { return }
        throw BrokerError(.badRequest, "\"\(app.name)\" is registered in \(app.source), a file `msso apps` did not write, so it cannot \(verb) it; edit its table there (its `groups`), or delete the table and use `msso apps allow`")
    }

    static func fileName(_ name: String) -> String {
        name.map { $0.isLetter || $0.isNumber || "-_.".contains($0) ? $0 : "_" }.map(String.init).joined() + ".toml"
    }

    /// `path` made absolute, with every symbolic link resolved (as the kernel names a running
    /// executable).
    static func resolved(_ path: String) -> String {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        guard let real = realpath(absolute, nil) else { return absolute }
        defer { free(real) }
        return String(cString: real)
    }

    /// A TOML basic string: quotes, backslashes and every control character escaped.
    static func quoted(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case _ where scalar.properties.generalCategory == .control:
                let hex = String(scalar.value, radix: 16, uppercase: true)
                out += "\\u" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    /// One file per app in the user's apps.d, written whole (the broker re-reads changed files).
    static func write(_ app: AppRegistration, to directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var lines = ["# Written by `msso apps`.", "[apps.\(quoted(app.name))]"]
        if let executable = app.executable { lines.append("executable = \(quoted(executable))") }
        if let sha256 = app.sha256 { lines.append("sha256 = \(quoted(sha256))") }
        if let flatpak = app.flatpak { lines.append("flatpak = \(quoted(flatpak))") }
        if app.confirm == true { lines.append("confirm = true") }
        if let account = app.account { lines.append("account = \(quoted(account))") }
        if let scopes = app.scopes { lines.append("scopes = [\(scopes.map(quoted).joined(separator: ", "))]") }
        lines.append("groups = [\(app.groups.map(quoted).joined(separator: ", "))]")
        try Data((lines.joined(separator: "\n") + "\n").utf8).write(to: URL(fileURLWithPath: directory + "/" + fileName(app.name)),
                                                                   options: .atomic)
    }

    static func digest(_ path: String) throws -> String {
        guard let data = FileManager.default.contents(atPath: path) else { throw BrokerError(.badRequest, "cannot read \(path)") }
        return BodyDigest.hexSHA256(data)
    }
}
