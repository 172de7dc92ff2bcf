import Dispatch
@testable import MSSOCore
import Synchronization
import XCTest

final class WorkersTests: XCTestCase {
    /// A gate jobs wait at until it opens.
    final class Gate: @unchecked Sendable {
        private let semaphore = DispatchSemaphore(value: 0)
        func wait() { semaphore.wait() }
        func open(_ count: Int = 1) { for _ in 0..<count { semaphore.signal() } }
        /// Waits for one opening, at most `seconds`.
        func waitResult(seconds: Double) -> Outcome {
            semaphore.wait(timeout: .now() + seconds) == .success ? .success : .timedOut
        }
    }

    func waitUntil(_ what: String, _ condition: () -> Bool) {
        let deadline = Date().addingTimeInterval(10)
        while !condition() {
            XCTAssertLessThan(Date(), deadline, "never: \(what)")
            if Date() >= deadline { return }
            usleep(1000)
        }
    }

    func testAJobThatNeverEndsHoldsNoOtherJob() {
        let workers = Workers()
        let stalled = Gate(), ran = Gate()
        XCTAssertTrue(workers.run { stalled.wait() })
        XCTAssertTrue(workers.run { ran.open() })
        XCTAssertEqual(ran.waitResult(seconds: 10), .success, "the second job waited for the first")
        stalled.open()
    }

    func testFinishedThreadsAreReusedAndAtMostFourWait() {
        let workers = Workers()
        let gate = Gate()
        let done = Mutex(0)
        for _ in 0..<10 { XCTAssertTrue(workers.run { gate.wait(); done.withLock { $0 += 1 } }) }
        XCTAssertEqual(workers.counts.threads, 10)
        gate.open(10)
        waitUntil("ten jobs done and six threads gone") { done.withLock { $0 } == 10 && workers.counts.threads == Workers.idleKept }
        XCTAssertEqual(workers.counts.idle, Workers.idleKept)
        // An idle thread takes the next job, and is seen busy while it runs: no thread is started.
        let held = Gate(), running = Gate()
        workers.run { running.open(); held.wait() }
        XCTAssertEqual(running.waitResult(seconds: 10), .success)
        XCTAssertEqual(workers.counts.threads, Workers.idleKept)
        XCTAssertEqual(workers.counts.idle, Workers.idleKept - 1)
        held.open()
    }

    func testThePoolRefusesPastItsCeilingAndRecovers() {
        let workers = Workers()
        let gate = Gate()
        for _ in 0..<Workers.maximumThreads { XCTAssertTrue(workers.run { gate.wait() }) }
        XCTAssertFalse(workers.run {}, "a job past the ceiling was taken")
        gate.open(Workers.maximumThreads)
        waitUntil("the threads back to the kept ones") { workers.counts.threads == Workers.idleKept }
        let ran = Gate()
        XCTAssertTrue(workers.run { ran.open() })
        XCTAssertEqual(ran.waitResult(seconds: 10), .success)
    }

    func testALaneRunsItsJobsOneAtATimeInOrder() {
        let lane = Workers.Lane(on: Workers())
        let seen = Mutex<(order: [Int], running: Int, most: Int)>(([], 0, 0))
        for index in 0..<200 {
            lane.async {
                seen.withLock { $0.running += 1; $0.most = max($0.most, $0.running) }
                usleep(index % 10 == 0 ? 200 : 0)
                seen.withLock { $0.order.append(index); $0.running -= 1 }
            }
        }
        let last = lane.sync { seen.withLock { $0.order.count } }
        XCTAssertEqual(last, 200, "sync ran before the jobs given before it")
        XCTAssertEqual(seen.withLock { $0.order }, Array(0..<200))
        XCTAssertEqual(seen.withLock { $0.most }, 1)
    }

    func testATimerFiresAndALaneGoesOnWhileThePoolIsAtItsCeiling() {
        let workers = Workers()
        let gate = Gate()
        for _ in 0..<Workers.maximumThreads { XCTAssertTrue(workers.run { gate.wait() }) }
        // What a timeout is for: it fires though no pool thread is free.
        let fired = Gate()
        XCTAssertNotNil(workers.after(0.01) { fired.open() })
        XCTAssertEqual(fired.waitResult(seconds: 10), .success, "a timer waited for a free pool thread")
        // A lane's job given now waits for a thread (never the timers' own), and runs once one is free.
        let lane = Workers.Lane(on: workers)
        let ran = Gate()
        let onTimerThread = Mutex(false)
        let timerThread = Mutex<pthread_t?>(nil)
        let seen = Gate()
        workers.after(0) { timerThread.withLock { $0 = pthread_self() }; seen.open() }
        XCTAssertEqual(seen.waitResult(seconds: 10), .success)
        let timers = timerThread.withLock { $0 }!
        lane.async { onTimerThread.withLock { $0 = pthread_equal(pthread_self(), timers) != 0 }; ran.open() }
        XCTAssertEqual(ran.waitResult(seconds: 0.3), .timedOut, "a lane's job ran with every pool thread taken")
        gate.open(1)
        XCTAssertEqual(ran.waitResult(seconds: 10), .success, "the lane's job never ran once a thread was free")
        XCTAssertFalse(onTimerThread.withLock { $0 }, "the lane's job ran on the timers' thread")
        gate.open(Workers.maximumThreads - 1)
    }

    func testALanesDelayedJobRunsOnTheLaneAfterItsTime() {
        let lane = Workers.Lane(on: Workers())
        let order = Mutex<[String]>([])
        let done = Gate()
        lane.after(0.05) { order.withLock { $0.append("later") }; done.open() }
        lane.async { order.withLock { $0.append("now") } }
        XCTAssertEqual(done.waitResult(seconds: 10), .success)
        XCTAssertEqual(order.withLock { $0 }, ["now", "later"])
    }

