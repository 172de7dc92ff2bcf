import ArgumentParser
import MSSOClient

struct Keys: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "Show the public half of a group's signing key, or rotate the key.",
        discussion: """
            Groups whose `sign` profile is dpop or http-signature sign with a key the broker made; \
            its private half never leaves the broker. Give the public half (JWK or PEM) to the \
            services that verify your requests. A private_key_jwt group without client_key also \
            authenticates to its identity provider with this key: register the public half for the \
            client there. --rotate makes a new key; tokens bound to the old one (dpop) stop working, \
            so that group's session ends.
            """)

    @OptionGroup var options: CommonOptions

    enum Format: String, ExpressibleByArgument { case jwk, pem }

    @Option(help: "jwk or pem.") var format: Format = .jwk
    @Flag(help: "Replace the key with a new one.") var rotate = false

    func run() throws {
        try options.run { broker in
            let key = try broker.call(Methods.Keys.self, .init(group: options.group, rotate: rotate))
            if options.json { return Output.json(key) }
            switch format {
            case .pem: Output.print(lines: key.pem, terminator: "")
            case .jwk:
                let jwk = key.jwk.merging(["kid": key.keyID, "use": "sig"]) { first, _ in first }
                Output.json(jwk)
            }
        }
    }
}
