/// The name of an error the broker returns. Names are stable API: clients branch on them.
///
/// A struct rather than an enum so that a client keeps working when a newer daemon adds a name.
public struct ErrorName: RawRepresentable, Hashable, Codable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(from decoder: Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }
    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue)
    }
    public var description: String { rawValue }

    // The names themselves (NotLoggedIn, Expired, …) are in WireNames.swift, generated from
    // protocol/names.json by scripts/generate-names.
}

/// An error as it travels on the wire: a stable name and a sentence for the user.
///
/// The message tells the user what to do next and never contains a secret.
public struct BrokerError: Error, Equatable, Sendable, CustomStringConvertible {
    public let name: ErrorName
    public let message: String

    public init(_ name: ErrorName, _ message: String) {
        self.name = name
        self.message = message
    }

    public var description: String { message }
}
