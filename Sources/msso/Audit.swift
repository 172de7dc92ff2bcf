import ArgumentParser
import Foundation
import MSSOClient

struct Audit: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
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

    func run() async throws {
        try await options.run { client in
            let rows = try await client.call(Methods.Audit.self, .init(group: options.group, since: since.flatMap(Audit.parse(since:)),
                                                                       limit: limit)).entries
            if options.json { return Output.json(rows) }
            let formatter = DateFormatter()
            formatter.dateFormat = "yyyy-MM-dd HH:mm:ss"
            for row in rows {
                let outcome = row.outcome == "ok" ? "ok" : row.error ?? row.outcome
                let who = "\(row.executable ?? "?")\(row.app.map { " (\($0))" } ?? "") pid \(row.pid) uid \(row.uid)"
                print("\(formatter.string(from: Date(timeIntervalSince1970: row.time)))  \(row.verb)  \(row.group ?? "-")  \(outcome)  \(who)")
            }
        }
    }

    /// `30m` ago, or a Unix time.
    static func parse(since text: String) -> Double? {
        Double(text) ?? SessionDuration.parse(text).map { Date().timeIntervalSince1970 - $0 }
    }
}
