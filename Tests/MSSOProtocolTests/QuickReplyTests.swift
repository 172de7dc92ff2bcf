import Foundation
@testable import MSSOProtocol
import XCTest

/// The commands' hand-written calls and readers must mean what the Codable path means.
final class QuickReplyTests: XCTestCase {
    func testQuickCallsAreTheCallsJSONEncoderWrites() throws {
        let sign = SignRequest(group: "g\"1", method: "POST", url: "https://a.example/x?y=\\", headers: [Header("A", "b\tc")],
                               bodySHA256: "abc=", dpopNonce: "n")
        try same(Methods.Sign.self, sign)
        try same(Methods.Sign.self, SignRequest(method: "GET", url: "https://a.example/"))
        try same(Methods.Check.self, GroupArguments(group: "com.example.suite"))
        try same(Methods.Check.self, GroupArguments())
        try same(Methods.Token.self, .init(group: "g", renew: true))
        try same(Methods.Token.self, .init(group: "g", resource: "https://git.example.com/team/repo.git"))
        // The account a call names (found by a helper: the command's calls dropped it).
        try same(Methods.Sign.self, SignRequest(group: "g", account: "admin", method: "GET", url: "https://a.example/"))
        try same(Methods.Check.self, GroupArguments(group: "g", account: "admin"))
        try same(Methods.Token.self, .init(group: "g", account: "admin", resource: "https://git.example.com/"))
        let hello = try XCTUnwrap(Methods.Hello.quickCall(serial: 1, .init(client: "msso")))
        let decoded = try WireCodec.decode(Call<Methods.Hello.Arguments>.self, from: hello.dropFirst(4))
        XCTAssertEqual(decoded.args.version, protocolVersion)
        XCTAssertEqual(decoded.args.client, "msso")
    }

    private func same<M: QuickMethod>(_: M.Type, _ arguments: M.Arguments) throws where M.Arguments: Equatable {
        let frame = try XCTUnwrap(M.quickCall(serial: 7, arguments))
        let decoded = try WireCodec.decode(Call<M.Arguments>.self, from: frame.dropFirst(4))
        XCTAssertEqual(decoded.serial, 7)
        XCTAssertEqual(decoded.method, M.name)
        XCTAssertEqual(decoded.args, arguments)
    }

    static let replies: [String] = [
        #"{"type":"reply","serial":2,"result":{"group":"com.example.suite","state":"valid","issuer":"http://127.0.0.1:9/api/oidc","username":"alice","loggedInAt":1795000000.25,"sessionExpiresAt":1795001800,"sessionMaxAt":1795043200,"accessTokenExpiresAt":1795000300,"admin":true}}"#,
        #"{"type":"reply","serial":2,"result":{"group":"g","state":"notLoggedIn","admin":false}}"#,
        #"{"type":"reply","serial":2,"result":{"group":"g","account":"admin","isDefault":true,"state":"valid","username":"bob"}}"#,
        #"{"type":"reply","serial":2,"result":{"group":"g","state":"valid","sessionExpiresAt":1795001800,"locked":true}}"#,
        #"{"type":"reply","serial":2,"result":{"group":"g","state":"valid","fieldOfTomorrow":1}}"#,
        #"{"type":"reply","serial":2,"result":{"headers":[["Authorization","Bearer eyJ0.a-b_c"],["DPoP","x\/y"]]}}"#,
        #"{"type":"reply","serial":2,"result":{"accessToken":"t","expiresAt":1795000300.5,"header":"Bearer"}}"#,
        #"{"type":"error","serial":2,"error":"NotEntitled","message":"\"msso\" is not registered\nfor g"}"#,
    ]

    /// Every reply above, and 40,000 mutations of them: wherever the quick reader finds a value,
    /// JSONDecoder finds the same one; wherever a quick result comes out, JSONDecoder
    /// decodes the same result.
    func testOnEveryReplyItReadsItAgreesWithTheDecoders() throws {
        var random = SplitMix(seed: 8259)
        let alphabet = Array(#"{}[],:" \0123456789aeflnrstu-.E+/\"#.utf8) + [0x00, 0xC3, 0xA4, 0x1F, 0x7F]
        var read = 0
        for round in 0..<40_000 {
            var bytes = Array(Self.replies[round % Self.replies.count].utf8)
            if round >= Self.replies.count {
                for _ in 0...(random.next() % 2) {
                    let at = Int(random.next() % UInt64(bytes.count))
                    switch random.next() % 3 {
                    case 0: bytes.remove(at: at)
                    case 1: bytes.insert(alphabet[Int(random.next() % UInt64(alphabet.count))], at: at)
                    default: bytes[at] = alphabet[Int(random.next() % UInt64(alphabet.count))]
                    }
                    if bytes.isEmpty { bytes = [0x20] }
                }
            }
            guard let value = bytes.withUnsafeBytes({ JSONValue.parse($0) }) else { continue }
            read += 1
            let text = String(decoding: bytes, as: UTF8.self)
            XCTAssertEqual(value, try JSONDecoder().decode(Reference.self, from: Data(bytes)).value, text)
            guard let result = value["result"] else { continue }
            if let status = Methods.Check.quickResult(result) {
                XCTAssertEqual(status, try JSONDecoder().decode(ResultOnly<SessionStatus>.self, from: Data(bytes)).result, text)
            }
            if let signed = Methods.Sign.quickResult(result) {
                XCTAssertEqual(signed, try JSONDecoder().decode(ResultOnly<SignResponse>.self, from: Data(bytes)).result, text)
            }
            if let token = Methods.Token.quickResult(result) {
                XCTAssertEqual(token, try JSONDecoder().decode(ResultOnly<Methods.Token.Result>.self, from: Data(bytes)).result, text)
            }
        }
        XCTAssertGreaterThan(read, 2000)
    }

    func testAResultWithAFieldItDoesNotKnowIsLeftToJSONDecoder() throws {
        let known = try XCTUnwrap(Array(#"{"group":"g","state":"valid","locked":true}"#.utf8).withUnsafeBytes { JSONValue.parse($0) })
        XCTAssertEqual(Methods.Check.quickResult(known)?.locked, true)
        let newer = try XCTUnwrap(Array(#"{"group":"g","state":"valid","fieldOfTomorrow":1}"#.utf8).withUnsafeBytes { JSONValue.parse($0) })
        XCTAssertNil(Methods.Check.quickResult(newer))
    }
}

/// A reply's result alone, as JSONDecoder reads it.
struct ResultOnly<T: Decodable>: Decodable { let result: T }

/// A JSON value as JSONDecoder reads it.
struct Reference: Decodable {
    let value: JSONValue
    init(from decoder: Decoder) throws {
        let single = try decoder.singleValueContainer()
        if single.decodeNil() { value = .null }
        else if let flag = try? single.decode(Bool.self) { value = .bool(flag) }
        else if let number = try? single.decode(Double.self) { value = .number(number) }
        else if let text = try? single.decode(String.self) { value = .string(text) }
        else if let array = try? single.decode([Reference].self) { value = .array(array.map(\.value)) }
        else { value = .object(try single.decode([String: Reference].self).mapValues(\.value)) }
    }
}
