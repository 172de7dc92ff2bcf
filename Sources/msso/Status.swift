import ArgumentParser
import MSSOClient

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status", abstract: "Show the SSO session of every account of every group (or of one group, or one account).")

    @OptionGroup var options: CommonOptions

    func run() throws {
        try options.run { broker in
            // Every account unless one is named here (MSSO_ACCOUNT picks what a call uses, not what is listed).
            let result = try broker.call(Methods.Status.self, GroupArguments(group: options.group, account: options.account))
            let groups = result.groups
            if options.json {
                Output.json(result)
                return
            }
            if result.locked == true {
                Output.print("msso is locked since \(Output.when(result.lockedAt)): nothing signs until `msso unlock`.")
            }
            if groups.isEmpty {
                Output.print("No access group is configured.")
            } else {
                for group in groups {
                    Output.print(Output.line(group))
                    for token in group.tokens ?? [] {
                        let what = [token.resource, token.scopes.map { "scopes \($0.joined(separator: " "))" }] // (made safe by print)
                        Output.print("  a token for \(what.compactMap { $0 }.joined(separator: ", ")), until \(Output.when(token.expiresAt))")
                    }
                }
            }
            // Where every group above is kept (one store for all), when it is not the desktop keyring.
            if let store = result.store, store.kind == .kernel {
                Output.print("Sessions are kept in \(store.place): \(store.reason).")
            }
            if let problem = result.audit?.problem { Output.print(problem.prefix(1).uppercased() + problem.dropFirst() + ".") }
        }
    }
}
