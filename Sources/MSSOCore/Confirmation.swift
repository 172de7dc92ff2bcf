/// A question for the user: may this program get a token or a signature of this group through
/// this registered tool? (`confirm = true` on a registration; see ``Confirmations``.) Or, with
/// ``host``: may this remote host, reached through an SSH forward, make this call on this group?
/// (`confirm` of a `[forward."HOST"]` table.)
public struct ConfirmationRequest: Sendable, Hashable {
    /// The access group.
    public var group: String
    /// `sign` or `token`; from a host, any verb its table allows.
    public var verb: String
    /// The remote host asking, through an SSH forward (then ``tool`` and ``requesters`` are
    /// empty: the local ssh process that carries the call is nobody's identity).
    public var host: String?
    /// The registered program that called (e.g. `/usr/bin/git-credential-msso`).
    public var tool: String
    /// The programs that ran it, nearest first, as the kernel names their executables (e.g.
    /// `/usr/bin/git`, `/usr/bin/bash`); at most ``Confirmations/ancestry`` of them.
    public var requesters: [String]

    public init(group: String, verb: String, tool: String, requesters: [String]) {
        (self.group, self.verb, self.tool, self.requesters) = (group, verb, tool, requesters)
    }

    /// The forward (one `msso ssh` session) a host's call came through: "Allow for 1 hour" holds
    /// for that session only, not for a later forward under the same host name (another machine,
    /// or any program of the user, may open one).
    public var forward: String?

    /// The question about a remote host's call.
    public init(group: String, verb: String, host: String, forward: String) {
        (self.group, self.verb, self.host, tool, requesters) = (group, verb, host, "", [])
        self.forward = forward
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
