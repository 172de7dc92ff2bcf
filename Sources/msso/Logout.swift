import ArgumentParser
import MSSOClient

struct Logout: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logout",
        abstract: "End the SSO session of a group (or of all groups) for every app.")

    @OptionGroup var options: CommonOptions

    @Flag(help: "Log out of every configured group.")
    var all = false

    func validate() throws {
        if all && options.group != nil { throw ValidationError("give --group or --all, not both") }
    }

    func run() throws {
        try options.run { broker in
            let ended = try broker.call(Methods.Logout.self, .init(group: options.group, all: all)).loggedOut
            if options.json {
                Output.json(Methods.Logout.Result(loggedOut: ended))
            } else {
                Output.print(ended.isEmpty ? "No SSO session was active." : "Logged out of \(ended.joined(separator: ", ")).")
            }
        }
    }
}
