import ArgumentParser
import MSSOClient

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show the SSO session of every group (or one).")

    @OptionGroup var options: CommonOptions

    func run() async throws {
        try await options.run { client in
            let groups = try await client.status(group: options.group)
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
