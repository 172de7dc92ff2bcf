import ArgumentParser
import CMSSOSystem
import FoundationEssentials
import Glibc
import MSSOClient

struct Login: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "login",
        abstract: "Log in to the group's identity provider; every app of the group shares the login.",
        discussion: """
            By default, the flow that fits this session: in your web browser where there is a \
            desktop (a display and xdg-open), else a device login.
            With --browser: a login in your web browser on this machine (authorization code with \
            PKCE); msso opens it with xdg-open when there is a desktop, and prints the address.
            With --device: msso shows a web address and a code (and a QR code, when qrencode is \
            installed and the terminal is wide enough); approve the login there, on any device, and \
            msso finishes when you have.
            With --username and --password-stdin: a password login (for scripts); the password is \
            read from standard input, never from the command line.
            While a device or browser login of the group waits for you, every further one (another \
            terminal, kubectl, git, an app) joins it: the same code or address, one result.
            A group remembers the account it logs in as (across logouts and restarts): a login \
            that comes back as another account is refused, and nothing is stored. To make another \
            account the group's, log in with --new-account; the change (and a group's first login) \
            is announced on the desktop and in the audit log. A login that may set the account is \
            not joined: its address or code is shown to the command that started it alone.
            """)

    @Flag(help: "Log in through a web browser on this machine.")
    var browser = false

    @Flag(help: "Log in with a code approved on any device (the device flow).")
    var device = false

    @OptionGroup var options: CommonOptions

    @Option(help: "Log in with this username and a password (password grant).")
    var username: String?

    @Flag(help: "Read the password from standard input (with --username).")
    var passwordStdin = false

    @Flag(help: "Let the login end in another account than the group's: every app of the group then acts as it (announced).")
    var newAccount = false

    func validate() throws {
        if passwordStdin && username == nil { throw ValidationError("--password-stdin needs --username") }
        if [browser, device, username != nil].filter({ $0 }).count > 1 { throw ValidationError("give one of --browser, --device and --username") }
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
                status = try broker.call(Methods.Login.self, LoginArguments(group: options.group, account: options.account, flow: .password, username: username, password: line,
                                                                            newAccount: newAccount ? true : nil))
            } else {
                let flow: LoginFlow = browser ? .browser : device ? .device : Login.flowThatFits
                status = try Login.interactive(broker, group: options.group, account: options.account, flow: flow, quiet: options.json, newAccount: newAccount)
            }
            if options.json { Output.json(status) } else { Output.print(Output.line(status)) }
            if status.newAccount == true { Output.note(Login.newAccountNote(status)) }
        }
    }

    /// An interactive login (device or browser): what to show, a countdown while the user
    /// approves, the new session. The broker may join it to a login of the group already waiting
    /// for the user (another terminal, kubectl, an app): then the same code or address is shown,
    /// and no second browser window opened.
    @discardableResult
    static func interactive(_ broker: BrokerConnection, group: String?, account: String? = nil, flow: LoginFlow, quiet: Bool,
                            newAccount: Bool = false) throws(BrokerError) -> SessionStatus {
        let countdown = Countdown(quiet: quiet)
        defer { countdown.stop() }
        return try broker.call(Methods.Login.self, LoginArguments(group: group, account: account, flow: flow, newAccount: newAccount ? true : nil),
                               untilAnswered: true,
                               onSignal: { signal in
                                   if let prompt = signal.prompt { countdown.start(prompt, joined: signal.joined == true) }
                                   if let prompt = signal.browser { Login.open(prompt, joined: signal.joined == true) }
                               },
                               tick: { countdown.tick() })
    }

    /// What a login that made its account the group's says: which account every app now acts as.
    static func newAccountNote(_ status: SessionStatus) -> String {
        let account = status.username ?? "an account the identity provider does not name"
        let session = AccountName(group: status.group, account: status.account ?? AccountName.defaultName)
        let which = session.account == AccountName.defaultName ? "the account of \"\(status.group)\"" : "the account \(session.account) of \"\(status.group)\""
        let apps = status.isDefault == true ? "every app of the group" : "every app that names the account \(session.account)"
        if let previous = status.previousAccount {
            return "\(account) is now \(which), in place of \(previous): \(apps) acts as \(account)."
        }
        return "\(account) is now \(which): a later login to it as another user is refused unless you run `msso login \(session.options) --new-account`."
    }

    /// The browser flow where this session can show a browser (a display, and xdg-open to open
    /// it), else the device flow, whose code can be approved on any device.
    static var flowThatFits: LoginFlow {
        let environment = ProcessInfo.processInfo.environment
        let display = environment["DISPLAY"].map { !$0.isEmpty } == true || environment["WAYLAND_DISPLAY"].map { !$0.isEmpty } == true
        return display && access(CMSSO_BROWSER_OPENER, X_OK) == 0 ? .browser : .device
    }

    /// Prints the login address, and opens it in the desktop's browser when there is one (unless
    /// the login was already waiting: its window may be open).
    static func open(_ prompt: BrowserPrompt, joined: Bool) {
        if joined {
            Output.note("A login of this group is already waiting for you: finish it in your browser, or open this address on this machine:")
            Output.note(prompt.url)
            return
        }
        Output.note("To log in, open this address in a browser on this machine:")
        Output.note(prompt.url)
        guard flowThatFits == .browser, cmsso_open_in_browser(CMSSO_BROWSER_OPENER, prompt.url) == 0 else { return }
        Output.note("(opened in your browser)")
    }
}

/// Shows the device prompt and, on a terminal, the time left to approve it.
final class Countdown {
    private let quiet: Bool
    private var prompt: DevicePrompt?

    init(quiet: Bool) { self.quiet = quiet }

    func start(_ prompt: DevicePrompt, joined: Bool) {
        self.prompt = prompt
        if joined { Output.note("A login of this group is already waiting for approval (started elsewhere):") }
        Output.note("To log in, open \(prompt.verificationURI) and enter the code \(prompt.userCode)")
        if let complete = prompt.verificationURIComplete {
            Output.note("(or open \(complete))")
        }
        if !quiet { QRCode.show(prompt.verificationURIComplete ?? prompt.verificationURI) }
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
