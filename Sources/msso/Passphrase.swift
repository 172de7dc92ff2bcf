import Glibc
import MSSOClient

/// The passphrase of `msso lock` and `msso unlock`: one line of standard input, or typed at the
/// terminal without echo. Never an argument (every user of the machine can read those).
enum Passphrase {
    static func read(fromStandardInput: Bool, confirm: Bool) throws(BrokerError) -> String {
        if fromStandardInput {
            guard let line = readLine(strippingNewline: true), !line.isEmpty else {
                throw BrokerError(.badRequest, "no passphrase on standard input")
            }
            return line
        }
        let tty = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard tty >= 0 else {
            throw BrokerError(.badRequest, "no terminal to ask for the passphrase on; give it on standard input with --passphrase-stdin")
        }
        defer { close(tty) }
        let first = try ask(tty, "Passphrase for msso: ")
        guard !first.isEmpty else { throw BrokerError(.badRequest, "the passphrase is empty") }
        if confirm, try ask(tty, "Again, to confirm: ") != first {
            throw BrokerError(.badRequest, "the two passphrases differ; nothing was changed")
        }
        return first
    }

    /// Echo is off while the user types, and back on afterwards, even after Ctrl-C.
    private static func ask(_ tty: Int32, _ prompt: String) throws(BrokerError) -> String {
        var saved = termios()
        let isTerminal = tcgetattr(tty, &saved) == 0
        if isTerminal {
            var quiet = saved
            quiet.c_lflag &= ~tcflag_t(ECHO)
            quiet.c_lflag |= tcflag_t(ECHONL)
            Restore.install(tty, saved)
            tcsetattr(tty, TCSAFLUSH, &quiet)
        }
        write(tty, prompt) // only now: what is typed after seeing it is never echoed
        defer {
            if isTerminal {
                tcsetattr(tty, TCSAFLUSH, &saved)
                Restore.remove()
            }
        }
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while Glibc.read(tty, &byte, 1) == 1, byte != 10 {
            guard line.count < 4096 else { throw BrokerError(.badRequest, "the passphrase is too long") }
            line.append(byte)
        }
        defer { for index in line.indices { line[index] = 0 } }
        return String(decoding: line, as: UTF8.self)
    }

    private static func write(_ tty: Int32, _ text: String) {
        _ = text.utf8CString.withUnsafeBufferPointer { Glibc.write(tty, $0.baseAddress, $0.count - 1) }
    }
}

/// Puts the terminal's echo back when a signal ends the command while a passphrase is typed.
private enum Restore {
    nonisolated(unsafe) static var tty: Int32 = -1
    nonisolated(unsafe) static var saved = termios()

    static func install(_ fd: Int32, _ settings: termios) {
        tty = fd
        saved = settings
        for sig in [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP] {
            signal(sig) { received in
                if Restore.tty >= 0 { tcsetattr(Restore.tty, TCSAFLUSH, &Restore.saved) }
                signal(received, SIG_DFL)
                raise(received)
            }
        }
    }

    static func remove() {
        tty = -1
        for sig in [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP] { signal(sig, SIG_DFL) }
    }
}
