/// What msso counts as this machine's own address, where plain http may carry a token or a login
/// (an issuer, a group's `resources`, a provider's endpoints): the one definition, for all of them.
public enum Loopback {
    /// `localhost`, `::1` (bracketed or not), or an IPv4 literal in 127.0.0.0/8 (four decimal parts,
    /// the first 127), in any letter case. A name that merely begins with "127."
    /// (`127.attacker.example`) is any host on the internet.
    public static func isHost(_ host: String) -> Bool {
        let host = host.lowercased()
        if host == "localhost" || host == "::1" || host == "[::1]" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { part in
            (1...3).contains(part.utf8.count) && part.utf8.allSatisfy { (48...57).contains($0) } && Int(part)! <= 255
        }
    }
}
