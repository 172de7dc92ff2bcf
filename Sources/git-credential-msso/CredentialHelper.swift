import Glibc
import MSSOClient

/// git-credential-msso: git's credential helper protocol (gitcredentials(7)) over msso.
///
///     git config --global credential.https://git.example.com.helper 'msso --group com.example.suite'
///
/// git then runs `git-credential-msso --group G get|store|erase` with `key=value` lines on
/// standard input. `get` answers a fresh access token as the password; `erase` (the server
/// refused it) makes the next `get` use a freshly refreshed token; `store` does nothing. With no
/// valid session it says how to log in, on standard error, and tells git to stop (`quit=1`)
/// rather than prompt for a password that would not work; it never prompts.
@main
struct CredentialHelper {
    static let usage = """
        usage: git-credential-msso [--group G] [--account A] [--username NAME] [--socket PATH] [--next] get|store|erase
          --account A      the account of the group (default: $MSSO_ACCOUNT, else the user name in the
                           remote's URL, https://A@host/…, else the group's default account)
          --username NAME  the username given to git (default: oauth2, which token-checking servers accept)
          --next           with no session, let git try its next helper instead of stopping
        """

    static func main() {
        var arguments = CommandLine.arguments.dropFirst()
        var group: String?, account: String?, username = "oauth2", socket: String?, next = false, action: String?
        while let argument = arguments.popFirst() {
            switch argument {
            case "--group", "-g": group = arguments.popFirst()
            case "--account": account = arguments.popFirst()
            case "--username": username = arguments.popFirst() ?? username
            case "--socket": socket = arguments.popFirst()
            case "--next": next = true
            case "get", "store", "erase": action = argument
            case "--help", "-h": say(usage, lines: true); exit(0)
            default: say("git-credential-msso: unknown argument \(argument)"); say(usage, lines: true); exit(ExitStatus.usage.rawValue)
            }
        }
        let request = readRequest() // git always writes the request; read it whole before answering
        guard let action else { say(usage, lines: true); exit(ExitStatus.usage.rawValue) }
        guard action != "store" else { exit(0) } // the broker keeps the tokens; nothing to store
        do throws(BrokerError) {
            let broker = try BrokerConnection.connect(socketPath: socket, clientName: "git-credential-msso", timeout: 10)
            defer { broker.close() }
            let chosen = account ?? environmentAccount() ?? urlAccount(request, besides: username)
            let token = try broker.call(Methods.Token.self, .init(group: group, account: chosen, renew: action == "erase",
                                                                 resource: resource(of: request)))
            guard action == "get" else { exit(0) }
            guard TerminalText.safe(token.accessToken) == token.accessToken else {
                // A line break would add lines of its own to git's answer: give none.
                say("git-credential-msso: the access token of the group holds control characters; not giving it to git")
                exit(0)
            }
            var answer = ""
            for key in ["protocol", "host", "path"] { if let value = request[key] { answer += "\(key)=\(value)\n" } }
            let given = request["username"].flatMap { TerminalText.safe($0) == $0 && !$0.isEmpty ? $0 : nil } ?? username
            answer += "username=\(given)\npassword=\(token.accessToken)\npassword_expiry_utc=\(Int(token.expiresAt))\n"
            write(answer, to: 1)
        } catch {
            guard action == "get" else { exit(0) } // erase: git is giving up anyway
            say("git-credential-msso: \(error.message)")
            // Not a server the group's tokens are for: no answer, and git may ask its next helper
            // (or the user) for that server's credentials, as it would without msso.
            if !next && error.name != .resourceForbidden { write("quit=1\n", to: 1) }
            exit(0)
        }
    }

    /// `MSSO_ACCOUNT`, when set: the account a terminal works as.
    static func environmentAccount() -> String? {
        guard let value = getenv("MSSO_ACCOUNT") else { return nil }
        let text = String(cString: value)
        return text.isEmpty ? nil : text
    }

    /// The user name in the remote's URL (`https://admin@git.example.com/…`, git's own way to pick
    /// a credential) as the account, unless it is the one this helper answers with (`oauth2`).
    static func urlAccount(_ request: [String: String], besides ours: String) -> String? {
        guard let name = request["username"], name != ours, !name.isEmpty else { return nil }
        return name
    }

    /// Where git will send the credential: `protocol://host/path` (the path when git sends one,
    /// with `credential.useHttpPath`; else the origin alone, `protocol://host`, which the broker
    /// reads as "path unknown": where two entries of a group share the server, it cannot tell
    /// whose token git wants), which the broker holds to the group's `resources`. Nil when git
    /// names no host. git sends the path decoded: it is encoded again
    /// (all but unreserved characters, sub-delimiters, `:`, `@` and `/`), so that a space or a
    /// `%` in it is read as the server will read it.
    static func resource(of request: [String: String]) -> String? {
        guard let scheme = request["protocol"], let host = request["host"], !scheme.isEmpty, !host.isEmpty else { return nil }
        let kept = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/".utf8)
        let digits = Array("0123456789ABCDEF".utf8)
        guard let named = request["path"] else { return "\(scheme)://\(host)" }
        var path: [UInt8] = []
        for byte in named.utf8 {
            if kept.contains(byte) { path.append(byte) } else { path += [UInt8(ascii: "%"), digits[Int(byte >> 4)], digits[Int(byte & 15)]] }
        }
        return "\(scheme)://\(host)/" + String(decoding: path, as: UTF8.self)
    }

    /// The `key=value` lines git writes, up to a blank line or the end (at most 64 KiB).
    static func readRequest() -> [String: String] {
        var request: [String: String] = [:]
        var read = 0
        while let line = readLine(strippingNewline: true), !line.isEmpty, read < 65536 {
            read += line.utf8.count + 1
            guard let equals = line.firstIndex(of: "=") else { continue }
            request[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        return request
    }

    /// A line on standard error (git shows it to the user), control characters shown as `?`;
    /// with `lines`, a text of the helper's own whose newlines are kept.
    static func say(_ text: String, lines: Bool = false) {
        write(TerminalText.safe(text, newlines: lines) + "\n", to: 2)
    }

    static func write(_ text: String, to fd: Int32) {
        let bytes = Array(text.utf8)
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + written, $0.count - written) }
            guard count > 0 else { return }
            written += count
        }
    }
}
