import ArgumentParser
import FoundationEssentials
import Glibc
import MSSOClient

/// What every verb takes, however it was parsed.
struct Common {
    var group: String?
    /// The account of the group (`--account`, else `MSSO_ACCOUNT`; nil: the broker's choice).
    var account: String? = Common.accountFromEnvironment
    var json = false
    var socket: String?
    var timeout: Double = 20

    /// Connects, runs `body`, and turns a broker error into its message and exit status.
    func run(_ body: (BrokerConnection) throws -> Void) throws {
        do {
            let broker = try BrokerConnection.connect(socketPath: socket, clientName: "msso", timeout: timeout)
            defer { broker.close() }
            try body(broker)
        } catch let error as BrokerError {
            fail(error)
        }
    }

    /// `MSSO_ACCOUNT`, so that two terminals work as two accounts at once.
    static var accountFromEnvironment: String? {
        guard let value = getenv("MSSO_ACCOUNT") else { return nil }
        let text = String(cString: value)
        return text.isEmpty ? nil : text
    }

    func fail(_ error: BrokerError) -> Never {
        if json {
            Output.json(["error": error.name.rawValue, "message": error.message])
        }
        Output.error(error.message)
        Glibc.exit(ExitStatus(error).rawValue)
    }
}

/// Options every verb takes.
struct CommonOptions: ParsableArguments {
    @Option(name: .shortAndLong, help: "The access group (default: the only configured one).")
    var group: String?

    @Option(help: ArgumentHelp("The account of the group (default: $MSSO_ACCOUNT, else the group's default account).", valueName: "name"))
    var account: String?

    @Flag(help: "Print machine-readable JSON on standard output.")
    var json = false

    @Option(help: ArgumentHelp("The broker's socket (default: $MSSO_SOCKET, else $XDG_RUNTIME_DIR/msso/broker.sock).", valueName: "path"))
    var socket: String?

    @Option(help: ArgumentHelp("Seconds to wait for the broker's answer (a login waits for you as long as the broker does).", valueName: "seconds"))
    var timeout: Double = 20

    var values: Common { Common(group: group, account: account ?? Common.accountFromEnvironment, json: json, socket: socket, timeout: timeout) }

    func run(_ body: (BrokerConnection) throws -> Void) throws { try values.run(body) }

    func fail(_ error: BrokerError) -> Never { values.fail(error) }
}

/// What the commands print, without Foundation's formatters (a command starts in milliseconds).
enum Output {
    // Everything the commands show goes through these, and through TerminalText: text from
    // outside (the IdP, the broker, files) never reaches the terminal with a control character.

    static func json(_ value: some Encodable) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        Swift.print(TerminalText.json(String(decoding: data, as: UTF8.self)))
    }

    /// A line on standard output, control characters shown as `?`.
    static func print(_ line: String) {
        Swift.print(TerminalText.safe(line))
    }

    /// A text the command composed of several lines (its newlines kept), on standard output.
    static func print(lines text: String, terminator: String = "\n") {
        Swift.print(TerminalText.safe(text, newlines: true), terminator: terminator)
    }

    /// A line on standard error, `msso: ` first.
    static func error(_ message: String) {
        note("msso: \(message)")
    }

    /// A line on standard error, control characters shown as `?`.
    static func note(_ line: String) {
        toStandardError(TerminalText.safe(line) + "\n")
    }

    /// Bytes for standard error as they are: only for control sequences of the command's own
    /// (the countdown's carriage return); anything from outside goes through ``note(_:)``.
    static func toStandardError(_ text: String) {
        var bytes = Array(text.utf8)
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress! + written, $0.count - written) }
            guard count > 0 else { return }
            written += count
        }
        bytes.removeAll()
    }

    static var now: Double { Date().timeIntervalSince1970 }

    /// "14:03:12 (in 29m 58s)" for a Unix time; the date too when it is not today.
    static func when(_ time: Double?) -> String {
        guard let time else { return "-" }
        let delta = time - now
        let relative = delta >= 0 ? "in \(span(delta))" : "\(span(-delta)) ago"
        let sameDay = local(time, "%Y-%m-%d") == local(now, "%Y-%m-%d")
        return "\(local(time, sameDay ? "%H:%M:%S" : "%Y-%m-%d %H:%M:%S")) (\(relative))"
    }

    /// `time` in the local time zone, in a strftime(3) format.
    static func local(_ time: Double, _ format: String) -> String { TimeText.local(time, format) }

    static func span(_ seconds: Double) -> String {
        let s = Int(min(max(seconds, 0), 1e9).rounded())
        if s >= 3600 { return "\(s / 3600)h \(s % 3600 / 60)m" }
        if s >= 60 { return "\(s / 60)m \(s % 60)s" }
        return "\(s)s"
    }

    /// One line describing a group's session, in the user's words.
    static func line(_ status: SessionStatus) -> String {
        let text = sessionLine(status)
        return status.locked == true ? text + " (msso is locked: run `msso unlock`)" : text
    }

    private static func sessionLine(_ status: SessionStatus) -> String {
        let session = AccountName(group: status.group, account: status.account ?? AccountName.defaultName)
        let name = session.account == AccountName.defaultName ? status.group
            : "\(status.group) (account \(session.account)\(status.isDefault == true ? ", the default" : ""))"
        switch status.state {
        case .valid:
            let user = status.username.map { " as \($0)" } ?? ""
            return "\(name): logged in\(user), session valid until \(when(status.sessionExpiresAt))"
        case .expired:
            return "\(name): session expired at \(when(status.sessionExpiresAt)); run `msso login \(session.options)`"
        case .notLoggedIn:
            return "\(name): not logged in; run `msso login \(session.options)`"
        case .corrupt:
            return "\(name): the stored credential is damaged; run `msso logout \(session.options)`, then log in"
        }
    }
}
