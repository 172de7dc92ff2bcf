import MSSOClient

/// A parser of its own for `check`, `sign` and `token`, the verbs that scripts, git and kubectl
/// run on every request.
///
/// Why: ArgumentParser reflects on every command type each time a process starts (Mirror,
/// generic metadata, protocol conformance scans), about 1.5 ms in a static binary, more than the
/// rest of a `check` put together. This parser knows exactly the options those three verbs take,
/// in the forms `--name value` and `--name=value`, and runs the same code as the full commands
/// (`Check.perform`, …). Anything it does not know for certain (a help flag, an unknown option,
/// a missing value, a value to validate) it hands back, untouched, to ArgumentParser, which then
/// answers exactly as it always does.
enum QuickStart {
    /// Runs the command and returns true, or returns false to let ArgumentParser parse `arguments`.
    static func run(_ arguments: [String]) -> Bool {
        guard let verb = arguments.first, ["check", "sign", "token"].contains(verb) else { return false }
        var options = Common()
        var single: [String: String] = [:]
        var flags = Set<String>()
        var headers: [String] = []
        let takesValue = Set(["group", "account", "socket", "timeout"])
            .union(verb == "sign" ? ["method", "url", "header", "body-file", "dpop-nonce"] : verb == "token" ? ["format", "resource"] : [])
        let takesNoValue: Set<String> = verb == "check" ? ["json", "quiet"] : ["json"]
        var rest = arguments.dropFirst()
        while let argument = rest.popFirst() {
            var name: String
            var value: String?
            switch argument {
            case "-g": name = "group"
            case "-q" where verb == "check": name = "quiet"
            case _ where argument.hasPrefix("--") && argument.count > 2:
                let body = argument.dropFirst(2)
                if let equals = body.firstIndex(of: "=") {
                    name = String(body[..<equals])
                    value = String(body[body.index(after: equals)...])
                } else {
                    name = String(body)
                }
            default:
                return false
            }
            if takesNoValue.contains(name) {
                guard value == nil, flags.insert(name).inserted else { return false }
                continue
            }
            guard takesValue.contains(name) else { return false }
            if value == nil { value = rest.popFirst() }
            guard let value, !value.hasPrefix("-") || name == "header" else { return false }
            if name == "header" {
                headers.append(value)
            } else {
                guard single.updateValue(value, forKey: name) == nil else { return false }
            }
        }
        options.group = single["group"]
        if let account = single["account"] { options.account = account }
        options.socket = single["socket"]
        options.json = flags.contains("json")
        if let timeout = single["timeout"] {
            guard let seconds = Double(timeout) else { return false }
            options.timeout = seconds
        }
        do {
            switch verb {
            case "check":
                try Check.perform(options, quiet: flags.contains("quiet"))
            case "sign":
                guard let url = single["url"], Sign.problem(url: url, headers: headers) == nil else { return false }
                try Sign.perform(options, method: single["method"] ?? "GET", url: url, headers: headers, bodyFile: single["body-file"],
                                 dpopNonce: single["dpop-nonce"])
            default:
                guard let format = Token.Format(rawValue: single["format"] ?? "raw") else { return false }
                try Token.perform(options, format: format, resource: single["resource"])
            }
        } catch {
            Msso.exit(withError: error) // an exit status (check), or a file that cannot be read: said as the full command would
        }
        return true
    }
}
