import FoundationEssentials

/// Turns messages into frames and back. JSON, UTF-8, camelCase keys.
public enum WireCodec {
    /// A whole frame (length prefix and payload) for `message`, refusing one that would break the
    /// frame cap rather than sending it.
    public static func encode(_ message: some Encodable) throws(BrokerError) -> [UInt8] {
        guard let data = try? JSONEncoder().encode(message) else {
            throw BrokerError(.internal, "a message could not be encoded")
        }
        guard data.count <= Framing.maximumPayload else {
            throw BrokerError(.badRequest, "a message of \(data.count) bytes would exceed the \(Framing.maximumPayload)-byte frame limit")
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Framing.headerSize + data.count)
        Framing.write(data, to: &bytes)
        return bytes
    }

    /// The same for the daemon's replies: over the frame cap, an `Internal` error frame with
    /// `serial` instead, so the caller still gets an answer.
    public static func frame(_ message: some Encodable, serial: UInt32) -> [UInt8] {
        (try? encode(message)) ?? ReplyWriter.error(serial: serial, BrokerError(.internal, "the reply would exceed the \(Framing.maximumPayload)-byte frame limit"))
    }

    /// Reads the routing fields of a payload.
    public static func envelope(of payload: some Collection<UInt8>) throws(BrokerError) -> Envelope {
        try decode(Envelope.self, from: payload)
    }

    /// Decodes a whole message; a malformed one is a `BadRequest` naming what is wrong.
    public static func decode<T: Decodable>(_ type: T.Type, from payload: some Collection<UInt8>) throws(BrokerError) -> T {
        do {
            return try JSONDecoder().decode(type, from: Data(payload))
        } catch let error as DecodingError {
            throw BrokerError(.badRequest, "malformed message: \(describe(error))")
        } catch {
            throw BrokerError(.badRequest, "malformed message: not valid UTF-8 JSON")
        }
    }

    /// A one-line, value-free account of a decoding error (values may hold secrets).
    static func describe(_ error: DecodingError) -> String {
        func path(_ keys: [CodingKey]) -> String {
            keys.isEmpty ? "the message" : "`" + keys.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".") + "`"
        }
        switch error {
        case .keyNotFound(let key, let context):
            return "missing field \(path(context.codingPath + [key]))"
        case .typeMismatch(_, let context), .valueNotFound(_, let context):
            return "wrong type for \(path(context.codingPath))"
        case .dataCorrupted(let context):
            return context.codingPath.isEmpty ? "not valid UTF-8 JSON" : "invalid value for \(path(context.codingPath))"
        @unknown default:
            return "undecodable"
        }
    }
}
