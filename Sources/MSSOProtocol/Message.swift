/// The four kinds of message, as in D-Bus.
public enum MessageType: String, Codable, Sendable {
    case call, reply, error, signal
}

/// The fields every message has, decoded first to route a frame before its body is read.
///
/// Each field is read on its own, leniently: a message with a bad `type` but a readable `serial`
/// still gets an error that names that serial, so its sender is not left waiting.
public struct Envelope: Decodable, Sendable {
    public let type: MessageType?
    /// Set on calls, replies and errors; the caller picks it and the reply repeats it.
    public let serial: UInt32?
    /// Set on calls.
    public let method: String?

    enum CodingKeys: String, CodingKey { case type, serial, method }

    public init(from decoder: Decoder) throws {
        let fields = try decoder.container(keyedBy: CodingKeys.self) // fails only if not a JSON object
        type = try? fields.decode(MessageType.self, forKey: .type)
        serial = try? fields.decode(UInt32.self, forKey: .serial)
        method = try? fields.decode(String.self, forKey: .method)
    }
}

/// A method call from a client. `serial` is chosen by the client, unique per connection.
public struct Call<Arguments: Codable & Sendable>: Codable, Sendable {
    public var type = MessageType.call
    public let serial: UInt32
    public let method: String
    public var args: Arguments

    public init(serial: UInt32, method: String, args: Arguments) {
        self.serial = serial
        self.method = method
        self.args = args
    }
}

/// The successful answer to the call with the same serial.
public struct Reply<Result: Codable & Sendable>: Codable, Sendable {
    public var type = MessageType.reply
    public let serial: UInt32
    public let result: Result

    public init(serial: UInt32, result: Result) {
        self.serial = serial
        self.result = result
    }
}

/// The failed answer to the call with the same serial (0 when the call could not be read at all).
public struct ErrorReply: Codable, Sendable {
    public var type = MessageType.error
    public let serial: UInt32
    public let error: ErrorName
    public let message: String

    public init(serial: UInt32, error: BrokerError) {
        self.serial = serial
        self.error = error.name
        self.message = error.message
    }

    public var brokerError: BrokerError { BrokerError(error, message) }
}

// SignalName, the names of the signals the daemon sends, is in WireNames.swift (generated).

/// A message the daemon sends without being asked: group events to subscribers, and the device
/// prompt to the caller of a device login (`serial` then names that call).
public struct Signal: Codable, Sendable, Equatable {
    public var type = MessageType.signal
    public let signal: SignalName
    public let group: String
    public var serial: UInt32?
    /// The group's state after the event (for the group events).
    public var status: SessionStatus?
    /// What the user must do (for `DevicePrompt`).
    public var prompt: DevicePrompt?
    /// What to open (for `BrowserPrompt`).
    public var browser: BrowserPrompt?
    /// True when the login was already waiting for the user as this call came (the prompts): its
    /// code or address was shown to whoever started it, and its browser window may be open. Absent
    /// otherwise.
    public var joined: Bool?

    public init(signal: SignalName, group: String, serial: UInt32? = nil,
                status: SessionStatus? = nil, prompt: DevicePrompt? = nil, browser: BrowserPrompt? = nil,
                joined: Bool? = nil) {
        self.signal = signal
        self.group = group
        self.serial = serial
        self.status = status
        self.prompt = prompt
        self.browser = browser
        self.joined = joined
    }
}
