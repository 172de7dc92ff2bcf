import FoundationEssentials
import Glibc
import MSSOProtocol

/// The account a group is logged in as, remembered across logouts and restarts: the provider's
/// subject (`sub` of the login's checked ID token), and the name people know it by, for sentences.
/// Not a secret: it says who, never holds a token.
public struct RememberedAccount: Codable, Sendable, Equatable {
    /// The issuer the subject is from: a subject means nothing at another provider.
    public var issuer: String
    public var subject: String
    public var username: String?
    /// When it became the group's account.
    public var since: Double

    public init(issuer: String, subject: String, username: String?, since: Double) {
        self.issuer = issuer
        self.subject = subject
        self.username = username
        self.since = since
    }

    /// The account in words: its name, else its subject.
    public var shown: String { username ?? "the account with subject \(subject)" }
}

/// Where the groups' accounts are kept (a file in the user's state directory, ``AccountFile``).
/// It must outlive a logout: what it remembers is what a later login is compared with.
public protocol AccountMemory: Sendable {
    /// Every group's account as kept. Never throws: what cannot be read is left out, and `damaged`
    /// says so in a sentence (then the broker knows no account for those groups, and says so when
    /// a login sets one).
    func load() async -> (accounts: [String: RememberedAccount], damaged: String?)
    /// Replaces what is kept; returns once it is written (or throws saying why not).
    func save(_ accounts: [String: RememberedAccount]) async throws
}

/// What the broker knows of the groups' accounts (its ``Broker/accountBook``).
struct AccountBook {
    var memory: (any AccountMemory)?
    var accounts: [String: RememberedAccount] = [:]
    var loaded = false
    var loading: Task<(accounts: [String: RememberedAccount], damaged: String?), Never>?
    /// Why the kept accounts could not all be read, when they could not.
    var damaged: String?
    /// The name of the user mssod runs as, for `account = "login-user"`.
    var loginUser: String? = AccountBook.userName()

    /// The Unix user this process runs as, by the password database; nil when it has no entry.
    static func userName() -> String? {
        guard let entry = getpwuid(getuid()), let name = entry.pointee.pw_name else { return nil }
        let text = String(cString: name)
        return text.isEmpty ? nil : text
    }

    /// The session's account, when one is remembered for the group's present issuer.
    func account(of config: GroupConfig, _ session: AccountName) -> RememberedAccount? {
        guard let known = accounts[session.storeName], known.issuer.utf8.elementsEqual(config.issuer.utf8) else { return nil }
        return known
    }

    /// The accounts of `group` besides the default one that a login named, in no order.
    func namedAccounts(of group: String) -> [String] {
        let prefix = group + "\u{1F}"
        return accounts.keys.compactMap { $0.hasPrefix(prefix) ? String($0.dropFirst(prefix.count)) : nil }
    }
}

/// What a login's account check found: whether it made the account the group's (its first, or an
/// explicit change), and the one it replaced.
struct AccountOutcome {
    var isNew = false
    var previous: RememberedAccount?
    /// The account to remember from now on (nil: forget the group's, when the login's account
    /// cannot be named).
    var remember: RememberedAccount?
    /// Whether what is kept changes.
    var changes = false
}

/// The account rules of a login, as a pure function of what is known (``Broker`` applies it
/// before anything is stored):
///
/// - the administrator's `account = "login-user"` (``GroupConfig/account``): the ID token's
///   `account_claim` must be the name of the user mssod runs as, whatever else is asked;
/// - a group that remembers an account takes a login only as that account (the same `sub` from
///   the same issuer), unless the caller asked for a new one (`newAccount`);
/// - a login that cannot be named (no ID token) is taken only where no account is remembered, or
///   with `newAccount` (then the group remembers none).
enum AccountRules {
    static let maximumShown = 255

