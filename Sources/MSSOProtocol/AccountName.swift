/// One session of a group: the group, and which of its accounts (`msso login --account NAME`).
///
/// A group holds a session per account, each with its own tokens, window and keyring item. The
/// account a call names none of is the group's default (`default_account`, else the one named
/// ``defaultName`` when it is logged in, else the one logged in first): a name the user chose,
/// in the user's words ("admin", "sandbox"), never a secret and never a trust boundary between
/// programs of the user (registrations are).
public struct AccountName: Codable, Sendable, Hashable, CustomStringConvertible {
    public var group: String
    public var account: String

    public init(group: String, account: String) {
        self.group = group
        self.account = account
    }

    /// The account a login that names none makes: the only one there was before accounts.
    public static let defaultName = "default"
    /// At most this many accounts per group.
    public static let maximumPerGroup = 16
    static let maximumLength = 64

    /// Whether `name` may name an account: 1 to 64 of ASCII letters, digits and `.` `_` `-` `@`
    /// `+`, beginning with a letter or digit (so it is never taken for an option, and reads the
    /// same in a keyring item, a URL's user name and a terminal).
    public static func isValid(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...maximumLength).contains(bytes.count), isAlphanumeric(bytes[0]) else { return false }
        return bytes.allSatisfy { isAlphanumeric($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-")
            || $0 == UInt8(ascii: "@") || $0 == UInt8(ascii: "+") }
    }

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }

    /// Why `name` cannot name an account, in a sentence with the fix; nil when it can.
    public static func problem(_ name: String) -> String? {
        isValid(name) ? nil : "\"\(TerminalText.safe(String(name.prefix(80))))\" cannot name an account: use 1 to 64 letters, digits, `.`, `_`, `-`, `@` or `+`, beginning with a letter or digit"
    }

    /// The session a ``storeName`` names.
    public init(storeName: String) {
        let parts = storeName.split(separator: "\u{1F}", maxSplits: 1, omittingEmptySubsequences: false)
        self.init(group: String(parts[0]), account: parts.count == 2 ? String(parts[1]) : Self.defaultName)
    }

    /// The group's default account is stored where a group's only session was stored before
    /// accounts (so an upgrade loses nothing); another account beside it, under the group's name
    /// and its own, joined by a character no group name may hold.
    public var storeName: String {
        account == Self.defaultName ? group : "\(group)\u{1F}\(account)"
    }

    /// "\"g\"", or "\"g\" (account admin)": for sentences.
    public var description: String {
        account == Self.defaultName ? "\"\(group)\"" : "\"\(group)\" (account \(account))"
    }

    /// The arguments that name this session to `msso`: `--group G`, and `--account A` unless default.
    public var options: String {
        "--group \(group)" + (account == Self.defaultName ? "" : " --account \(account)")
    }
}
