import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import MSSOClientFoundation

/// What every app of the example suite does with msso: find the shared session, log in when there
/// is none, call the suite's API with signed requests, and follow the session live.
///
/// App1 and App2 are this kit under two names: two separate programs sharing one login.
public struct SuiteApp: Sendable {
    public let name: String

    public init(name: String) { self.name = name }

    /// `APP start|login [--username U --password-stdin]`, `APP fetch URL`, `APP logout`, `APP watch`;
    /// each after `--account NAME` to act as that account of the group (default: $MSSO_ACCOUNT).
    public func main() async {
        var arguments = Array(CommandLine.arguments.dropFirst())
        var account: String?
        if arguments.first == "--account", arguments.count >= 2 {
            account = arguments[1]
            arguments.removeFirst(2)
        }
        do {
            let sso = try await SSOClient.connect(clientName: name, account: account)
            switch arguments.first {
            case "start": try await start(sso, forceLogin: false, arguments)
            case "login": try await start(sso, forceLogin: true, arguments)
            case "fetch" where arguments.count == 2: try await fetch(sso, arguments[1])
            case "logout":
                try await sso.logout()
                say("logged out: every app of the suite must authenticate again")
            case "watch": try await watch(sso)
            default:
                say("usage: \(name) [--account NAME] start|login [--username U --password-stdin] | fetch URL | logout | watch")
                exit(64)
            }
            await sso.close()
        } catch let error as BrokerError {
            say("\(error.message) [\(error.name)]")
            exit(error.name == .notLoggedIn || error.name == .expired ? 2 : 1)
        } catch {
            say("failed: \(error)")
            exit(1)
        }
    }

    /// Uses the suite's session if there is one; logs in otherwise (or always, for `login`).
    private func start(_ sso: SSOClient, forceLogin: Bool, _ arguments: [String]) async throws {
        let status = try await sso.check()
        if status.state == .valid && !forceLogin {
            return say("found the suite's session (\(status.username ?? "?"), valid until \(clock(status.sessionExpiresAt))): no login needed")
        }
        say(status.state == .valid ? "logging in again" : status.state == .expired ? "the session has expired: logging in" : "no credentials: logging in")
        guard let index = arguments.firstIndex(of: "--username"), index + 1 < arguments.count,
              arguments.contains("--password-stdin"), let password = readLine() else {
            return say("(an interactive app would ask for the password here; pass --username U --password-stdin)")
        }
        let session = try await sso.login(username: arguments[index + 1], password: password)
        say("logged in as \(session.username ?? "?"); session expires at \(clock(session.sessionExpiresAt))")
    }

    /// Calls the suite's API with a request the broker signed; the app never sees a password.
    private func fetch(_ sso: SSOClient, _ address: String) async throws {
        guard let url = URL(string: address) else { return say("not a URL: \(address)") }
        // Signed, and followed only within the URL's origin: never the headers to another server.
        let (data, response) = try await sso.data(for: URLRequest(url: url))
        let code = (response as? HTTPURLResponse)?.statusCode ?? 0
        say("GET \(url.path) -> \(code) \(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))")
        if code != 200 { exit(1) }
    }

    /// Follows the session live, as a running app would, reacting to each event.
    private func watch(_ sso: SSOClient) async throws {
        let events = try await sso.events()
        say("watching the suite's session")
        for await event in events {
            switch event.kind {
            case .loggedIn: say("sees a new session (\(event.status?.username ?? "?"), until \(clock(event.status?.sessionExpiresAt)))")
            case .extended: say("session extended until \(clock(event.status?.sessionExpiresAt))")
            case .loggedOut: say("was logged out: dropping its data, asking the user to authenticate again")
            case .expiring: say("the session expires at \(clock(event.status?.sessionExpiresAt)) unless the user is active")
            case .expired: say("the session expired: asking the user to log in")
            }
        }
    }

    private func say(_ text: String) {
        // Unbuffered, so the demo's interleaved output shows events as they happen.
        FileHandle.standardOutput.write(Data("[\(name)] \(text)\n".utf8))
    }

    private func clock(_ time: Double?) -> String {
        guard let time else { return "?" }
        let formatter = DateFormatter()
        formatter.dateFormat = "HH:mm:ss"
        return formatter.string(from: Date(timeIntervalSince1970: time))
    }
}