    static func check(_ config: GroupConfig, _ key: AccountName, tokens: TokenSet, newAccount: Bool, remembered: RememberedAccount?,
                      loginUser: String?, now: Double) throws(BrokerError) -> AccountOutcome {
        let name = config.name
        let got = shown(tokens)
        if config.account == .loginUser {
            let claim = config.accountClaim
            guard let user = loginUser else {
                throw BrokerError(.loginDenied, "the administrator ties \"\(name)\" to your login name (account = \"login-user\"), and uid \(getuid()) has no name in the password database; nothing was stored; ask your administrator")
            }
            guard let value = tokens.claims[claim] else {
                throw BrokerError(.loginDenied, "the administrator ties \"\(name)\" to your login name, \(user) (account = \"login-user\"), and the identity provider's ID token names no `\(claim)` to check it against, so the login (as \(got)) was refused and nothing was stored; ask your administrator (`account_claim`, and the provider's claims)")
            }
            guard value.utf8.elementsEqual(user.utf8) else {
                throw BrokerError(.loginDenied, "this login came back as \(clipped(value)) (`\(claim)`), but the administrator ties \"\(name)\" to your login name, \(user) (account = \"login-user\"): nothing was stored, and the login's tokens were revoked; log in as \(user)")
            }
        }
        guard let subject = tokens.subject else {
            if key.account != AccountName.defaultName {
                throw BrokerError(.loginDenied, "the identity provider of \"\(name)\" gave no ID token, so msso cannot tell which user the account \(key.account) is, nor keep it apart from the group's others: nothing was stored, and the login's tokens were revoked; ask for `openid` in the group's `scopes`, or log in without --account")
            }
            if let remembered, !newAccount {
                throw BrokerError(.loginDenied, "the identity provider of \"\(name)\" gave no ID token, so msso cannot tell whether this login is the group's account, \(remembered.shown): nothing was stored, and the login's tokens were revoked; to log the group in as whichever account this is, run `msso login --group \(name) --new-account`")
            }
            // Nothing to compare with from now on: the group's account is unknown.
            return AccountOutcome(isNew: true, previous: remembered, remember: nil, changes: remembered != nil)
        }
        let account = RememberedAccount(issuer: config.issuer, subject: subject, username: tokens.username, since: now)
        guard let remembered else { return AccountOutcome(isNew: true, previous: nil, remember: account, changes: true) }
        if remembered.subject.utf8.elementsEqual(subject.utf8) {
            // The same account; a name it changed since is kept up to date (for sentences only).
            var same = remembered
            same.username = tokens.username ?? remembered.username
            return AccountOutcome(isNew: false, previous: nil, remember: same, changes: same != remembered)
        }
        guard newAccount else {
            let which = key.account == AccountName.defaultName ? "the account of \"\(name)\"" : "the account \(key.account) of \"\(name)\""
            throw BrokerError(.loginDenied, "this login came back as \(got), but \(which) is \(remembered.shown) (since \(day(remembered.since))): nothing was stored, and the login's tokens were revoked. To go on as \(remembered.shown), log in as \(remembered.shown); to keep \(got) beside it, log in with `--account NAME` (another name); to make \(got) \(which) for every app, run `msso login \(key.options) --new-account`")
        }
        return AccountOutcome(isNew: true, previous: remembered, remember: account, changes: true)
    }

    /// Whether a login started with `newAccount` may end in an account other than the one
    /// remembered: then it is never joined (``SharedLogin/setsAccount``).
    static func maySetAccount(_ config: GroupConfig, newAccount: Bool, remembered: RememberedAccount?) -> Bool {
        if config.account == .loginUser { return false } // only the login user's name is ever taken
        return newAccount || remembered == nil
    }

    /// The login's account in words.
    static func shown(_ tokens: TokenSet) -> String {
        if let username = tokens.username { return clipped(username) }
        if let subject = tokens.subject { return "the account with subject \(clipped(subject))" }
        return "an account the identity provider does not name"
    }

    static func clipped(_ text: String) -> String {
        text.utf8.count <= maximumShown ? text : String(decoding: Array(text.utf8.prefix(maximumShown)), as: UTF8.self) + "…"
    }

    /// A time as a UTC date, for sentences.
    static func day(_ time: Double) -> String {
        guard time.isFinite, time > 0, time < 7_258_118_400 else { return "an unknown date" }
        var seconds = time_t(time)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))"
    }
}

/// The accounts kept in a file of the user's state directory (`$XDG_STATE_HOME/msso/accounts.json`),
/// which a logout leaves alone. It is the user's file: any program of the user can write it, so
/// what is read is checked as hostile (a regular file, no link, at most ``maximumSize`` bytes,
/// each entry's fields bounded and free of control characters; what fails is left out, with a
/// warning), and nothing read can widen what a login may do: a login is compared with it byte for
/// byte, and a missing or unreadable entry means "no account known", which makes the next login
/// an announced new account.
public final class AccountFile: AccountMemory, @unchecked Sendable {
    public let path: String
    /// Writes one at a time, in the order asked: a later one holds every change of an earlier one.
    private let lane = Workers.Lane()
    static let maximumSize = 256 * 1024
    static let maximumGroups = 1024

