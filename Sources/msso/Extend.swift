import ArgumentParser
import MSSOClient

struct Extend: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Slide the session window forward (to now + the group's session timeout).")

    @OptionGroup var options: CommonOptions

    func run() async throws {
        try await options.run { client in
            let status = try await client.extend(group: options.group)
            if options.json { Output.json(status) } else { print(Output.line(status)) }
        }
    }
}
