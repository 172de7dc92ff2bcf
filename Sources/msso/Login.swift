import ArgumentParser
import Foundation
import MSSOClient

struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Log in to the group's identity provider; every app of the group shares the login.",
        discussion: """
            Without --username: a device login. msso shows a web address and a code; approve the \
            login there (on any device), and msso finishes when you have.
            With --username and --password-stdin: a password login (for scripts); the password is \
            read from standard input, never from the command line.
            With --browser: a login in your web browser on this machine (authorization code with \
            PKCE); msso opens it with xdg-open when there is a desktop, and prints the address.
            """)

    @Flag(help: "Log in through a web browser on this machine.")
    var browser = false

    @OptionGroup var options: CommonOptions

    @Option(help: "Log in with this username and a password (password grant).")
    var username: String?

    @Flag(help: "Read the password from standard input (with --username).")
    var passwordStdin = false

    func validate() throws {
        if passwordStdin && username == nil { throw ValidationError("--password-stdin needs --username") }
        if browser && username != nil { throw ValidationError("give --browser or --username, not both") }
        if username != nil && !passwordStdin {
            throw ValidationError("give the password on standard input with --password-stdin (never on the command line)")
        }
    }

    func run() async throws {
        try await options.run { client in
            let status: SessionStatus
            if let username {
                guard let line = readLine(strippingNewline: true), !line.isEmpty else {
                    throw BrokerError(.badRequest, "no password on standard input")
                }
                status = try await client.login(group: options.group, username: username, password: line)
            } else if browser {
                status = try await client.loginWithBrowser(group: options.group) { Login.open($0) }
            } else {
                let countdown = Countdown(quiet: options.json)
                status = try await client.loginWithDevice(group: options.group) { countdown.start($0) }
                countdown.stop()
            }
            if options.json { Output.json(status) } else { print(Output.line(status)) }
        }
    }
}

extension Login {
    /// Prints the login address, and opens it in the desktop's browser when there is one.
    static func open(_ prompt: BrowserPrompt) {
        let err = FileHandle.standardError
        err.write(Data("To log in, open this address in a browser on this machine:\n\(prompt.url)\n".utf8))
        let environment = ProcessInfo.processInfo.environment
        guard environment["DISPLAY"] != nil || environment["WAYLAND_DISPLAY"] != nil,
              FileManager.default.isExecutableFile(atPath: "/usr/bin/xdg-open") else { return }
        let opener = Process()
        opener.executableURL = URL(fileURLWithPath: "/usr/bin/xdg-open")
        opener.arguments = [prompt.url]
        opener.standardOutput = FileHandle.nullDevice
        opener.standardError = FileHandle.nullDevice
        if (try? opener.run()) != nil { err.write(Data("(opened in your browser)\n".utf8)) }
    }
}

/// Shows the device prompt and, on a terminal, the time left to approve it.
final class Countdown: @unchecked Sendable {
    private let quiet: Bool
    private var timer: DispatchSourceTimer?
    private let lock = NSLock()

    init(quiet: Bool) { self.quiet = quiet }

    func start(_ prompt: DevicePrompt) {
        let err = FileHandle.standardError
        err.write(Data("To log in, open \(prompt.verificationURI) and enter the code \(prompt.userCode)\n".utf8))
        if let complete = prompt.verificationURIComplete {
            err.write(Data("(or open \(complete))\n".utf8))
        }
        guard isatty(STDERR_FILENO) == 1 else {
            err.write(Data("Waiting for approval (\(Output.span(prompt.expiresAt - Date().timeIntervalSince1970)) left)…\n".utf8))
            return
        }
        let timer = DispatchSource.makeTimerSource()
        timer.schedule(deadline: .now(), repeating: 1)
        timer.setEventHandler {
            let left = max(0, prompt.expiresAt - Date().timeIntervalSince1970)
            err.write(Data("\rWaiting for approval… \(Output.span(left)) left \u{1B}[K".utf8))
        }
        lock.withLock { self.timer = timer }
        timer.resume()
    }

    func stop() {
        lock.withLock {
            if timer != nil { FileHandle.standardError.write(Data("\n".utf8)) }
            timer?.cancel()
            timer = nil
        }
    }
}
