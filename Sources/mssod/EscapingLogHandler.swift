import Logging

/// Writes every log line with control characters escaped: a name that came from a peer or from
/// a file the user controls (a method, an app file's name) can never start a line of its own and
/// forge a log entry.
struct EscapingLogHandler: LogHandler {
    private var inner: any LogHandler

    init(_ inner: any LogHandler) { self.inner = inner }

    var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }

    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        var event = event
        event.message = "\(Self.escape(event.message.description))"
        event.metadata = event.metadata?.mapValues { .string(Self.escape($0.description)) }
        inner.log(event: event)
    }

    static func escape(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            if scalar.properties.generalCategory == .control {
                out += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