    public init(path: String) {
        self.path = path
    }

    struct Document: Codable {
        var version: Int
        var groups: [String: RememberedAccount]
    }

    public func load() async -> (accounts: [String: RememberedAccount], damaged: String?) {
        await withCheckedContinuation { continuation in
            lane.async { continuation.resume(returning: self.read()) }
        }
    }

    public func save(_ accounts: [String: RememberedAccount]) async throws {
        let text: Data
        do {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
            text = try encoder.encode(Document(version: 1, groups: accounts))
        } catch {
            throw BrokerError(.internal, "the groups' accounts could not be written down")
        }
        let failure: String? = await withCheckedContinuation { continuation in
            lane.async { continuation.resume(returning: self.write(text)) }
        }
        if let failure { throw BrokerError(.internal, failure) }
    }

    /// The file's accounts; nil `damaged` when it was read whole (or is not there).
    func read() -> (accounts: [String: RememberedAccount], damaged: String?) {
        switch StateFile.read(path, maximumSize: Self.maximumSize) {
        case .success(nil): return ([:], nil)
        case .success(let data?): return Self.parse(data, path: path)
        case .failure(let problem): return ([:], problem.message)
        }
    }

    /// The accounts of a file's bytes: every entry that is sound, and what was not.
    static func parse(_ data: Data, path: String) -> (accounts: [String: RememberedAccount], damaged: String?) {
        guard let document = try? JSONDecoder().decode(LooseDocument.self, from: data), document.version == 1 else {
            return ([:], "\(path) is not a file of accounts msso wrote")
        }
        var accounts: [String: RememberedAccount] = [:]
        var dropped = 0
        for (group, entry) in document.groups {
            guard accounts.count < maximumGroups, let account = entry.account, isSessionName(group) else {
                dropped += 1
                continue
            }
            accounts[group] = account
        }
        return (accounts, dropped == 0 ? nil : "\(path): \(dropped) entr\(dropped == 1 ? "y" : "ies") that msso could not have written were left out")
    }

    /// A key of the file: a group's name (its default account), or a group's name and an account's
    /// joined as ``AccountName/storeName`` joins them.
    static func isSessionName(_ key: String) -> Bool {
        let parts = key.split(separator: "\u{1F}", maxSplits: 1, omittingEmptySubsequences: false)
        return isSound(String(parts[0]), maximumBytes: 4096) && (parts.count == 1 || AccountName.isValid(String(parts[1])))
    }

    /// Text a file of the user's may hold: not empty, at most `maximumBytes`, no control
    /// character (C0, DEL, C1), bidi control or line separator.
    static func isSound(_ text: String, maximumBytes: Int) -> Bool {
        guard !text.isEmpty, text.utf8.count <= maximumBytes else { return false }
        return !text.unicodeScalars.contains { scalar in
            switch scalar.value {
            case 0x00..<0x20, 0x7F...0x9F, 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069, 0x2028, 0x2029: true
            default: false
            }
        }
    }

    /// The file as read: every field optional, so that one bad entry leaves the others.
    struct LooseDocument: Decodable {
        var version: Int
        var groups: [String: LooseEntry]
    }

    struct LooseEntry: Decodable {
        var account: RememberedAccount?

        init(from decoder: Decoder) throws {
            enum Key: String, CodingKey { case issuer, subject, username, since }
            guard let c = try? decoder.container(keyedBy: Key.self),
                  let issuer = try? c.decode(String.self, forKey: .issuer), isSound(issuer, maximumBytes: 2048),
                  let subject = try? c.decode(String.self, forKey: .subject), isSound(subject, maximumBytes: 1024) else {
                account = nil
                return
            }
            // A name that could not be shown is dropped (the subject still counts); a time that is no time reads as none.
            let username = (try? c.decodeIfPresent(String.self, forKey: .username)).flatMap { $0 }.flatMap { isSound($0, maximumBytes: 255) ? $0 : nil }
            let since = (try? c.decodeIfPresent(Double.self, forKey: .since)).flatMap { $0 }.flatMap { Credential.plausible($0) ? $0 : nil } ?? 0
            account = RememberedAccount(issuer: issuer, subject: subject, username: username, since: since)
        }
    }

    /// Writes `text` in place of the file, whole or not at all; nil, or why not.
    func write(_ text: Data) -> String? {
        StateFile.write(text, to: path)
    }
}
