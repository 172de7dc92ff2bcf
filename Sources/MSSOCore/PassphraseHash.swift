import Crypto
import CryptoExtras
import FoundationEssentials

/// A passphrase as the broker keeps it: PBKDF2-HMAC-SHA256 of it with a random salt, never the
/// passphrase itself.
///
/// Why PBKDF2 and this many rounds: the hash lives only in the daemon's memory, so what it must
/// resist is someone who can read that memory (a core dump, swap) guessing offline; 600,000
/// rounds is OWASP's figure for PBKDF2-HMAC-SHA256 (2023). It is computed off the broker's actor.
struct PassphraseHash: Sendable {
    static let rounds = 600_000
    let salt: [UInt8]
    let digest: [UInt8]
    /// ``rounds``; fewer only in unit tests, whose time is the broker's logic, not PBKDF2's.
    let rounds: Int

    init(_ passphrase: String, rounds: Int = Self.rounds) throws {
        var generator = SystemRandomNumberGenerator()
        salt = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        self.rounds = rounds
        digest = try Self.derive(passphrase, salt: salt, rounds: rounds)
    }

    /// Whether `passphrase` is the one hashed; the comparison takes the same time wherever the
    /// digests differ.
    func matches(_ passphrase: String) -> Bool {
        guard let candidate = try? Self.derive(passphrase, salt: salt, rounds: rounds), candidate.count == digest.count else { return false }
        var difference: UInt8 = 0
        for (a, b) in zip(candidate, digest) { difference |= a ^ b }
        return difference == 0
    }

    private static func derive(_ passphrase: String, salt: [UInt8], rounds: Int) throws -> [UInt8] {
        // Unchecked: the library refuses fewer than 210,000 rounds, which only unit tests ask for.
        let key = try KDF.Insecure.PBKDF2.deriveKey(from: Array(passphrase.utf8), salt: salt, using: .sha256,
                                                    outputByteCount: 32, unsafeUncheckedRounds: rounds)
        return key.withUnsafeBytes { Array($0) }
    }
}

extension PassphraseHash: CustomStringConvertible, CustomReflectable {
    var description: String { "PassphraseHash(<redacted>)" }
    var customMirror: Mirror { Mirror(self, children: ["redacted": description]) }
}
