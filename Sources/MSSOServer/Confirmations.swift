import Glibc
import MSSOCore
import MSSOProtocol

/// The user's answers to "may this program get a token through this tool?" (`confirm = true` on a
/// registration, like `ssh-add -c`), asked through the desktop (``ConfirmationAsker``).
///
/// The same question asked while it is being asked joins the one shown (so 20 `git fetch` at
/// once show one notification, and one answer serves them all); "Allow for 1 hour" is remembered
/// for that long, keyed by the whole question (group, verb, tool and the programs that ran it).
/// Bounded: at most ``maximumAsking`` different questions are shown at once (more are refused as
/// Busy) and ``maximumRemembered`` answers are kept.
public actor Confirmations {
    /// How many programs above the tool are named: the one that ran it, and two more (so `git` run
    /// by a script names the script's interpreter too).
    public static let ancestry = 3
    static let maximumAsking = 16
    static let maximumRemembered = 256

    private var asker: (any ConfirmationAsker)?
    private var asking: [ConfirmationRequest: Task<ConfirmationAnswer, Never>] = [:]
    private var allowedUntil: [ConfirmationRequest: Double] = [:]
    /// Callers waiting for each question's answer.
    private var waiting: [ConfirmationRequest: Int] = [:]

    public init() {}

    /// Who asks the user; nil (no notification server): every confirmation is refused.
    public func setAsker(_ asker: (any ConfirmationAsker)?) {
        self.asker = asker
    }

    /// Returns when the user allowed `request`; throws `Forbidden` (denied, no answer, nobody to
    /// ask) or `Busy`.
    func confirm(_ request: ConfirmationRequest, now: Double) async throws(BrokerError) {
        if let until = allowedUntil[request], until > now { return }
        allowedUntil[request] = nil
        guard let asker else { throw Self.nobodyToAsk(request, "mssod has no session bus to ask on") }
        let task: Task<ConfirmationAnswer, Never>
        if let running = asking[request] {
            task = running
        } else {
            guard asking.count < Self.maximumAsking else {
                throw BrokerError(.busy, "\(Self.maximumAsking) confirmations are waiting for your answer already; answer them, then try again")
            }
            task = Task { await asker.ask(request) }
            asking[request] = task
        }
        waiting[request, default: 0] += 1
        let answer = await task.value
        waiting[request] = waiting[request].flatMap { $0 > 1 ? $0 - 1 : nil }
        asking[request] = nil
        switch answer {
        case .allowOnce:
            return
        case .allow(let seconds):
            if allowedUntil.count >= Self.maximumRemembered { allowedUntil = allowedUntil.filter { $0.value > now } }
            if allowedUntil.count < Self.maximumRemembered { allowedUntil[request] = now + seconds }
            return
        case .deny where request.host != nil:
            throw BrokerError(.forbidden, "you did not allow host \(request.host!) to \(request.verb) with \"\(request.group)\" through the SSH forward (denied, dismissed or not answered in time)")
        case .deny:
            throw BrokerError(.forbidden, "you did not allow \(request.requesters.first ?? "this program") to get a token of \"\(request.group)\" through \(request.tool) (denied, dismissed or not answered in time)")
        case .unavailable:
            throw Self.nobodyToAsk(request, "no notification server answered on mssod's session bus")
        }
    }

    /// How many callers wait for the answer to `request` now.
    func waiters(for request: ConfirmationRequest) -> Int {
        waiting[request] ?? 0
    }

    /// The refusal when the user cannot be asked, and why not.
    private static func nobodyToAsk(_ request: ConfirmationRequest, _ why: String) -> BrokerError {
        if let host = request.host {
            return BrokerError(.forbidden, "calls from host \(host) wait for your confirmation (confirm = true in its [forward] table), and \(why) (no notification server); run msso ssh from a desktop session, or set confirm = false for the host")
        }
        return BrokerError(.forbidden, "\(request.tool) asks for your confirmation before it hands out a token of \"\(request.group)\" (confirm = true), and \(why) (no notification server); run the command from a desktop session, or ask your administrator")
    }

    /// The executables of the processes that ran `pid`, nearest first (``ancestry`` at most), as
    /// the kernel names them; a process whose executable cannot be read is named by its pid.
    static func requesters(of pid: Int32) -> [String] {
        var names: [String] = []
        var current = pid
        while names.count < ancestry, let parent = Callers.parent(of: current), parent > 1 {
            names.append(Callers.readLink("/proc/\(parent)/exe") ?? "process \(parent)")
            current = parent
        }
        return names
    }
}
