import NIOCore

/// Length-prefixed framing: a 4-byte big-endian payload length, then that many bytes of UTF-8 JSON.
///
/// The length is checked against ``maximumPayload`` before a single payload byte is buffered, so a
/// peer cannot make the daemon allocate by announcing a huge frame.
public enum Framing {
    /// Largest payload accepted in either direction (64 KiB): far above any real message.
    public static let maximumPayload = 64 * 1024
    public static let headerSize = 4

    /// The outcome of looking at the front of a buffer.
    public enum Parse: Equatable {
        /// Not enough bytes yet for a whole frame; nothing was consumed.
        case incomplete
        /// One whole frame; its payload was consumed from the buffer.
        case frame(ByteBuffer)
        /// The announced length is over the cap; the stream cannot be trusted any further.
        case tooLarge(announced: Int)
    }

    /// Takes one frame from the front of `buffer` if a whole one is there.
    public static func parse(_ buffer: inout ByteBuffer) -> Parse {
        guard let length = buffer.getInteger(at: buffer.readerIndex, endianness: .big, as: UInt32.self) else {
            return .incomplete
        }
        guard Int(length) <= maximumPayload else { return .tooLarge(announced: Int(length)) }
        guard buffer.readableBytes >= headerSize + Int(length) else { return .incomplete }
        buffer.moveReaderIndex(forwardBy: headerSize)
        return .frame(buffer.readSlice(length: Int(length))!)
    }

    /// Appends `payload` as one frame (the one writer of frames). Payloads over the cap are never
    /// built (see ``WireCodec``).
    public static func write(_ payload: some Collection<UInt8>, to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt32(payload.count), endianness: .big)
        buffer.writeBytes(payload)
    }

    /// The same, into plain bytes.
    public static func write(_ payload: some Collection<UInt8>, to bytes: inout [UInt8]) {
        let length = UInt32(payload.count)
        bytes.append(contentsOf: [UInt8(truncatingIfNeeded: length >> 24), UInt8(truncatingIfNeeded: length >> 16),
                                  UInt8(truncatingIfNeeded: length >> 8), UInt8(truncatingIfNeeded: length)])
        bytes.append(contentsOf: payload)
    }

    /// The payload length a frame header announces (`header` holds at least 4 bytes).
    public static func announcedLength(_ header: UnsafeRawBufferPointer) -> Int {
        Int(header[0]) << 24 | Int(header[1]) << 16 | Int(header[2]) << 8 | Int(header[3])
    }
}

/// Errors the framing layer raises; each ends the connection because the stream is out of step.
public struct FramingError: Error, CustomStringConvertible {
    public let description: String
    public static func tooLarge(_ announced: Int) -> FramingError {
        FramingError(description: "frame of \(announced) bytes is over the \(Framing.maximumPayload)-byte limit")
    }
}

/// NIO decoder turning a byte stream into frame payloads.
public struct FrameDecoder: ByteToMessageDecoder {
    public typealias InboundOut = ByteBuffer
    public init() {}

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        switch Framing.parse(&buffer) {
        case .incomplete: return .needMoreData
        case .tooLarge(let announced): throw FramingError.tooLarge(announced)
        case .frame(let payload):
            context.fireChannelRead(wrapInboundOut(payload))
            return .continue
        }
    }

    public mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        // A truncated frame at EOF is dropped: there is nobody left to answer.
        while case .continue = try decode(context: context, buffer: &buffer) {}
        return .needMoreData
    }
}

/// NIO encoder adding the length prefix to outbound payloads.
public struct FrameEncoder: MessageToByteEncoder {
    public typealias OutboundIn = ByteBuffer
    public init() {}
    public func encode(data: ByteBuffer, out: inout ByteBuffer) throws {
        Framing.write(data.readableBytesView, to: &out)
    }
}
