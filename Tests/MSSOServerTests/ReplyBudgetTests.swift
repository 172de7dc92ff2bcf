@testable import MSSOServer
import XCTest

/// The bytes of replies peers have not read, without a socket: one connection's queue against a
/// fake `write`, and the budget of all connections together.
final class ReplyBudgetTests: XCTestCase {
    let KiB = 1024

    func testAConnectionPausesAtItsOwnMarkAndUnderPressureAtALowerOne() {
        var budget = ReplyBudget(total: 1024 * KiB, perConnection: 256 * KiB, underPressure: 16 * KiB)
        XCTAssertTrue(budget.mayRead(holding: 0))
        XCTAssertTrue(budget.mayRead(holding: 200 * KiB))
        XCTAssertFalse(budget.mayRead(holding: 256 * KiB), "its own high-water mark")
        budget.add(511 * KiB)
        XCTAssertFalse(budget.pressed)
        XCTAssertTrue(budget.mayRead(holding: 100 * KiB))
        budget.add(1 * KiB) // half the budget held
        XCTAssertTrue(budget.pressed)
        XCTAssertFalse(budget.exceeded)
        XCTAssertTrue(budget.mayRead(holding: 0), "a client that reads its replies is still served")
        XCTAssertTrue(budget.mayRead(holding: 16 * KiB - 1))
        XCTAssertFalse(budget.mayRead(holding: 16 * KiB), "holding more than a little: paused")
        budget.remove(512 * KiB)
        XCTAssertEqual(budget.held, 0)
        XCTAssertTrue(budget.mayRead(holding: 100 * KiB), "pressure gone: the own mark again")
    }

    func testPastTheBudgetTheBiggestHoldersGoUntilAQuarterIsFree() {
        var budget = ReplyBudget(total: 1000, perConnection: 300, underPressure: 10)
        let holders = [("a", 300), ("b", 10), ("c", 250), ("d", 0), ("e", 290), ("f", 160)]
        for (_, bytes) in holders { budget.add(bytes) }
        XCTAssertEqual(budget.held, 1010)
        XCTAssertTrue(budget.exceeded)
        // 1010 held, at most 750 to remain: a (300) leaves 710.
        XCTAssertEqual(budget.victims(holders.map { (holder: $0.0, bytes: $0.1) }), ["a"])
        budget.add(400) // 1410: a, e, c (840 freed) leave 570
        XCTAssertEqual(budget.victims(holders.map { (holder: $0.0, bytes: $0.1) }), ["a", "e", "c"])
        var within = ReplyBudget(total: 1000, perConnection: 300)
        within.add(1000)
        XCTAssertEqual(within.victims([(holder: "a", bytes: 1000)]), [], "at the budget, nobody is closed")
        var nobody = ReplyBudget(total: 10, perConnection: 5)
        nobody.add(20)
        XCTAssertEqual(nobody.victims([(holder: "idle", bytes: 0)]), [], "nobody holding anything is never closed")
    }

    /// Every split of every frame between what the kernel takes at once and what waits.
    func testAQueueKeepsEveryByteInOrderWhateverTheKernelTakes() {
        let frames: [[UInt8]] = [Array(0..<7), Array(7..<8), Array(8..<40), Array(40..<41)]
        for firstWrite in 0...7 {
            for chunk in 1...9 {
                var queue = OutputQueue()
                var out: [UInt8] = []
                var held = queue.enqueue(frames[0], after: firstWrite)
                out += frames[0][..<firstWrite]
                XCTAssertEqual(held, 7 - firstWrite)
                for frame in frames.dropFirst() { held += queue.enqueue(frame) }
                XCTAssertEqual(queue.pending, held)
                var room = 3 // the peer reads a little, then stops
                while queue.pending > 0 {
                    let before = queue.pending
                    let (written, failed) = queue.drain(again: -11) { bytes in
                        guard room > 0 else { return -11 }
                        let count = min(chunk, room, bytes.count)
                        out += bytes.prefix(count)
                        room -= count
                        return count
                    }
                    XCTAssertFalse(failed)
                    XCTAssertEqual(before - queue.pending, written)
                    room = 5
                }
                XCTAssertEqual(out, Array(0..<41), "first write \(firstWrite), chunks of \(chunk)")
            }
        }
    }

    func testAWriteErrorIsReportedWithWhatWasWrittenBefore() {
        var queue = OutputQueue()
        _ = queue.enqueue([1, 2, 3, 4])
        var calls = 0
        let (written, failed) = queue.drain(again: -11) { _ in
            calls += 1
            return calls == 1 ? 2 : -32 // EPIPE
        }
        XCTAssertEqual(written, 2)
        XCTAssertTrue(failed)
        XCTAssertEqual(queue.pending, 2)
        queue.clear()
        XCTAssertEqual(queue.pending, 0)
    }

    func testCallsRunningTakeFromOneBudgetAndTheOnePastItIsRefused() {
        var budget = CallBudget(total: 100)
        XCTAssertTrue(budget.take(60))
        XCTAssertFalse(budget.take(41), "past the budget: nothing taken")
        XCTAssertEqual(budget.held, 60)
        XCTAssertTrue(budget.take(40))
        budget.release(60)
        XCTAssertTrue(budget.take(60))
        XCTAssertEqual(budget.held, 100)
    }
}
