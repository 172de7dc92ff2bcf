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
            let result = try broker.call(Methods.Logout.self, .init(group: options.group, all: all))
            if options.json { return Output.json(result) }
            for line in result.summary(time: Output.when) { Output.print(line) }
        }
    }
}
