import ArgumentParser
import MSSOClient

struct Lock: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lock",
        abstract: "Lock msso with a passphrase: no app signs, gets a token or logs in until `msso unlock`.",
        discussion: """
            Asks for a passphrase at the terminal (twice, without echo), or reads one line of \
            standard input with --passphrase-stdin. mssod keeps only a salted hash of it, in \
            memory: restarting mssod lifts the lock. Sessions are kept (their windows keep \
            running); status, check and logout still work. Exit status 8 when already locked.
            """)

    @OptionGroup var options: CommonOptions

    @Flag(help: "Read the passphrase from standard input (one line).")
    var passphraseStdin = false

    func run() throws {
        try options.run { broker in
            let passphrase = try Passphrase.read(fromStandardInput: passphraseStdin, confirm: true)
            let state = try broker.call(Methods.Lock.self, PassphraseArguments(passphrase: passphrase))
            if options.json { Output.json(state) } else { Output.print("msso is locked: no app signs or gets a token until `msso unlock`.") }
        }
    }
}

struct Unlock: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "unlock",
        abstract: "Lift `msso lock`, with the passphrase it was set with.",
        discussion: """
            Asks for the passphrase at the terminal (without echo), or reads one line of standard \
            input with --passphrase-stdin. A wrong passphrase is answered late, 1 s after the \
            first wrong one in a row, then 2, 4, 8, 16, 32 and at most 60 s, and until then any \
            other unlock is refused at once (exit status 8).
            """)

    @OptionGroup var options: CommonOptions

    @Flag(help: "Read the passphrase from standard input (one line).")
    var passphraseStdin = false

    func run() throws {
        var common = options.values
        common.timeout = max(common.timeout, 90) // a wrong passphrase is answered up to 60 s late
        try common.run { broker in
            let passphrase = try Passphrase.read(fromStandardInput: passphraseStdin, confirm: false)
            let state = try broker.call(Methods.Unlock.self, PassphraseArguments(passphrase: passphrase))
            if common.json { Output.json(state) } else { Output.print("msso is unlocked.") }
        }
    }
}
