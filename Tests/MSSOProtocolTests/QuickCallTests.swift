import XCTest
@testable import MSSOProtocol

/// The quick reader of hot calls must mean what `JSONDecoder` means, on every frame it accepts.
final class QuickCallTests: XCTestCase {
    static let plain = [
        #"{"type":"call","serial":2,"method":"sign","args":{"method":"GET","url":"https://api.example.com/v1/items?page=2"}}"#,
        #"{ "type" : "call", "serial" : 4294967295, "method" : "sign", "args" : { "group" : "com.example.suite", "method" : "POST", "url" : "https://a.example/x", "headers" : [ [ "Content-Type", "application/json" ], ["Accept","*/*"] ], "bodySHA256" : "RBNvo1WzZ4oRRq0W9+hknpT7T8If536DEMBg9hyq/4o=", "dpopNonce" : "n-1" } }"#,
        #"{"args":{"headers":[],"url":"u","method":"GET"},"method":"sign","serial":7,"type":"call"}"#,
        #"{"type":"call","serial":3,"method":"ping","args":{"data":"x y"}}"#,
        // The short escapes (PHP writes `\/`; every writer escapes a quote, a backslash, a newline).
        #"{"type":"call","serial":9,"method":"sign","args":{"method":"GET","url":"https:\/\/a.example\/x?q=\"a b\"","headers":[["X-Note","tab\there\\ \b\f\n\r"]]}}"#,
    ]

    func testThePlainFormsAreReadQuickly() throws {
        for text in Self.plain {
            let quick = try XCTUnwrap(parse(text), text)
            try assertSame(quick, text)
        }
    }

    func testWhatItCannotReadIsLeftToJSONDecoder() {
        let others = [
            #"{"type":"call","serial":2,"method":"sign","args":{"method":"GET","url":"https:\u002f\u002fa.example"}}"#, // a \u escape
            #"{"type":"call","serial":2,"method":"sign","args":{"method":"GET","url":"https://ä.example"}}"#,  // not ASCII
            #"{"type":"call","serial":2,"method":"sign","args":{"method":"GET","url":"u","group":null}}"#,     // null
            #"{"type":"call","serial":2,"method":"sign","args":{"method":"GET","url":"u","extra":"1"}}"#,      // unknown key
            #"{"type":"call","serial":2,"serial":3,"method":"sign","args":{"method":"GET","url":"u"}}"#,       // a duplicate
            #"{"type":"call","serial":02,"method":"sign","args":{"method":"GET","url":"u"}}"#,                 // a leading zero
            #"{"type":"call","serial":2.0,"method":"sign","args":{"method":"GET","url":"u"}}"#,
            #"{"type":"call","serial":0,"method":"sign","args":{"method":"GET","url":"u"}}"#,
            #"{"type":"call","serial":4294967296,"method":"sign","args":{"method":"GET","url":"u"}}"#,
            #"{"type":"call","serial":2,"method":"sign","args":{"method":"GET","url":"u"}} x"#,
            #"{"type":"call","serial":2,"method":"status","args":{}}"#,
        ]
        for text in others { XCTAssertNil(parse(text), text) }
    }

    /// 50,000 mutations of the plain forms (bytes deleted, inserted, replaced, spans repeated):
    /// wherever the quick reader accepts one, JSONDecoder reads the same call from it.
    func testOnEveryMutatedFrameItAcceptsItAgreesWithJSONDecoder() throws {
        var random = SplitMix(seed: 9421)
        let alphabet = Array(#"{}[],:" \0123456789abcdefghijklmnopqrstuvwxyz-.eE+\n\t"#.utf8) + [0x00, 0x7F, 0xC3, 0xA4, 0x1F]
        var accepted = 0
        for round in 0..<50_000 {
            var bytes = Array(Self.plain[round % Self.plain.count].utf8)
            for _ in 0...(random.next() % 3) {
                let at = Int(random.next() % UInt64(bytes.count))
                switch random.next() % 4 {
                case 0: bytes.remove(at: at)
                case 1: bytes.insert(alphabet[Int(random.next() % UInt64(alphabet.count))], at: at)
                case 2: bytes[at] = alphabet[Int(random.next() % UInt64(alphabet.count))]
                default:
                    let end = min(bytes.count, at + 1 + Int(random.next() % 24))
                    bytes.insert(contentsOf: bytes[at..<end], at: at)
                }
                if bytes.isEmpty { bytes = [0x20] }
            }
            guard let quick = bytes.withUnsafeBytes({ QuickCall.parse($0) }) else { continue }
            accepted += 1
            try assertSame(quick, String(decoding: bytes, as: UTF8.self), bytes: bytes)
        }
        XCTAssertGreaterThan(accepted, 1000, "the mutations should leave many frames readable")
    }

    private func parse(_ text: String) -> IncomingCall? {
        Array(text.utf8).withUnsafeBytes { QuickCall.parse($0) }
    }

    private func assertSame(_ quick: IncomingCall, _ text: String, bytes: [UInt8]? = nil) throws {
        let slow = try JSONDecoder().decode(IncomingCall.self, from: Data(bytes ?? Array(text.utf8)))
        XCTAssertEqual(quick.type, slow.type, text)
        XCTAssertEqual(quick.serial, slow.serial, text)
        XCTAssertEqual(quick.method, slow.method, text)
        switch (quick.arguments, slow.arguments) {
        case (.success(.sign(let a)), .success(.sign(let b))): XCTAssertEqual(a, b, text)
        case (.success(.ping(let a)), .success(.ping(let b))): XCTAssertEqual(a, b, text)
        default: XCTFail("the readers disagree on \(text)")
        }
    }
}

/// A small seeded generator: the same mutations on every run.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