    func testSyncFromTheLanesOwnJobRunsAtOnce() {
        let lane = Workers.Lane(on: Workers())
        let inner = Gate()
        lane.async { XCTAssertEqual(lane.sync { 7 }, 7); inner.open() }
        XCTAssertEqual(inner.waitResult(seconds: 10), .success, "sync from the lane's own job waited for itself")
    }

    func testSyncReturnsTheValueAndThrowsTheError() {
        struct Failed: Error {}
        let lane = Workers.Lane(on: Workers())
        XCTAssertEqual(lane.sync { 42 }, 42)
        XCTAssertThrowsError(try lane.sync { () throws(Failed) -> Int in throw Failed() }) { XCTAssertTrue($0 is Failed) }
    }

    func testATimerFiresAndACancelledOneNever() {
        let workers = Workers()
        let fired = Gate()
        let cancelled = Mutex(false)
        let later = workers.after(0.2) { cancelled.withLock { $0 = true } }
        XCTAssertNotNil(workers.after(0.05) { fired.open() })
        workers.cancel(later!)
        XCTAssertEqual(fired.waitResult(seconds: 10), .success)
        // The earlier timer has fired, the later one was due after it; give it its time and more.
        let after = Gate()
        workers.after(0.3) { after.open() }
        XCTAssertEqual(after.waitResult(seconds: 10), .success)
        XCTAssertFalse(cancelled.withLock { $0 }, "a cancelled timer ran")
    }

    /// What `clock` reads now, in seconds.
    func reading(_ clock: clockid_t) -> Double {
        var now = timespec()
        clock_gettime(clock, &now)
        return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
    }

    func testAWindowTimerFiresAtTheFirstOfItsTwoClocks() {
        let workers = Workers()
        let far = 1e9 // about 30 years on either clock
        let wall = { self.reading(CLOCK_REALTIME) }, elapsed = { self.reading(CLOCK_BOOTTIME) }
        let byTheWallClock = Gate(), byElapsedTime = Gate(), atOnce = Gate()
        let cancelled = Mutex(false)
        let never = workers.at(wall: wall() + 0.2, elapsed: elapsed() + far) { cancelled.withLock { $0 = true } }
        XCTAssertNotNil(workers.at(wall: wall() + 0.05, elapsed: elapsed() + far) { byTheWallClock.open() })
        XCTAssertNotNil(workers.at(wall: wall() + far, elapsed: elapsed() + 0.05) { byElapsedTime.open() })
        XCTAssertNotNil(workers.at(wall: wall() - 1, elapsed: elapsed() + far) { atOnce.open() })
        workers.cancel(never!)
        XCTAssertEqual(atOnce.waitResult(seconds: 10), .success)
        XCTAssertEqual(byTheWallClock.waitResult(seconds: 10), .success)
        XCTAssertEqual(byElapsedTime.waitResult(seconds: 10), .success)
        let after = Gate()
        workers.after(0.3) { after.open() }
        XCTAssertEqual(after.waitResult(seconds: 10), .success)
        XCTAssertFalse(cancelled.withLock { $0 }, "a cancelled timer ran")
    }

    func testSleepUntilWakesAtItsTimeAndACancelledOneAtOnceLeavingNoTimer() async {
        let workers = Workers(), clock = SystemClock(workers: workers)
        let sleeper = Task { await clock.sleep(until: Moment(wall: clock.now() + 3600, elapsed: clock.elapsed() + 3600)) }
        let started = Date()
        while workers.timerCount == 0 { await Task.yield() }
        sleeper.cancel()
        await sleeper.value
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        XCTAssertEqual(workers.timerCount, 0, "the timer went with the sleep")
        let before = clock.now()
        await clock.sleep(until: Moment(wall: before + 0.05, elapsed: clock.elapsed() + 3600))
        XCTAssertGreaterThanOrEqual(clock.now(), before + 0.05, "woken by the wall clock, not before")
    }

    func testCancellingATimerThatIsFiringWaitsForItsEnd() {
        let workers = Workers()
        let started = Gate(), finish = Gate()
        let finished = Mutex(false)
        let timer = workers.after(0) {
            started.open()
            finish.wait()
            finished.withLock { $0 = true }
        }!
        XCTAssertEqual(started.waitResult(seconds: 10), .success)
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.1) { finish.open() }
        workers.cancel(timer)
        XCTAssertTrue(finished.withLock { $0 }, "cancel returned while the timer's job still ran")
    }

    func testADeadlineInterruptsABodyThatOverrunsAndNotOneThatDidNot() {
        let interrupted = Mutex(0)
        let released = Gate()
        let value = Deadline.run(within: 0.05, interrupt: { interrupted.withLock { $0 += 1 }; released.open() }) { () -> Int in
            released.wait() // until the interrupt lets it go, as a cancelled GLib call returns
            return 1
        }
        XCTAssertEqual(value, 1)
        XCTAssertEqual(interrupted.withLock { $0 }, 1)
        XCTAssertEqual(Deadline.run(within: 0.05, interrupt: { interrupted.withLock { $0 += 1 } }) { 2 }, 2)
        // Timers fire in the order they are due: once a later one has, the cancelled one never will.
        let later = Gate()
        Workers.shared.after(0.1) { later.open() }
        XCTAssertEqual(later.waitResult(seconds: 10), .success)
        XCTAssertEqual(interrupted.withLock { $0 }, 1, "a deadline whose body ended in time interrupted it")
    }
}

extension WorkersTests.Gate {
    enum Outcome { case success, timedOut }
}
