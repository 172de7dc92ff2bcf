import ArgumentParser
import MSSOClient

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",abstract: "Show the SSO session of every group (or one).")

    @OptionGroup var options: CommonOptions

    func run() throws {
        try options.run { broker in
            let groups = try broker.call(Methods.Status.self, GroupArguments(group: options.group)).groups
            if options.json {
                Output.json(Methods.Status.Result(groups: groups))
            } else if groups.isEmpty {
                print("No access group is configured.")
            } else {
                groups.forEach { print(Output.line($0)) }
            }
        }
    }
}
