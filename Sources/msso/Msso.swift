import ArgumentParser
import MSSOClient

@main
struct Msso: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "msso",
        abstract: "Single sign-on for the apps of your organisation.",
        discussion: """
            Talks to your msso broker (mssod). Every verb takes --json for scripts.

            \(ExitStatus.table)
            """,
        subcommands: [Login.self, Extend.self, Logout.self, Status.self, Check.self, Sign.self, Token.self, Exec.self,
                      Keys.self, Apps.self, Audit.self, Lock.self, Unlock.self, Doctor.self, SSH.self])

    /// The verbs scripts and tools call on every request take the quick path; everything else
    /// (help, completions, every error) is ArgumentParser's.
    static func main() {
        if QuickStart.run(Array(CommandLine.arguments.dropFirst())) { return }
        main(nil)
    }
}
