/// A reader for the calls on every app's request path (`sign`, `ping`) in their plain form, about
/// ten times faster than `JSONDecoder` (which took a fifth of a sign's time in the daemon).
///
/// It reads one object whose keys are `type`, `serial`, `method` and `args`, each once; a serial
/// of plain digits; for `sign`, the arguments ``SignRequest`` has (a header a pair of strings); for
/// `ping`, `data`; its strings and bytes as ``JSONScanner`` reads them (printable ASCII, the short
/// escapes). Anything else (a `\u` escape, a non-ASCII byte, `null`, an unknown key, a duplicate)
/// makes it give up and the frame goes to `JSONDecoder`, so what a frame means never depends on
/// which reader read it (a test checks the two agree on every frame the quick one accepts).
enum QuickCall {
    static func parse(_ bytes: UnsafeRawBufferPointer) -> IncomingCall? {
        var scanner = JSONScanner(bytes)
        return scanner.call()
    }
}

private extension JSONScanner {
    mutating func call() -> IncomingCall? {
        var type: String?, serial: UInt32?, method: String?
        var argsStart = -1, argsEnd = -1
        guard take(UInt8(ascii: "{")) else { return nil }
        repeat {
            guard let key = string() else { return nil }
            guard take(UInt8(ascii: ":")) else { return nil }
            switch key {
            case "type" where type == nil: guard let value = string() else { return nil }; type = value
            case "serial" where serial == nil: guard let value = self.serial() else { return nil }; serial = value
            case "method" where method == nil: guard let value = string() else { return nil }; method = value
            case "args" where argsStart < 0:
                argsStart = at
                guard skipValue() else { return nil }
                argsEnd = at
            default: return nil
            }
        } while take(UInt8(ascii: ","))
        guard take(UInt8(ascii: "}")), atEnd(), type == "call", let serial, let method, argsStart >= 0 else { return nil }
        at = argsStart
        let arguments: CallArguments
        switch method {
        case "sign": guard let request = signRequest() else { return nil }; arguments = .sign(request)
        case "ping": guard let ping = pingArguments() else { return nil }; arguments = .ping(ping)
        default: return nil
        }
        guard at == argsEnd else { return nil }
        return IncomingCall(type: .call, serial: serial, method: method, arguments: .success(arguments))
    }

    mutating func signRequest() -> SignRequest? {
        var group: String?, account: String?, method: String?, url: String?, headers: [Header]?, body: String?, nonce: String?
        guard take(UInt8(ascii: "{")) else { return nil }
        if !take(UInt8(ascii: "}")) {
            repeat {
                guard let key = string(), take(UInt8(ascii: ":")) else { return nil }
                switch key {
                case "group" where group == nil: guard let value = string() else { return nil }; group = value
                case "account" where account == nil: guard let value = string() else { return nil }; account = value
                case "method" where method == nil: guard let value = string() else { return nil }; method = value
                case "url" where url == nil: guard let value = string() else { return nil }; url = value
                case "headers" where headers == nil: guard let value = headerList() else { return nil }; headers = value
                case "bodySHA256" where body == nil: guard let value = string() else { return nil }; body = value
                case "dpopNonce" where nonce == nil: guard let value = string() else { return nil }; nonce = value
                default: return nil
                }
            } while take(UInt8(ascii: ","))
            guard take(UInt8(ascii: "}")) else { return nil }
        }
        guard let method, let url else { return nil }
        return SignRequest(group: group, account: account, method: method, url: url, headers: headers, bodySHA256: body, dpopNonce: nonce)
    }

    mutating func pingArguments() -> Methods.Ping.Arguments? {
        guard take(UInt8(ascii: "{")), let key = string(), key == "data", take(UInt8(ascii: ":")),
              let data = string(), take(UInt8(ascii: "}")) else { return nil }
        return Methods.Ping.Arguments(data: data)
    }

    mutating func headerList() -> [Header]? {
        guard take(UInt8(ascii: "[")) else { return nil }
        var headers: [Header] = []
        if take(UInt8(ascii: "]")) { return headers }
        repeat {
            guard take(UInt8(ascii: "[")), let name = string(), take(UInt8(ascii: ",")), let value = string(),
                  take(UInt8(ascii: "]")) else { return nil }
            headers.append(Header(name, value))
        } while take(UInt8(ascii: ","))
        return take(UInt8(ascii: "]")) ? headers : nil
    }
}
