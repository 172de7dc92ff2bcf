import ArgumentParser
import Foundation
import MSSOClient

/// Options every verb takes.
struct CommonOptions: ParsableArguments {
    @Option(name: .shortAndLong, help: "The access group (default: the only configured one).")
    var group: String?

    @Flag(help: "Print machine-readable JSON on standard output.")
    var json = false

    @Option(help: ArgumentHelp("The broker's socket (default: $MSSO_SOCKET, else $XDG_RUNTIME_DIR/msso/broker.sock).", valueName: "path"))
    var socket: String?

    /// Connects, runs `body`, and turns a broker error into its message and exit status.
    func run(_ body: (SSOClient) async throws -> Void) async throws {
        do {
            let client = try await SSOClient.connect(socketPath: socket, clientName: "msso")
            do {
                try await body(client)
            } catch {
                await client.close()
                throw error
            }
            await client.close()
        } catch let error as BrokerError {
            fail(error)
        }
    }

    func fail(_ error: BrokerError) -> Never {
        if json {
            Output.json(["error": error.name.rawValue, "message": error.message])
        }
        Output.error(error.message)
        Foundation.exit(ExitStatus(error).rawValue)
    }
}

enum Output {
    static func json(_ value: some Encodable) {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        print(String(decoding: data, as: UTF8.self))
    }

    static func error(_ message: String) {
        FileHandle.standardError.write(Data("msso: \(message)\n".utf8))
    }

    /// "14:03:12 (in 29m 58s)" for a Unix time.
    static func when(_ time: Double?) -> String {
        guard let time else { return "-" }
        let date = Date(timeIntervalSince1970: time)
        let formatter = DateFormatter()
        formatter.dateFormat = Calendar.current.isDateInToday(date) ? "HH:mm:ss" : "yyyy-MM-dd HH:mm:ss"
        let delta = time - Date().timeIntervalSince1970
        let relative = delta >= 0 ? "in \(span(delta))" : "\(span(-delta)) ago"
        return "\(formatter.string(from: date)) (\(relative))"
    }

    static func span(_ seconds: Double) -> String {
        let s = Int(seconds.rounded())
        if s >= 3600 { return "\(s / 3600)h \(s % 3600 / 60)m" }
        if s >= 60 { return "\(s / 60)m \(s % 60)s" }
        return "\(s)s"
    }

    /// One line describing a group's session, in the user's words.
    static func line(_ status: SessionStatus) -> String {
        switch status.state {
        case .valid:
            let user = status.username.map { " as \($0)" } ?? ""
            return "\(status.group): logged in\(user), session valid until \(when(status.sessionExpiresAt))"
        case .expired:
            return "\(status.group): session expired at \(when(status.sessionExpiresAt)); run `msso login --group \(status.group)`"
        case .notLoggedIn:
            return "\(status.group): not logged in; run `msso login --group \(status.group)`"
        }
    }
}
