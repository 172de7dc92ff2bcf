import MSSOProtocol
import Synchronization

/// A group's device or browser login, and everyone waiting for it: whoever starts it and every
/// login of the group asked for meanwhile (`msso login`, kubectl's plugin, git's helper, an app, a
/// notification's Log in). One device code or browser window per group, however many wait: each
/// waiter is shown the same prompt and gets the same result. A waiter that goes leaves it to the
/// others; when the last one goes, the login is cancelled (its IdP poll or loopback listener ends).
///
/// Waiting and leaving run under one lock, from any thread: leaving is called from a task's
/// cancellation handler, which cannot wait for the broker's actor.
final class SharedLogin: Sendable {
    private struct Waiter {
        var prompt: @Sendable (LoginPrompt, Bool) -> Void
        var joined: Bool
        var continuation: CheckedContinuation<SessionStatus, any Error>
    }

    private struct State {
        var task: Task<Void, Never>?
        var prompt: LoginPrompt?
        var outcome: Result<SessionStatus, any Error>?
        var waiters: [UInt64: Waiter] = [:]
        var nextWaiter: UInt64 = 0
        var abandoned = false
    }

    private let state = Mutex(State())

    /// Who started it, in words (a program and its pid), for those it refuses.
    let startedBy: String
    /// Whether it may end in a new account for the group (its first login, or `newAccount`): then
    /// no other login joins it, and its address or code is shown to whoever started it alone.
    let setsAccount: Bool

    init(startedBy: String = "another program", setsAccount: Bool = false) {
        self.startedBy = startedBy
        self.setsAccount = setsAccount
    }

    /// What a waiter that went is answered (and audited as): as when a login's only caller went.
    static let gone = BrokerError(.loginDenied, "the login was cancelled: the program that asked for it has gone")

    /// The login itself, started by the broker before anyone waits.
    func begin(_ task: Task<Void, Never>) {
        state.withLock { $0.task = task }
    }

    /// Whether everyone left, so the login is ending: a new login of the group starts afresh.
    var abandoned: Bool { state.withLock { $0.abandoned } }

    /// Waits for the login's outcome, shown its prompt (now, if it is known already).
    func wait(prompt: @escaping @Sendable (LoginPrompt, Bool) -> Void, joined: Bool) async throws -> SessionStatus {
        let id = state.withLock { state in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let shown = state.withLock { state -> LoginPrompt? in
                    if let outcome = state.outcome {
                        continuation.resume(with: outcome)
                        return nil
                    }
                    guard !Task.isCancelled else {
                        continuation.resume(throwing: Self.gone)
                        if state.waiters.isEmpty {
                            state.abandoned = true
                            state.task?.cancel()
                        }
                        return nil
                    }
                    state.waiters[id] = Waiter(prompt: prompt, joined: joined, continuation: continuation)
                    return state.prompt
                }
                if let shown { prompt(shown, joined) }
            }
        } onCancel: {
            leave(id)
        }
    }

    /// A waiter goes (its caller hung up); the last one to go ends the login.
    private func leave(_ id: UInt64) {
        let (gone, task) = state.withLock { state -> (Waiter?, Task<Void, Never>?) in
            let gone = state.waiters.removeValue(forKey: id)
            guard gone != nil, state.waiters.isEmpty, state.outcome == nil else { return (gone, nil) }
            state.abandoned = true
            return (gone, state.task)
        }
        gone?.continuation.resume(throwing: Self.gone)
        task?.cancel()
    }

    /// The code or address the user must see: shown to every waiter, and to those who join later.
    func show(_ prompt: LoginPrompt) {
        let waiters = state.withLock { state in
            state.prompt = prompt
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.prompt(prompt, waiter.joined) }
    }

    /// The login's outcome, for every waiter.
    func end(_ outcome: Result<SessionStatus, any Error>) {
        let waiters = state.withLock { state in
            state.outcome = outcome
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.continuation.resume(with: outcome) }
    }
}
