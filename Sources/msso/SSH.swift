import ArgumentParser
import Glibc
import MSSOClient

struct SSH: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ssh",
        abstract: "Open an SSH session from which the remote host can use your msso broker, within that host's limits.",
        discussion: """
            msso ssh build01
            msso ssh alice@build01 -p 2222 git pull

            Your broker makes a socket for the host for this session only, and ssh forwards a \
            socket on the remote host to it (ssh -R). On the remote host, msso, \
            git-credential-msso and apps find it through $MSSO_SOCKET, which ssh sends when the \
            remote sshd accepts it (AcceptEnv MSSO_SOCKET in its sshd_config); else export \
            MSSO_SOCKET there yourself (the path is --remote-socket). When ssh ends, the socket \
            and every connection through it are closed. No token is written on the remote host.

            A call from the remote host is judged as the host, never as a program of yours: only \
            what the host's [forward."HOST"] table in config.toml allows (by default token, sign, \
            status and check, on the groups it names), and each new request waits for your \
            answer in a desktop notification unless the table says confirm = false. A host \
            without a table gets nothing, and msso ssh stops before ssh starts. See msso.toml(5).

            What it runs, as a recipe for other ssh clients:
              MSSO_SOCKET=REMOTE ssh -o ExitOnForwardFailure=yes \\
                -o StreamLocalBindUnlink=yes -o ControlPath=none \\
                -o SendEnv=MSSO_SOCKET -R REMOTE:LOCAL HOST [ssh arguments]
            where LOCAL is the socket the broker made for HOST (it exists only while msso ssh \
            runs, and accepts only the programs msso ssh starts), and REMOTE is --remote-socket. \
            ControlPath=none: a shared connection would outlive the session and its forward.

            The exit status is ssh's; before ssh runs, msso's (7: the host may not be forwarded to).
            """)

    @Option(help: ArgumentHelp("The broker's socket (default: $MSSO_SOCKET, else $XDG_RUNTIME_DIR/msso/broker.sock).", valueName: "path"))
    var socket: String?

    @Option(help: ArgumentHelp("Seconds to wait for the broker's answer.", valueName: "seconds"))
    var timeout: Double = 20

    @Option(help: ArgumentHelp("Where the socket is made on the remote host (default: a new random name in /tmp, mode 0600).", valueName: "path"))
    var remoteSocket: String?

    @Option(help: ArgumentHelp("The ssh program to run, found on PATH.", valueName: "program"))
    var ssh = "ssh"

    @Flag(name: .shortAndLong, help: "Say nothing before ssh starts.")
    var quiet = false

    @Argument(help: ArgumentHelp("The host, as you give it to ssh: [user@]host or ssh://[user@]host[:port].", valueName: "destination"))
    var destination: String

    @Argument(parsing: .captureForPassthrough, help: ArgumentHelp("ssh's options and the remote command, given to ssh as they are.", valueName: "ssh arguments"))
    var sshArguments: [String] = []

    mutating func validate() throws {
        guard Self.host(of: destination) != nil else {
            throw ValidationError("\"\(destination)\" names no host; give [user@]host as you give it to ssh (msso's own options come before it, ssh's after it)")
        }
        if let remoteSocket, !remoteSocket.hasPrefix("/") || remoteSocket.contains(":") || remoteSocket.utf8.count > 100 {
            throw ValidationError("--remote-socket takes an absolute path without `:` (ssh -R reads one as a separator), at most 100 bytes")
        }
    }

    /// The host a destination names, as `[forward."HOST"]` tables name it: without the user, the
    /// scheme and the port; lowercase.
    static func host(of destination: String) -> String? {
        var text = Substring(destination)
        let url = text.hasPrefix("ssh://")
        if url { text = text.dropFirst(6) }
        if let at = text.lastIndex(of: "@") { text = text[text.index(after: at)...] }
        if url {
            if text.hasSuffix("/") { text = text.dropLast() }
            if text.hasPrefix("[") {
                guard let close = text.firstIndex(of: "]") else { return nil }
                text = text[text.index(after: text.startIndex)..<close]
            } else if let colon = text.lastIndex(of: ":") {
                text = text[..<colon]
            }
        } else if text.hasPrefix("["), text.hasSuffix("]") {
            text = text.dropFirst().dropLast()
        }
        return ForwardHost.normalized(String(text))
    }

    func run() throws {
        let host = Self.host(of: destination)!
        let common = Common(socket: socket, timeout: timeout)
        let broker: BrokerConnection
        let local: String
        do throws(BrokerError) {
            broker = try BrokerConnection.connect(socketPath: socket, clientName: "msso ssh", timeout: timeout)
            local = try broker.call(Methods.Forward.self, .init(host: host)).socket
        } catch {
            common.fail(error)
        }
        // The forward lives while this connection does: closed when ssh ends and msso exits (the
        // socket is close-on-exec, so ssh does not keep it open past us).
        defer { broker.close() }
        guard !local.contains(":") else {
            Output.error("the broker's forward socket \(local) holds a `:`, which ssh -R cannot take; set XDG_RUNTIME_DIR to a path without one")
            throw ExitCode(ExitStatus.usage.rawValue)
        }
        let remote = remoteSocket ?? "/tmp/msso-ssh-\(Self.randomName()).sock"
        if !quiet, isatty(2) == 1 {
            Output.note("msso: \(host) reaches your broker at \(remote) during this session, within its [forward] table (MSSO_SOCKET there, if its sshd has AcceptEnv MSSO_SOCKET)")
        }
        let argv = [ssh, "-o", "ExitOnForwardFailure=yes", "-o", "StreamLocalBindUnlink=yes", "-o", "ControlPath=none",
                    "-o", "SendEnv=MSSO_SOCKET", "-R", "\(remote):\(local)", destination] + sshArguments
        setenv("MSSO_SOCKET", remote, 1) // ssh sends it (SendEnv); sshd sets it when it accepts it
        throw ExitCode(Self.run(argv))
    }

    /// Runs `argv` (the program found on PATH) and waits for it: its exit status, 128 + the signal
    /// that ended it (as a shell says), or 127 when it cannot be run. While it runs, msso ignores
    /// the terminal's interrupt and quit, as system(3) does: they are ssh's to act on.
    static func run(_ argv: [String]) -> Int32 {
        var ignore = sigaction()
        ignore.__sigaction_handler.sa_handler = SIG_IGN
        var previousInterrupt = sigaction(), previousQuit = sigaction()
        sigaction(SIGINT, &ignore, &previousInterrupt)
        sigaction(SIGQUIT, &ignore, &previousQuit)
        defer {
            sigaction(SIGINT, &previousInterrupt, nil)
            sigaction(SIGQUIT, &previousQuit, nil)
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigemptyset(&defaults)
        sigaddset(&defaults, SIGINT)
        sigaddset(&defaults, SIGQUIT)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF))
        let arguments = argv.map { strdup($0) } + [nil]
        defer { arguments.forEach { free($0) } }
        var pid = pid_t()
        let started = posix_spawnp(&pid, argv[0], nil, &attributes, arguments, environ)
        guard started == 0 else {
            Output.error("cannot run \(argv[0]): \(String(cString: strerror(started)))")
            return 127
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 {
            guard errno == EINTR else { return 70 }
        }
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }

    /// 24 hex digits from the system's random source.
    static func randomName() -> String { Hex.random(digits: 24) }
}
