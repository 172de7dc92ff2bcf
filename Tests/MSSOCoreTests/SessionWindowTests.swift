@testable import MSSOCore
import XCTest

/// The one rule for whether a session's window is open (``SessionWindow``), alone: it ends at its
/// stored wall-clock end or after as much elapsed time as it had left, whichever comes first.
final class SessionWindowTests: XCTestCase {
    /// Measured at wall-clock time 1000, elapsed time 50, with 600 s left: ends at 1600 / 650.
    let window = SessionWindow(endingAt: 1600, measuredAt: Moment(wall: 1000, elapsed: 50))

    func testWithinTheWindowBothClocksAgree() {
        let now = Moment(wall: 1300, elapsed: 350)
        XCTAssertTrue(window.isOpen(at: now))
        XCTAssertEqual(window.remaining(at: now), 300)
        XCTAssertEqual(window.wallEnd(at: now), 1600)
        XCTAssertFalse(window.isOpen(at: Moment(wall: 1600, elapsed: 650)), "the end itself is past")
    }

    func testAJumpForwardEndsItByTheWallClock() {
        let now = Moment(wall: 1000 + 601, elapsed: 60) // 10 s elapsed, the wall clock 591 s ahead
        XCTAssertFalse(window.isOpen(at: now))
        XCTAssertEqual(window.wallEnd(at: now), 1600, "it ended at its stored end")
        let inTheLead = Moment(wall: 1000 + 500, elapsed: 60)
        XCTAssertTrue(window.isOpen(at: inTheLead))
        XCTAssertEqual(window.remaining(at: inTheLead), 100)
    }

    func testAJumpBackNeverMakesItLastLongerInElapsedTime() {
        let jumped = Moment(wall: 1000 - 300 + 10, elapsed: 60) // 10 s elapsed, the clock set 5 min back
        XCTAssertTrue(window.isOpen(at: jumped))
        XCTAssertEqual(window.remaining(at: jumped), 590, "what it had left, not the 890 s the wall clock would give")
        XCTAssertEqual(window.wallEnd(at: jumped), 1300, "shown as an end on the clock as it now reads")
        XCTAssertFalse(window.isOpen(at: Moment(wall: 1000 - 300 + 600, elapsed: 650)), "600 s elapsed: ended")
    }

    func testTheLeadIsOnBothClocks() {
        XCTAssertEqual(window.before(120), Moment(wall: 1480, elapsed: 530))
    }

    func testOnceClosedAJumpBackDoesNotOpenItAgain() {
        var window = self.window
        let forward = Moment(wall: 1700, elapsed: 100)
        XCTAssertFalse(window.isOpen(at: forward))
        window.close(at: forward)
        XCTAssertFalse(window.isOpen(at: Moment(wall: 1050, elapsed: 101)), "the clock put right 650 s back")
        XCTAssertEqual(window.end.wall, 1600)
        var late = self.window
        late.close(at: Moment(wall: 1700, elapsed: 700))
        XCTAssertEqual(late.end.elapsed, 650, "closing never moves the end later")
    }
}
