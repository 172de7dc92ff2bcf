/// Writes the daemon's most frequent frames (a `sign` or `ping` reply, an error) straight into
/// bytes, length prefix included, without a general-purpose encoder: they are on every app's
/// request path. Output is the same JSON ``WireCodec`` would produce, up to key order.
package struct ReplyWriter {
    package private(set) var bytes: [UInt8] = []

    package init(capacity: Int = 256) {
        bytes.reserveCapacity(capacity)
        bytes.append(contentsOf: [0, 0, 0, 0]) // the length, filled in by `frame`
    }

    /// `{"type":"reply","serial":N,"result":{"headers":[[name,value],…]}}`
    package static func signReply(serial: UInt32, headers: [Header]) -> [UInt8] {
        var writer = ReplyWriter(capacity: 96 + headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 8 })
        writer.raw("{\"type\":\"reply\",\"serial\":")
        writer.number(serial)
        writer.raw(",\"result\":{\"headers\":")
        writer.headers(headers)
        writer.raw("}}")
        return writer.frame(serial: serial)
    }

    /// `{"type":"reply","serial":N,"result":{"data":…}}`
    package static func pingReply(serial: UInt32, data: String) -> [UInt8] {
        var writer = ReplyWriter(capacity: 64 + data.utf8.count)
        writer.raw("{\"type\":\"reply\",\"serial\":")
        writer.number(serial)
        writer.raw(",\"result\":{\"data\":")
        writer.string(data)
        writer.raw("}}")
        return writer.frame(serial: serial)
    }

    /// `{"type":"error","serial":N,"error":NAME,"message":…}`
    package static func error(serial: UInt32, _ error: BrokerError) -> [UInt8] {
        var writer = ReplyWriter(capacity: 96 + error.message.utf8.count)
        writer.raw("{\"type\":\"error\",\"serial\":")
        writer.number(serial)
        writer.raw(",\"error\":")
        writer.string(error.name.rawValue)
        writer.raw(",\"message\":")
        writer.string(error.message)
        writer.raw("}")
        return writer.frame(serial: serial)
    }

    mutating func raw(_ text: StaticString) {
        text.withUTF8Buffer { bytes.append(contentsOf: $0) }
    }

    /// `[[name,value],…]`
    mutating func headers(_ headers: [Header]) {
        raw("[")
        for (index, header) in headers.enumerated() {
            if index > 0 { raw(",") }
            raw("[")
            string(header.name)
            raw(",")
            string(header.value)
            raw("]")
        }
        raw("]")
    }

    mutating func number(_ value: UInt32) {
        bytes.append(contentsOf: String(value).utf8)
    }

    mutating func number(_ value: Int) {
        bytes.append(contentsOf: String(value).utf8)
    }

    /// A JSON string (``JSONString``).
    mutating func string(_ text: String) {
        JSONString.append(text, to: &bytes)
    }

    /// The bytes with their length prefix, or an `Internal` error for the call `serial` if over the
    /// cap (an error frame is short: its message is ours).
    mutating func frame(serial: UInt32) -> [UInt8] {
        let length = bytes.count - Framing.headerSize
        guard length <= Framing.maximumPayload else {
            return ReplyWriter.error(serial: serial, BrokerError(.internal, "a reply of \(length) bytes would exceed the frame limit"))
        }
        bytes[0] = UInt8(truncatingIfNeeded: length >> 24)
        bytes[1] = UInt8(truncatingIfNeeded: length >> 16)
        bytes[2] = UInt8(truncatingIfNeeded: length >> 8)
        bytes[3] = UInt8(truncatingIfNeeded: length)
        return bytes
    }
}
