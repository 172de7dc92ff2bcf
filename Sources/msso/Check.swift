import ArgumentParser
import MSSOClient

struct Check: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Tell, by exit status, whether the group's SSO session is valid.",
        discussion: """
            Exit status: 0 valid, 1 expired, 2 not logged in, 3 broker unreachable, 4 keyring \
            locked or unavailable, 8 valid but msso is locked (the full table is in `msso --help`).
            """)

    @OptionGroup var options: CommonOptions

    @Flag(name: .shortAndLong, help: "Print nothing; answer by exit status only.")
    var quiet = false

    func run() throws { try Self.perform(options.values, quiet: quiet) }

    static func perform(_ options: Common, quiet: Bool) throws {
        try options.run { broker in
            let status = try broker.call(Methods.Check.self, GroupArguments(group: options.group, account: options.account))
            if options.json { Output.json(status) } else if !quiet { Output.print(Output.line(status)) }
            switch status.state {
            case .valid where status.locked == true: throw ExitCode(ExitStatus.locked.rawValue)
            case .valid: return
            case .expired: throw ExitCode(ExitStatus.expired.rawValue)
            case .notLoggedIn: throw ExitCode(ExitStatus.notLoggedIn.rawValue)
            case .corrupt: throw ExitCode(ExitStatus.keyring.rawValue)
            }
        }
    }
}
