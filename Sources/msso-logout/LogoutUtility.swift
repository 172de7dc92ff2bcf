import ArgumentParser
import Glibc
import MSSOClient

/// msso-logout: the one command (and desktop entry) that ends the SSO session for every app.
@main
struct LogoutUtility: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "msso-logout",
        abstract: "Log out of single sign-on: every app of every group (or of one group) must log in again.",
        discussion: """
            Exits 0 when the sessions are ended, including when none was active.

            \(ExitStatus.table)
            """)

    @Option(name: .shortAndLong, help: "End only this access group's session.")
    var group: String?

    @Option(help: ArgumentHelp("The broker's socket.", valueName: "path"))
    var socket: String?

    /// A Unix time as the local clock shows it ("14:03").
    static func clockTime(_ time: Double) -> String { TimeText.local(time, "%H:%M") }

    func run() throws {
        do throws(BrokerError) {
            let broker = try BrokerConnection.connect(socketPath: socket, clientName: "msso-logout")
            defer { broker.close() }
            let result = try broker.call(Methods.Logout.self, .init(group: group, all: group == nil))
            for line in result.summary(time: Self.clockTime) { print(TerminalText.safe(line)) }
        } catch {
            let line = Array("msso-logout: \(TerminalText.safe(error.message))\n".utf8)
            _ = line.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
            throw ExitCode(ExitStatus(error).rawValue)
        }
    }
}
