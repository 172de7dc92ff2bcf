/// A question for the user: may this program get a token or a signature of this group through
/// this registered tool? (`confirm = true` on a registration; see ``Confirmations``.)
public struct ConfirmationRequest: Sendable, Hashable {
    /// The access group.
    public var group: String
    /// `sign` or `token`.
    public var verb: String
    /// The registered program that called (e.g. `/usr/bin/git-credential-msso`).
    public var tool: String
    /// The programs that ran it, nearest first, as the kernel names their executables (e.g.
    /// `/usr/bin/git`, `/usr/bin/bash`); at most ``Confirmations/ancestry`` of them.
    public var requesters: [String]

    public init(group: String, verb: String, tool: String, requesters: [String]) {
        (self.group, self.verb, self.tool, self.requesters) = (group, verb, tool, requesters)
    }
}

/// What the user answered.
public enum ConfirmationAnswer: Sendable, Equatable {
    case allowOnce
    /// Allowed, and the same question is answered yes for this many seconds.
    case allow(forSeconds: Double)
    /// Denied, dismissed, or no answer in time.
    case deny
    /// Nobody can be asked: no notification server answers on the session bus.
    case unavailable
}

/// Whoever asks the user: the desktop notifier.
public protocol ConfirmationAsker: Sendable {
    func ask(_ request: ConfirmationRequest) async -> ConfirmationAnswer
}
