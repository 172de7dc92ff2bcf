import ArgumentParser
import MSSOClient

struct Extend: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "extend",
        abstract: "Slide the session window forward (to now + the group's session timeout).")

    @OptionGroup var options: CommonOptions

    func run() throws {
        try options.run { broker in
            let status = try broker.call(Methods.Extend.self, GroupArguments(group: options.group, account: options.account))
            if options.json { Output.json(status) } else { Output.print(Output.line(status)) }
        }
    }
}
