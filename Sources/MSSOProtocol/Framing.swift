/// Length-prefixed framing: a 4-byte big-endian payload length, then that many bytes of UTF-8 JSON.
///
/// The length is checked against ``maximumPayload`` before a single payload byte is buffered, so a
/// peer cannot make the daemon allocate by announcing a huge frame. The one reader of frames,
/// shared by the daemon and the clients: ``parse(_:)``.
public enum Framing {
    public static let headerSize = 4

    /// The outcome of looking at the front of some bytes.
    public enum Parse: Equatable {
        /// Not enough bytes yet for a whole frame.
        case incomplete
        /// One whole frame: its payload is at `payload` (relative to the bytes given); the frame
        /// ends at `payload.upperBound`.
        case frame(payload: Range<Int>)
        /// The announced length is over the cap; the stream cannot be trusted any further.
        case tooLarge(announced: Int)
    }

    /// Looks for one whole frame at the front of `bytes`.
    public static func parse(_ bytes: UnsafeRawBufferPointer) -> Parse {
        guard bytes.count >= headerSize else { return .incomplete }
        let length = Int(bytes[0]) << 24 | Int(bytes[1]) << 16 | Int(bytes[2]) << 8 | Int(bytes[3])
        guard length <= maximumPayload else { return .tooLarge(announced: length) }
        guard bytes.count - headerSize >= length else { return .incomplete }
        return .frame(payload: headerSize..<(headerSize + length))
    }

    /// Appends `payload` as one frame (the one writer of frames). Payloads over the cap are never
    /// built (see ``WireCodec``).
    public static func write(_ payload: some Collection<UInt8>, to bytes: inout [UInt8]) {
        let length = UInt32(payload.count)
        bytes.append(contentsOf: [UInt8(truncatingIfNeeded: length >> 24), UInt8(truncatingIfNeeded: length >> 16),
                                  UInt8(truncatingIfNeeded: length >> 8), UInt8(truncatingIfNeeded: length)])
        bytes.append(contentsOf: payload)
    }
}

/// Errors the framing layer raises; each ends the connection because the stream is out of step.
public struct FramingError: Error, CustomStringConvertible {
    public let description: String
    public static func tooLarge(_ announced: Int) -> FramingError {
        FramingError(description: "frame of \(announced) bytes is over the \(Framing.maximumPayload)-byte limit")
    }
}
