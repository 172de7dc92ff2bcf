import ArgumentParser
import FoundationEssentials
import MSSOClient

struct Sign: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign",
        abstract: "Print the headers that authenticate an HTTP request, one `Name: value` per line.",
        discussion: """
            Example: curl -H "$(msso sign --method GET --url https://api.example.com/me)" https://api.example.com/me
            """)

    @OptionGroup var options: CommonOptions

    @Option(help: "The request's HTTP method.")
    var method = "GET"

    @Option(help: "The request's absolute URL.")
    var url: String

    @Option(name: .customLong("header"), help: ArgumentHelp("A header the request carries, `Name: value` (repeatable).", valueName: "header"))
    var headers: [String] = []

    @Option(help: ArgumentHelp("A file holding the request's body.", valueName: "file"))
    var bodyFile: String?

    @Option(help: ArgumentHelp("A DPoP-Nonce the server answered with (dpop profiles).", valueName: "nonce"))
    var dpopNonce: String?

    func validate() throws {
        if let problem = Self.problem(url: url, headers: headers) { throw ValidationError(problem) }
    }

    static func problem(url: String, headers: [String]) -> String? {
        guard let parsed = URL(string: url), parsed.scheme != nil, parsed.host != nil else {
            return "--url must be an absolute URL such as https://api.example.com/path"
        }
        if let header = headers.first(where: { !$0.contains(":") || Self.parts($0).name.isEmpty }) {
            return "--header takes `Name: value`, got \"\(header)\""
        }
        return nil
    }

    /// `Name: value` split at its first colon, each side trimmed (an empty name when none is given).
    static func parts(_ line: String) -> (name: String, value: String) {
        let parts = line.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
        return (parts[0].trimmed(), parts.count > 1 ? parts[1].trimmed() : "")
    }

    func run() throws {
        try Self.perform(options.values, method: method, url: url, headers: headers, bodyFile: bodyFile, dpopNonce: dpopNonce)
    }

    static func perform(_ options: Common, method: String, url: String, headers: [String], bodyFile: String?, dpopNonce: String?) throws {
        var digest: String?
        if let bodyFile {
            guard let data = FileManager.default.contents(atPath: bodyFile) else {
                throw ValidationError("cannot read --body-file \(bodyFile)")
            }
            digest = BodyDigest.base64SHA256(data)
        }
        let given = headers.map { line -> Header in
            let (name, value) = parts(line)
            return Header(name, value)
        }
        try options.run { broker in
            let request = SignRequest(group: options.group, account: options.account, method: method.uppercased(), url: url, headers: given.isEmpty ? nil : given,
                                      bodySHA256: digest, dpopNonce: dpopNonce)
            let added = try broker.call(Methods.Sign.self, request).headers
            if options.json {
                Output.json(SignResponse(headers: added))
            } else {
                added.forEach { Output.print("\($0.name): \($0.value)") }
            }
        }
    }
}
