import CDesktopBus
import CMSSOSystem
import FoundationEssentials
import Glibc
import Logging
import MSSOCore
import MSSOProtocol

/// Desktop notifications (freedesktop Notifications, on the session bus) for what the user must
/// act on: `Expiring` ("SSO for G ends in N min", action **Extend**) and `Expired` (including a
/// refresh the IdP refused: "Log in again", action **Log in**, a browser login when there is a
/// display and `xdg-open`, else a device login whose code is shown in the same notification).
///
/// It is a subscriber like any app's connection. One notification per group, replaced (never
/// stacked), closed when the session is extended, logged in or out. Nothing is shown, and
/// nothing fails, when no notification server answers. The text holds group names, times,
/// and a device login's address and code: never a token.
public final class DesktopNotifier: SignalSink, ConfirmationAsker, @unchecked Sendable {
    enum Action: String { case extend, login }

    private let bus: OpaquePointer
    private let broker: Broker
    private let logger: Logger
    private let browser: Bool
    /// Confines `shown` and `loggingIn`, and runs the (blocking, bounded) bus calls.
    private let lane = Workers.Lane()
    private var shown: [AccountName: (id: UInt32, action: Action)] = [:]
    private var loggingIn: Set<AccountName> = []
    /// The new-account notice shown for each group: apart from ``shown``, so that no later
    /// notification of the group (Expiring, say) replaces it before the user has seen it.
    private var announced: [AccountName: UInt32] = [:]
    /// Confirmations shown, by notification id, waiting for the user's answer.
    private var questions: [UInt32: CheckedContinuation<ConfirmationAnswer, Never>] = [:]

    /// How long a confirmation waits for the user; then it counts as denied.
    static let confirmationTimeout = 60.0
    /// What "Allow for 1 hour" allows for.
    static let allowedFor = 3600.0

    /// How long a bus call may take: a hung notification server must not hold anything up.
    static let callTimeout: Int32 = 2000

    private init(bus: OpaquePointer, broker: Broker, logger: Logger, browser: Bool) {
        self.bus = bus
        self.broker = broker
        self.logger = logger
        self.browser = browser
    }

    /// Starts listening for the notification server's actions and subscribes to every configured
    /// group; nil when there is no session bus.
    public static func start(broker: Broker, logger: Logger, environment: [String: String]) async -> DesktopNotifier? {
        // Within the calls' timeout: mssod waits for this before it waits for a SIGTERM.
        let cancellable = g_cancellable_new()
        let connected = Deadline.run(within: Double(callTimeout) / 1000, interrupt: { g_cancellable_cancel(cancellable) }) {
            msso_bus_session(cancellable)
        }
        g_object_unref(cancellable)
        guard let bus = connected else {
            if environment["DBUS_SESSION_BUS_ADDRESS"].map({ !$0.isEmpty }) == true {
                logger.warning("the session bus did not answer within \(callTimeout) ms: no desktop notifications, and registrations with `confirm` are refused, until mssod restarts")
            } else {
                logger.info("no session bus: no desktop notifications")
            }
            return nil
        }
        let owner = msso_bus_daemon_uid(bus)
        guard owner == Int(getuid()) || owner == 0 else {
            // Its notification server would answer `confirm` and see every prompt: another user's.
            logger.warning("the session bus is run by uid \(owner), not by this user: no desktop notifications")
            g_object_unref(UnsafeMutableRawPointer(bus))
            return nil
        }
        let display = environment["DISPLAY"] != nil || environment["WAYLAND_DISPLAY"] != nil
        let notifier = DesktopNotifier(bus: bus, broker: broker, logger: logger, browser: display && access(CMSSO_BROWSER_OPENER, X_OK) == 0)
        // A GMainLoop owns the thread it runs on: a pool thread, for the notifier's life.
        let started = Workers.shared.run {
            msso_listen_for_actions(notifier.bus, { id, action, context in
                guard let action, let context else { return }
                Unmanaged<DesktopNotifier>.fromOpaque(context).takeUnretainedValue().invoked(id, String(cString: action))
            }, Unmanaged.passUnretained(notifier).toOpaque())
        }
        guard started else { return nil }
        _ = try? await broker.subscribe(notifier, groups: nil)
        return notifier
    }

    // MARK: Questions

