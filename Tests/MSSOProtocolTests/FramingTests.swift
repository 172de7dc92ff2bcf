import MSSOProtocol
import NIOCore
import XCTest

final class FramingTests: XCTestCase {
    private func frame(_ json: String) -> ByteBuffer {
        var buffer = ByteBuffer()
        Framing.write(Array(json.utf8), to: &buffer)
        return buffer
    }

    func testEveryPartialPrefixIsIncompleteAndConsumesNothing() {
        let whole = frame(#"{"type":"call","serial":1,"method":"ping","args":{"data":"x"}}"#)
        for length in 0..<whole.readableBytes {
            var prefix = whole.getSlice(at: 0, length: length)!
            XCTAssertEqual(Framing.parse(&prefix), .incomplete, "prefix of \(length) bytes")
            XCTAssertEqual(prefix.readableBytes, length, "nothing consumed from \(length) bytes")
        }
        var complete = whole
        guard case .frame(let payload) = Framing.parse(&complete) else { return XCTFail("whole frame not parsed") }
        XCTAssertEqual(payload.readableBytes, whole.readableBytes - 4)
        XCTAssertEqual(complete.readableBytes, 0)
    }

    func testTwoFramesInOneBufferComeOutOneByOne() {
        var buffer = frame("{}")
        var second = frame("[1]")
        buffer.writeBuffer(&second)
        guard case .frame(let first) = Framing.parse(&buffer) else { return XCTFail() }
        XCTAssertEqual(String(buffer: first), "{}")
        guard case .frame(let next) = Framing.parse(&buffer) else { return XCTFail() }
        XCTAssertEqual(String(buffer: next), "[1]")
        XCTAssertEqual(Framing.parse(&buffer), .incomplete)
    }

    func testLengthOverTheCapIsRefusedFromTheHeaderAlone() {
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt32(Framing.maximumPayload + 1), endianness: .big)
        XCTAssertEqual(Framing.parse(&buffer), .tooLarge(announced: Framing.maximumPayload + 1))
        var huge = ByteBuffer()
        huge.writeInteger(UInt32.max, endianness: .big)
        XCTAssertEqual(Framing.parse(&huge), .tooLarge(announced: Int(UInt32.max)))
    }

    func testLengthAtTheCapIsAccepted() {
        var buffer = ByteBuffer()
        Framing.write([UInt8](repeating: 0x20, count: Framing.maximumPayload), to: &buffer)
        guard case .frame(let payload) = Framing.parse(&buffer) else { return XCTFail() }
        XCTAssertEqual(payload.readableBytes, Framing.maximumPayload)
    }
}

final class WireCodecTests: XCTestCase {
    func testCallRoundTripsThroughEnvelopeAndTypedDecode() throws {
        let call = Call(serial: 9, method: Methods.Sign.name,
                        args: SignRequest(method: "GET", url: "https://a.example/x", headers: [Header("Accept", "*/*")]))
        let payload = try WireCodec.encode(call)
        let envelope = try WireCodec.envelope(of: payload)
        XCTAssertEqual(envelope.type, .call)
        XCTAssertEqual(envelope.serial, 9)
        XCTAssertEqual(envelope.method, "sign")
        let decoded = try WireCodec.decode(Call<SignRequest>.self, from: payload)
        XCTAssertEqual(decoded.args, call.args)
        XCTAssertTrue(String(buffer: payload).contains(#""headers":[["Accept","*\/*"]]"#))
    }

    func testMalformedInputIsBadRequestWithoutEchoingValues() {
        let cases: [(String, String)] = [
            ("not json", "not valid UTF-8 JSON"),
            (#"{"type":"call","serial":1,"method":"sign","args":{"url":"https://secret-token.example"}}"#, "missing field `args.method`"),
            (#"{"type":"call","serial":"one"}"#, "wrong type for `serial`"),
        ]
        for (text, expected) in cases {
            var buffer = ByteBuffer()
            buffer.writeString(text)
            XCTAssertThrowsError(try WireCodec.decode(Call<SignRequest>.self, from: buffer)) { error in
                let error = error as! BrokerError
                XCTAssertEqual(error.name, .badRequest)
                XCTAssertTrue(error.message.contains(expected), error.message)
                XCTAssertFalse(error.message.contains("secret-token"))
            }
        }
    }

    func testInvalidUTF8IsBadRequest() {
        var buffer = ByteBuffer()
        buffer.writeBytes([0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x7D])
        XCTAssertThrowsError(try WireCodec.envelope(of: buffer)) { error in
            XCTAssertEqual((error as! BrokerError).name, .badRequest)
        }
    }

    func testHeaderMustBeAPair() {
        var buffer = ByteBuffer()
        buffer.writeString(#"{"method":"GET","url":"https://a.example","headers":[["A","b","c"]]}"#)
        XCTAssertThrowsError(try WireCodec.decode(SignRequest.self, from: buffer))
    }

    func testUnknownErrorNamesSurviveDecoding() throws {
        var buffer = ByteBuffer()
        buffer.writeString(#"{"type":"error","serial":3,"error":"SomethingNew","message":"m"}"#)
        let reply = try WireCodec.decode(ErrorReply.self, from: buffer)
        XCTAssertEqual(reply.brokerError, BrokerError(ErrorName(rawValue: "SomethingNew"), "m"))
    }
}
