import MSSOProtocol
@testable import MSSOServer
import XCTest

/// A connection's reading half without a socket: every split of a stream into reads, two writers
/// interleaved, and the caps on what one read may take.
final class InboundFramesTests: XCTestCase {
    let alice: InboundFrames.Writer = (pid: 10, uid: 1000, process: 100)
    let other: InboundFrames.Writer = (pid: 11, uid: 1000, process: 101)
    var clock: UInt64 = 1

    func frame(_ json: String) -> [UInt8] {
        let payload = Array(json.utf8)
        return [UInt8(payload.count >> 24 & 0xff), UInt8(payload.count >> 16 & 0xff), UInt8(payload.count >> 8 & 0xff),
                UInt8(payload.count & 0xff)] + payload
    }

    func ping(_ serial: Int, _ data: String = "x") -> [UInt8] {
        frame("{\"type\":\"call\",\"serial\":\(serial),\"method\":\"ping\",\"args\":{\"data\":\"\(data)\"}}")
    }

    /// What a list of frames says: the serial of each call, or the error name of each refusal.
    func summary(_ decoded: [InboundFrames.Decoded]) -> [String] {
        decoded.map {
            switch $0 {
            case .call(let call): return "call \(call.serial ?? 0)"
            case .malformed(_, let error): return error.name.rawValue
            }
        }
    }

    func take(_ frames: inout InboundFrames, _ bytes: ArraySlice<UInt8>, from writer: InboundFrames.Writer) -> [String] {
        clock += 1
        guard case .frames(let decoded) = frames.take(bytes, from: writer, now: { [clock] in clock }) else {
            XCTFail("too large")
            return []
        }
        return summary(decoded)
    }

    func testEverySplitOfAStreamIntoTwoReadsGivesTheSameCalls() {
        let stream = ping(1) + ping(2, String(repeating: "y", count: 300)) + frame("not json") + ping(3)
        for cut in 0...stream.count {
            var frames = InboundFrames()
            let first = take(&frames, stream[..<cut], from: alice)
            XCTAssertEqual(frames.frameStarted != 0, frames.count > 0, "a partial frame is timed from its start (cut \(cut))")
            let rest = take(&frames, stream[cut...], from: alice)
            XCTAssertEqual(first + rest, ["call 1", "call 2", "BadRequest", "call 3"], "cut at \(cut)")
            XCTAssertEqual(frames.count, 0)
            XCTAssertEqual(frames.frameStarted, 0)
        }
    }

    func testEveryByteOnItsOwnGivesTheSameCalls() {
        let stream = ping(1) + ping(2)
        var frames = InboundFrames()
        var calls: [String] = []
        for index in stream.indices { calls += take(&frames, stream[index...index], from: alice) }
        XCTAssertEqual(calls, ["call 1", "call 2"])
    }

    func testAFrameTwoProcessesWroteIsRefusedAndWholeFramesOfEitherAreNot() {
        let first = ping(1), second = ping(2)
        for cut in 1..<first.count {
            var frames = InboundFrames()
            XCTAssertEqual(take(&frames, first[..<cut], from: alice), [])
            // The other process finishes alice's frame and writes one of its own.
            XCTAssertEqual(take(&frames, first[cut...] + second[...], from: other), ["Forbidden", "call 2"], "cut at \(cut)")
        }
        var frames = InboundFrames()
        XCTAssertEqual(take(&frames, first[...], from: alice), ["call 1"])
        XCTAssertEqual(take(&frames, second[...], from: other), ["call 2"], "whole frames: each is its writer's")
        // The same pid as another process (reused): told apart by the process.
        let reused: InboundFrames.Writer = (pid: alice.pid, uid: alice.uid, process: 999)
        XCTAssertEqual(take(&frames, first[..<5], from: alice), [])
        XCTAssertEqual(take(&frames, first[5...], from: reused), ["Forbidden"])
    }

    func testAReadTakesAtMostTheSmallRoomWithoutASlotAndAtLeastItsFairShare() {
        var frames = InboundFrames()
        XCTAssertEqual(frames.room(holdsLargeFrame: false, scratch: 65536), InboundFrames.fairShare)
        // A header announcing a 20 KB frame: the rest of it may come, up to the small room.
        let large = ping(1, String(repeating: "z", count: 20_000))
        XCTAssertEqual(take(&frames, large[..<4], from: alice), [])
        XCTAssertEqual(frames.room(holdsLargeFrame: false, scratch: 65536), InboundFrames.smallFrameRoom - 4)
        XCTAssertEqual(frames.room(holdsLargeFrame: true, scratch: 65536), large.count - 4, "with a slot: the rest of the frame")
        XCTAssertEqual(take(&frames, large[4..<InboundFrames.smallFrameRoom], from: alice), [])
        XCTAssertTrue(frames.needsLargeFrameSlot)
        XCTAssertEqual(frames.room(holdsLargeFrame: false, scratch: 65536), 0, "full: nothing more until a slot")
        XCTAssertEqual(take(&frames, large[InboundFrames.smallFrameRoom...], from: alice), ["call 1"])
        XCTAssertFalse(frames.needsLargeFrameSlot)
        frames.compact()
        XCTAssertLessThanOrEqual(frames.bytes.capacity, 2 * InboundFrames.smallFrameRoom, "a large frame's memory is given back")
    }

    func testAHeaderOverTheCapEndsTheStream() {
        var frames = InboundFrames()
        let header: [UInt8] = [0, 1, 0, 1] // 65,537
        guard case .tooLarge(let announced) = frames.take(header[...], from: alice, now: { 1 }) else {
            return XCTFail("a frame over the cap was not refused")
        }
        XCTAssertEqual(announced, 65537)
        frames.clear()
        XCTAssertEqual(frames.count, 0)
        XCTAssertEqual(frames.frameStarted, 0)
    }
}
