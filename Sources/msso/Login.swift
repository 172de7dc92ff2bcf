import ArgumentParser
import FoundationEssentials
import Glibc
import MSSOClient

struct Login: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "login",
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

    func run() throws {
        try options.run { broker in
            let status: SessionStatus
            if let username {
                guard let line = readLine(strippingNewline: true), !line.isEmpty else {
                    throw BrokerError(.badRequest, "no password on standard input")
                }
                status = try broker.call(Methods.Login.self, LoginArguments(group: options.group, flow: .password, username: username, password: line))
            } else if browser {
                status = try broker.call(Methods.Login.self, LoginArguments(group: options.group, flow: .browser), untilAnswered: true,
                                         onSignal: { signal in if let prompt = signal.browser { Login.open(prompt) } })
            } else {
                status = try Login.device(broker, group: options.group, quiet: options.json)
            }
            if options.json { Output.json(status) } else { Output.print(Output.line(status)) }
        }
    }

    /// A device login: the prompt, a countdown while the user approves, the new session.
    @discardableResult
    static func device(_ broker: BrokerConnection, group: String?, quiet: Bool) throws(BrokerError) -> SessionStatus {
        let countdown = Countdown(quiet: quiet)
        defer { countdown.stop() }
        return try broker.call(Methods.Login.self, LoginArguments(group: group, flow: .device), untilAnswered: true,
                               onSignal: { signal in if let prompt = signal.prompt { countdown.start(prompt) } },
                               tick: { countdown.tick() })
    }

    /// Prints the login address, and opens it in the desktop's browser when there is one.
    static func open(_ prompt: BrowserPrompt) {
        Output.note("To log in, open this address in a browser on this machine:")
        Output.note(prompt.url)
        let environment = ProcessInfo.processInfo.environment
        guard environment["DISPLAY"] != nil || environment["WAYLAND_DISPLAY"] != nil, access("/usr/bin/xdg-open", X_OK) == 0 else { return }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var pid = pid_t()
        let argv = ["/usr/bin/xdg-open", prompt.url].map { (text: String) in strdup(text) } + [nil]
        defer { argv.forEach { free($0) } }
        if posix_spawn(&pid, "/usr/bin/xdg-open", &actions, nil, argv, environ) == 0 {
            Output.note("(opened in your browser)")
        }
    }
}

/// Shows the device prompt and, on a terminal, the time left to approve it.
final class Countdown {
    private let quiet: Bool
    private var prompt: DevicePrompt?

    init(quiet: Bool) { self.quiet = quiet }

    func start(_ prompt: DevicePrompt) {
        self.prompt = prompt
        Output.note("To log in, open \(prompt.verificationURI) and enter the code \(prompt.userCode)")
        if let complete = prompt.verificationURIComplete {
            Output.note("(or open \(complete))")
        }
        if isatty(STDERR_FILENO) != 1 {
            Output.note("Waiting for approval (\(Output.span(prompt.expiresAt - Output.now)) left)…")
            self.prompt = nil // no live countdown off a terminal
        } else {
            tick()
        }
    }

    func tick() {
        guard let prompt else { return }
        Output.toStandardError("\rWaiting for approval… \(Output.span(prompt.expiresAt - Output.now)) left \u{1B}[K")
    }

    func stop() {
        if prompt != nil { Output.toStandardError("\n") }
        prompt = nil
    }
}
