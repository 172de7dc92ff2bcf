import ArgumentParser
import Glibc
import MSSOClient

struct Exec: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "exec",
        abstract: "Run a command with the group's access token in its environment (never in its arguments).",
        discussion: """
            msso exec --resource https://api.example.com/ -- ./deploy.sh
            The command finds the token in $MSSO_ACCESS_TOKEN (or --env NAME) and its expiry, in \
            Unix seconds, in $MSSO_ACCESS_TOKEN_EXPIRES_AT (NAME_EXPIRES_AT). The exit status is \
            the command's.

            Who can read the token: the command, and every process it starts (they inherit the \
            environment); and, for as long as the command runs, every other process of the same \
            user, through /proc/PID/environ (not other users). Prefer, where the program allows: \
            `msso sign` for each request (the headers of that one request, when it is made; with \
            a dpop or http-signature group nothing that works elsewhere leaves the broker); a \
            file descriptor rather than the environment, e.g. \
            curl -H @<(msso token --format header --resource URL) URL; and `resources` in the \
            group's configuration, so that the token is handed out only for the servers it is \
            for (--resource names the one this command will call).
            """)

    @OptionGroup var options: CommonOptions

    @Option(help: ArgumentHelp("The environment variable that carries the token.", valueName: "name"))
    var env = "MSSO_ACCESS_TOKEN"

    @Option(help: ArgumentHelp("Where the command will send the token (an http(s) URL); needed when the group names `resources`.", valueName: "url"))
    var resource: String?

    @Argument(parsing: .captureForPassthrough, help: "The command and its arguments (after --).")
    var command: [String] = []

    mutating func validate() throws {
        guard !env.isEmpty, env.utf8.allSatisfy({ ($0 >= 65 && $0 <= 90) || ($0 >= 97 && $0 <= 122) || ($0 >= 48 && $0 <= 57) || $0 == 95 }),
              !(env.first?.isNumber ?? true) else {
            throw ValidationError("--env takes a variable name of letters, digits and _")
        }
        if command.first == "--" {
            command.removeFirst()
        } else if let first = command.first, first.hasPrefix("-") {
            // Captured as the command only because no option of exec has that name: never run it
            // (a program named `--help` on PATH would get the token).
            if first == "-h" || first == "--help" { throw CleanExit.helpRequest(self) }
            throw ValidationError("msso exec has no option \(first); the command to run goes after --")
        }
        guard !command.isEmpty else { throw ValidationError("give the command to run after --") }
    }

    func run() throws {
        var token: Methods.Token.Result?
        try options.run { broker in token = try broker.call(Methods.Token.self, .init(group: options.group, account: options.account, resource: resource)) }
        guard let token else { return }
        setenv(env, token.accessToken, 1)
        setenv(env + "_EXPIRES_AT", String(Int(token.expiresAt)), 1)
        let argv = command.map { (text: String) in strdup(text) } + [nil]
        execvp(command[0], argv)
        let problem = String(cString: strerror(errno))
        Output.error("cannot run \(command[0]): \(problem)")
        throw ExitCode(errno == ENOENT ? 127 : 126) // as a shell says it
    }
}
