import ArgumentParser
import MSSOClient

struct Logout: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logout",
        abstract: "End the SSO session of a group's account (or of every account of every group) for every app.")

    @OptionGroup var options: CommonOptions

    @Flag(help: "Log out of every account of every configured group.")
    var all = false

    func validate() throws {
        if all && options.group != nil { throw ValidationError("give --group or --all, not both") }
        if all && options.account != nil { throw ValidationError("give --account or --all, not both") }
    }

    func run() throws {
        try options.run { broker in
            let result = try broker.call(Methods.Logout.self, .init(group: options.group, account: options.values.account, all: all))
            if options.json { return Output.json(result) }
            for line in result.summary(time: Output.when) { Output.print(line) }
        }
    }
}
