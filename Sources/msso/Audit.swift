import ArgumentParser
import MSSOClient

struct Audit: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit",
        abstract: "Show the audit log: who asked the broker for what, and how it ended.")

    @OptionGroup var options: CommonOptions

    @Option(help: ArgumentHelp("Only rows since this long ago (90s, 30m, 12h, 2d) or this Unix time.", valueName: "when"))
    var since: String?

    @Option(help: "At most this many rows (the newest).")
    var limit = 100

    func validate() throws {
        if let since, Audit.parse(since: since) == nil {
            throw ValidationError("--since takes a duration like 30m or 2d, or a Unix time")
        }
    }

    func run() throws {
        try options.run { broker in
            let rows = try broker.call(Methods.Audit.self, .init(group: options.group, since: since.flatMap(Audit.parse(since:)),
                                                                 limit: limit)).entries
            if options.json { return Output.json(rows) }
            for row in rows {
                let outcome = row.outcome == "ok" ? "ok" : row.error ?? row.outcome
                // A forward's calls are the remote host's: its pid is the local ssh that carried them.
                let who = row.verb != Methods.Forward.name && row.host != nil
                    ? "ssh:\(row.host!) (through ssh pid \(row.pid)) uid \(row.uid)"
                    : "\(row.executable ?? "?")\(row.app.map { " (\($0))" } ?? "") pid \(row.pid) uid \(row.uid)\(row.host.map { " for ssh:\($0)" } ?? "")"
                let detail = (row.resource.map { "  for \($0)" } ?? "") + (row.detail.map { "  \($0)" } ?? "")
                let group = (row.group ?? "-") + (row.account.map { $0 == AccountName.defaultName ? "" : " (account \($0))" } ?? "")
                Output.print("\(Output.local(row.time, "%Y-%m-%d %H:%M:%S"))  \(row.verb)  \(group)  \(outcome)  \(who)\(detail)")
            }
        }
    }

    /// `30m` ago, or a Unix time.
    static func parse(since text: String) -> Double? {
        Double(text) ?? SessionDuration.parse(text).map { Output.now - $0 }
    }
}
