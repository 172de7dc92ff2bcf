import ArgumentParser
import Foundation
import MSSOClient

/// msso-logout: the one command (and desktop entry) that ends the SSO session for every app.
@main
struct LogoutUtility: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "msso-logout",
        abstract: "Log out of single sign-on: every app of every group (or of one group) must log in again.",
        discussion: "Exits 0 when the sessions are ended, including when none was active.")

    @Option(name: .shortAndLong, help: "End only this access group's session.")
    var group: String?

    @Option(help: ArgumentHelp("The broker's socket.", valueName: "path"))
    var socket: String?

    func run() async throws {
        do {
            let client = try await SSOClient.connect(socketPath: socket, clientName: "msso-logout")
            let ended = try await group != nil ? client.logout(group: group) : client.logoutAll()
            await client.close()
            print(ended.isEmpty ? "No SSO session was active." : "Logged out of \(ended.joined(separator: ", ")).")
        } catch let error as BrokerError {
            FileHandle.standardError.write(Data("msso-logout: \(error.message)\n".utf8))
            // Same statuses as msso (3: broker unreachable, 4: keyring locked …).
            throw ExitCode(error.name == .brokerUnreachable ? 3 : error.name == .keyringLocked || error.name == .keyringUnavailable ? 4 : 1)
        }
    }
}
