import Foundation
import MSSOProtocol
import XCTest

final class FramingTests: XCTestCase {
    private func frame(_ json: String) -> [UInt8] {
        var bytes: [UInt8] = []
        Framing.write(Array(json.utf8), to: &bytes)
        return bytes
    }

    private func parse(_ bytes: some Collection<UInt8>) -> Framing.Parse {
        Array(bytes).withUnsafeBytes { Framing.parse($0) }
    }

    func testEveryPartialPrefixIsIncomplete() {
        let whole = frame(#"{"type":"call","serial":1,"method":"ping","args":{"data":"x"}}"#)
        for length in 0..<whole.count {
            XCTAssertEqual(parse(whole.prefix(length)), .incomplete, "prefix of \(length) bytes")
        }
        XCTAssertEqual(parse(whole), .frame(payload: 4..<whole.count))
    }

    func testTwoFramesInOneBufferComeOutOneByOne() {
        let bytes = frame("{}") + frame("[1]")
        guard case .frame(let first) = parse(bytes) else { return XCTFail() }
        XCTAssertEqual(String(decoding: bytes[first], as: UTF8.self), "{}")
        let rest = bytes[first.upperBound...]
        guard case .frame(let next) = parse(rest) else { return XCTFail() }
        XCTAssertEqual(String(decoding: Array(rest)[next], as: UTF8.self), "[1]")
        XCTAssertEqual(parse(Array(rest)[next.upperBound...]), .incomplete)
    }

    func testLengthOverTheCapIsRefusedFromTheHeaderAlone() {
        let over = UInt32(Framing.maximumPayload + 1)
        XCTAssertEqual(parse([UInt8(over >> 24), UInt8(over >> 16 & 0xFF), UInt8(over >> 8 & 0xFF), UInt8(over & 0xFF)]),
                       .tooLarge(announced: Framing.maximumPayload + 1))
        XCTAssertEqual(parse([0xFF, 0xFF, 0xFF, 0xFF]), .tooLarge(announced: Int(UInt32.max)))
    }

    func testLengthAtTheCapIsAccepted() {
        var bytes: [UInt8] = []
        Framing.write([UInt8](repeating: 0x20, count: Framing.maximumPayload), to: &bytes)
        XCTAssertEqual(parse(bytes), .frame(payload: 4..<(4 + Framing.maximumPayload)))
    }

    func testTheHotRepliesAreTheJSONTheCodecWouldWrite() throws {
        let sign = ReplyWriter.signReply(serial: 7, headers: [Header("Authorization", "Bearer a\"b\\c\u{1}")])
        guard case .frame(let payload) = parse(sign) else { return XCTFail() }
        let decoded = try WireCodec.decode(Reply<SignResponse>.self, from: sign[payload])
        XCTAssertEqual(decoded.serial, 7)
        XCTAssertEqual(decoded.result.headers, [Header("Authorization", "Bearer a\"b\\c\u{1}")])
        let error = ReplyWriter.error(serial: 3, BrokerError(.expired, "line\nbreak"))
        guard case .frame(let errorPayload) = parse(error) else { return XCTFail() }
        XCTAssertEqual(try WireCodec.decode(ErrorReply.self, from: error[errorPayload]).brokerError, BrokerError(.expired, "line\nbreak"))
    }

    func testAnEchoIsNeverLongerThanItsCallWroteIt() throws {
        // Each control character in JSON's shortest escape: \b and \f are two bytes, not six.
        let echo = ReplyWriter.pingReply(serial: 4, data: "\u{8}\u{c}\u{1}")
        XCTAssertTrue(String(decoding: echo.dropFirst(4), as: UTF8.self).contains(#""data":"\b\f\u0001""#))
        // Over the cap, the answer still names the call.
        let huge = ReplyWriter.pingReply(serial: 5, data: String(repeating: "\u{1}", count: Framing.maximumPayload / 4))
        guard case .frame(let payload) = parse(huge) else { return XCTFail() }
        let error = try WireCodec.decode(ErrorReply.self, from: huge[payload])
        XCTAssertEqual(error.serial, 5)
        XCTAssertEqual(error.brokerError.name, .internal)
    }
}

final class WireCodecTests: XCTestCase {
    func testCallRoundTripsThroughEnvelopeAndTypedDecode() throws {
        let call = Call(serial: 9, method: Methods.Sign.name,
                        args: SignRequest(method: "GET", url: "https://a.example/x", headers: [Header("Accept", "*/*")]))
        let payload = try WireCodec.encode(call).dropFirst(Framing.headerSize)
        let envelope = try WireCodec.envelope(of: payload)
        XCTAssertEqual(envelope.type, .call)
        XCTAssertEqual(envelope.serial, 9)
        XCTAssertEqual(envelope.method, "sign")
        let decoded = try WireCodec.decode(Call<SignRequest>.self, from: payload)
        XCTAssertEqual(decoded.args, call.args)
        XCTAssertTrue(String(decoding: payload, as: UTF8.self).contains(#""headers":[["Accept","*\/*"]]"#))
        let incoming = try WireCodec.decode(IncomingCall.self, from: payload)
        guard case .success(.sign(let arguments)) = incoming.arguments else { return XCTFail("decoded once, by method") }
        XCTAssertEqual(arguments, call.args)
    }

    func testMalformedInputIsBadRequestWithoutEchoingValues() {
        let cases: [(String, String)] = [
            ("not json", "not valid UTF-8 JSON"),
            (#"{"type":"call","serial":1,"method":"sign","args":{"url":"https://secret-token.example"}}"#, "missing field `args.method`"),
            (#"{"type":"call","serial":"one"}"#, "wrong type for `serial`"),
        ]
        for (text, expected) in cases {
            XCTAssertThrowsError(try WireCodec.decode(Call<SignRequest>.self, from: Array(text.utf8))) { error in
                let error = error as! BrokerError
                XCTAssertEqual(error.name, .badRequest)
                XCTAssertTrue(error.message.contains(expected), error.message)
                XCTAssertFalse(error.message.contains("secret-token"))
            }
        }
    }

    func testInvalidUTF8IsBadRequest() {
        XCTAssertThrowsError(try WireCodec.envelope(of: [0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x7D] as [UInt8])) { error in
            XCTAssertEqual((error as! BrokerError).name, .badRequest)
        }
    }

    func testHeaderMustBeAPair() {
        XCTAssertThrowsError(try WireCodec.decode(SignRequest.self, from: Array(#"{"method":"GET","url":"https://a.example","headers":[["A","b","c"]]}"#.utf8)))
    }

    func testUnknownErrorNamesSurviveDecoding() throws {
        let reply = try WireCodec.decode(ErrorReply.self, from: Array(#"{"type":"error","serial":3,"error":"SomethingNew","message":"m"}"#.utf8))
        XCTAssertEqual(reply.brokerError, BrokerError(ErrorName(rawValue: "SomethingNew"), "m"))
    }

    func testMethodNamesReachLogsOnlyWhenWellFormed() {
        XCTAssertEqual(MethodName.loggable("sign"), "sign")
        XCTAssertEqual(MethodName.loggable("sign\nFAKE LOG LINE"), "(invalid)")
        XCTAssertEqual(MethodName.loggable(String(repeating: "a", count: 65)), "(invalid)")
        XCTAssertEqual(MethodName.loggable(nil), "(invalid)")
    }
}
