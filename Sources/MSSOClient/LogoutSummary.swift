import MSSOProtocol

extension Methods.Logout.Result {
    /// What a person is told after a logout: which sessions ended, then, once for each session
    /// whose tokens its identity provider still honours, plainly what stays valid and until when.
    /// `time` formats a Unix time for the reader. The text is the broker's: filter it before
    /// printing (``TerminalText``).
    public func summary(time: (Double) -> String) -> [String] {
        guard !loggedOut.isEmpty else { return ["No SSO session was active."] }
        let ended = sessions.map { $0.map { $0.account == AccountName.defaultName ? $0.group : "\($0.group) (account \($0.account))" } } ?? loggedOut
        var lines = ["Logged out of \(ended.joined(separator: ", "))."]
        for session in notRevoked ?? [] {
            let access = session.accessTokenExpiresAt.map { "its last access token until \(time($0))" }
            let refresh = session.refreshToken ? "its refresh token until the provider expires it" : nil
            let minted = session.mintedTokens.map { "\($0) token\($0 == 1 ? "" : "s") minted for one server or app" }
            let valid = [access, refresh, minted].compactMap { $0 }.joined(separator: " and ")
            let name = session.account.map { $0 == AccountName.defaultName ? "" : " (account \($0))" } ?? ""
            lines.append("\"\(session.group)\"\(name): not revoked at the identity provider: \(session.reason). Every app here is logged out, "
                         + (valid.isEmpty ? "and its tokens have expired." : "but a copy of its tokens taken earlier stays valid there: \(valid)."))
        }
        return lines
    }
}