    /// Asks the user whether the program that ran a registered tool may get a token or a
    /// signature through it: **Allow once**, **Allow for 1 hour**, **Deny**; a click on the
    /// notification itself, closing it, or no answer within ``confirmationTimeout`` deny.
    /// A question about a remote host (an SSH forward) names the host, the group and the verb.
    public func ask(_ request: ConfirmationRequest) async -> ConfirmationAnswer {
        let (summary, body) = Self.question(request)
        return await withCheckedContinuation { continuation in
            lane.async { [self] in
                let keys = ["allow", "Allow once", "allow-hour", "Allow for 1 hour", "deny", "Deny"]
                var pointers = keys.map { strdup($0) } + [nil]
                defer { pointers.forEach { free($0) } }
                let id = pointers.withUnsafeMutableBufferPointer { buffer in
                    buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) {
                        msso_notify(bus, 0, summary, body, $0, 0, Self.callTimeout)
                    }
                }
                guard id != 0 else {
                    continuation.resume(returning: .unavailable)
                    return
                }
                questions[id] = continuation
                lane.after(Self.confirmationTimeout) { [self] in
                    guard let waiting = questions.removeValue(forKey: id) else { return }
                    msso_notify_close(bus, id, Self.callTimeout)
                    waiting.resume(returning: .deny)
                }
            }
        }
    }

    /// The notification's summary and body for `request`.
    static func question(_ request: ConfirmationRequest) -> (summary: String, body: String) {
        let group = shown(request.group)
        if let host = request.host.map(shown) {
            let what = switch request.verb {
            case "sign": "a signature (sign)"
            case "token": "a token (token)"
            case "login": "a device login (login)"
            case "extend": "to extend the session (extend)"
            case "logout": "to log out (logout)"
            default: shown(request.verb)
            }
            return ("Allow \(host) to use SSO for \(group)?",
                    "A program on \(host), reached through msso ssh, asks for \(what) of \(group).")
        }
        let requester = request.requesters.first.map(shown) ?? "a program"
        let above = request.requesters.dropFirst().map(shown)
        let chain = above.isEmpty ? "" : " (run by \(above.joined(separator: ", run by ")))"
        return ("Allow \(requester) to use SSO for \(group)?",
                "\(requester)\(chain) asks \(shown(request.tool)) for \(request.verb == "sign" ? "a signature" : "a token") of \(group).")
    }

    // MARK: Signals in

    public func deliver(_ signal: Signal) {
        guard let config = broker.configuration.groups[signal.group] else { return }
        let session = AccountName(group: signal.group, account: signal.status?.account ?? AccountName.defaultName)
        let group = Self.named(session)
        if signal.signal == .loggedIn, let status = signal.status, status.newAccount == true {
            // Shown whatever `notifications` says: a program that put the suite into another
            // account must be seen.
            announceNewAccount(status)
        }
        guard config.notifications else { return }
        switch signal.signal {
        case .expiring:
            let left = max(1, Int((((signal.status?.sessionExpiresAt ?? 0) - Date().timeIntervalSince1970) / 60).rounded(.up)))
            show(session, summary: "SSO for \(group) ends in \(left) min",
                 body: "Extend it to keep your apps signed in.", action: .extend, label: "Extend")
        case .expired:
            show(session, summary: "Log in again", body: "Your SSO session for \(group) has ended.", action: .login, label: "Log in")
        case .extended, .loggedIn, .loggedOut:
            lane.async { [self] in
                guard let current = shown.removeValue(forKey: session) else { return }
                msso_notify_close(bus, current.id, Self.callTimeout)
            }
        case .devicePrompt, .browserPrompt:
            break
        }
    }

    /// "Now logged in as NAME": a login made its account the group's (its first, or a change).
    /// No action: a click does nothing but close it.
    private func announceNewAccount(_ status: SessionStatus) {
        let session = AccountName(group: status.group, account: status.account ?? AccountName.defaultName)
        let group = Self.named(session)
        let account = status.username.map(Self.shown) ?? "an account the identity provider does not name"
        let who = status.isDefault == true ? "Every app of \(group)" : "Every app that names the account \(Self.shown(session.account)) of \(Self.shown(session.group))"
        let body = if let previous = status.previousAccount.map(Self.shown) {
            "\(who) now acts as \(account), no longer as \(previous). If you did not log in as \(account), run msso logout \(session.options)."
        } else {
            "\(who) acts as \(account) from now on (\(session.account == AccountName.defaultName ? "the group's first account" : "the account's first login")). If you did not log in as \(account), run msso logout \(session.options)."
        }
        let summary = "SSO for \(group): now logged in as \(account)"
        lane.async { [self] in
            var none: [UnsafeMutablePointer<CChar>?] = [nil]
            let id = none.withUnsafeMutableBufferPointer { buffer in
                buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: 1) {
                    // Never expires: it stays until the user closes it.
                    msso_notify(bus, announced[session] ?? 0, summary, body, $0, 0, Self.callTimeout)
                }
            }
            if id == 0 {
                logger.debug("no notification server answered", metadata: ["group": "\(status.group)"])
            } else {
                announced[session] = id
            }
        }
    }

    // MARK: Notifications out

    /// Shows the group's notification, replacing the one it has. `action` is offered as a button
    /// and as the default (a click on the notification).
    private func show(_ session: AccountName, summary: String, body: String, action: Action?, label: String = "") {
        lane.async { [self] in
            let replaces = shown[session]?.id ?? 0
            let keys = action.map { [$0.rawValue, label, "default", label] } ?? []
            var pointers = keys.map { strdup($0) } + [nil]
            defer { pointers.forEach { free($0) } }
            let id = pointers.withUnsafeMutableBufferPointer { buffer in
                buffer.baseAddress!.withMemoryRebound(to: UnsafePointer<CChar>?.self, capacity: buffer.count) {
                    msso_notify(bus, replaces, summary, body, $0, 0, Self.callTimeout)
                }
            }
            guard id != 0 else {
                logger.debug("no notification server answered", metadata: ["group": "\(session.group)"])
                return
            }
            shown[session] = (id, action ?? .login)
            if action == nil { shown[session] = (id, .login) } // a prompt: clicking it starts nothing new
        }
    }

    // MARK: Confirmations

    /// Text from outside (a program's path, an IdP's code or address), safe in a notification:
    /// no control characters (``TerminalText``), and no markup (servers that support body markup
    /// would read `<` and `&`).
    /// The session in a notification's words: its group, and its account unless it is the default one.
    static func named(_ session: AccountName) -> String {
        shown(session.account == AccountName.defaultName ? session.group : "\(session.group) (account \(session.account))")
    }

    static func shown(_ text: String) -> String {
        String(String.UnicodeScalarView(TerminalText.safe(text).unicodeScalars.map { scalar in
            switch scalar {
            case "<": "‹"
            case ">": "›"
            case "&": "+"
            default: scalar
            }
        }))
    }

    // MARK: Actions in

    /// The server says the user chose `action` on notification `id`, or closed it (`key` "") (on
    /// the listener's thread).
    private func invoked(_ id: UInt32, _ key: String) {
        lane.async { [self] in
            if let question = questions.removeValue(forKey: id) {
                let answer: ConfirmationAnswer = switch key {
                case "allow": .allowOnce
                case "allow-hour": .allow(forSeconds: Self.allowedFor)
                default: .deny // Deny, a click on the notification itself, or closing it
                }
                if key != "" { msso_notify_close(bus, id, Self.callTimeout) }
                question.resume(returning: answer)
                return
            }
            guard let (session, entry) = shown.first(where: { $0.value.id == id }) else { return }
            let action = key == "default" ? entry.action : Action(rawValue: key)
            switch action {
            case .extend?:
                Task { await self.extend(session) }
            case .login?:
                guard loggingIn.insert(session).inserted else { return }
                Task {
                    await self.login(session)
                    self.lane.async { self.loggingIn.remove(session) }
                }
            case nil:
                return
            }
        }
    }

    private func extend(_ session: AccountName) async {
        let group = Self.named(session)
        do {
            _ = try await broker.extend(session.group, account: session.account)
            logger.info("extended from a notification", metadata: ["group": "\(group)"])
        } catch let error as BrokerError {
            logger.warning("extend from a notification failed", metadata: ["group": "\(group)", "error": "\(error.name)"])
            if error.name == .expired {
                show(session, summary: "Log in again", body: "Your SSO session for \(group) has ended.", action: .login, label: "Log in")
            }
        } catch {}
    }

    private func login(_ session: AccountName) async {
        let flow: LoginFlow = browser ? .browser : .device
        let group = Self.named(session)
        do {
            _ = try await broker.login(LoginArguments(group: session.group, account: session.account, flow: flow),
                                       requester: "a desktop notification's Log in") { [self] prompt, joined in
                switch prompt {
                case .device(let device):
                    show(session, summary: "Log in to SSO for \(group)",
                         body: "Open \(Self.shown(device.verificationURIComplete ?? device.verificationURI)) and enter the code \(Self.shown(device.userCode)).",
                         action: nil)
                case .browser(let browser) where joined:
                    // A login of the group was already waiting: its window may be open; no second one.
                    show(session, summary: "Log in to SSO for \(group)",
                         body: "A login is already waiting for you: finish it in your browser, or open \(Self.shown(browser.url)).", action: nil)
                case .browser(let browser):
                    Self.open(browser.url)
                }
            }
            logger.info("logged in from a notification", metadata: ["group": "\(group)", "flow": "\(flow.rawValue)"])
        } catch let error as BrokerError {
            logger.warning("login from a notification failed", metadata: ["group": "\(group)", "error": "\(error.name)"])
            show(session, summary: "Log in again", body: "The login for \(group) did not finish: \(Self.shown(error.message))", action: .login,
                 label: "Log in")
        } catch {}
    }

    /// Opens a URL in the desktop's browser (`xdg-open`), detached: no thread waits for it.
    private static func open(_ url: String) {
        _ = cmsso_open_in_browser(CMSSO_BROWSER_OPENER, url)
    }
}
