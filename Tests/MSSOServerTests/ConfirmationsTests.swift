import MSSOCore
import MSSOProtocol
@testable import MSSOServer
import Synchronization
import XCTest

/// The user's answers to `confirm` registrations (``Confirmations``), with an asker the test answers.
final class ConfirmationsTests: XCTestCase {
    /// Counts the questions and answers each when the test says so.
    final class Asker: ConfirmationAsker {
        let asked = Mutex(0)
        let waiting = Mutex<[CheckedContinuation<ConfirmationAnswer, Never>]>([])

        func ask(_ request: ConfirmationRequest) async -> ConfirmationAnswer {
            asked.withLock { $0 += 1 }
            return await withCheckedContinuation { continuation in waiting.withLock { $0.append(continuation) } }
        }

        func answerAll(_ answer: ConfirmationAnswer) async {
            while waiting.withLock({ $0.isEmpty }) { await Task.yield() }
            let taken = waiting.withLock { list -> [CheckedContinuation<ConfirmationAnswer, Never>] in
                let taken = list
                list.removeAll()
                return taken
            }
            for continuation in taken { continuation.resume(returning: answer) }
        }
    }

    static func request(_ requester: String = "/usr/bin/git") -> ConfirmationRequest {
        ConfirmationRequest(group: "g", verb: "token", tool: "/usr/bin/git-credential-msso", requesters: [requester, "/usr/bin/bash"])
    }

    /// The error `confirm` throws, or nil when it allowed.
    static func refusal(_ confirmations: Confirmations, _ request: ConfirmationRequest, now: Double = 0) async -> BrokerError? {
        do {
            try await confirmations.confirm(request, now: now)
            return nil
        } catch {
            return error
        }
    }

    /// `confirm` running on its own task: its value is the refusal, or nil.
    static func asking(_ confirmations: Confirmations, _ request: ConfirmationRequest, now: Double = 0) -> Task<BrokerError?, Never> {
        Task { await refusal(confirmations, request, now: now) }
    }

    func testTwentyCallersAskingTheSameQuestionShareOneNotificationAndOneAnswer() async throws {
        let confirmations = Confirmations(), asker = Asker()
        await confirmations.setAsker(asker)
        let callers = (0..<20).map { _ in Self.asking(confirmations, Self.request()) }
        while await confirmations.waiters(for: Self.request()) < 20 { await Task.yield() } // all of them asking
        await asker.answerAll(.allowOnce)
        for caller in callers {
            let refused = await caller.value
            XCTAssertNil(refused)
        }
        XCTAssertEqual(asker.asked.withLock { $0 }, 1)
    }

    func testAllowForAnHourIsRememberedForThatQuestionAndThatHourOnly() async throws {
        let confirmations = Confirmations(), asker = Asker()
        await confirmations.setAsker(asker)
        let first = Self.asking(confirmations, Self.request())
        await asker.answerAll(.allow(forSeconds: 3600))
        let firstRefusal = await first.value
        XCTAssertNil(firstRefusal)
        let again = await Self.refusal(confirmations, Self.request(), now: 3599)
        XCTAssertNil(again, "not asked again within the hour")
        XCTAssertEqual(asker.asked.withLock { $0 }, 1)
        let other = Self.asking(confirmations, Self.request("/tmp/evil"), now: 10)
        await asker.answerAll(.deny)
        let denied = await other.value
        XCTAssertEqual(denied?.name, .forbidden)
        XCTAssertTrue(denied?.message.contains("you did not allow /tmp/evil") == true, denied?.message ?? "")
        let later = Self.asking(confirmations, Self.request(), now: 3601)
        await asker.answerAll(.allowOnce)
        let laterRefusal = await later.value
        XCTAssertNil(laterRefusal)
        XCTAssertEqual(asker.asked.withLock { $0 }, 3, "asked again once the hour is over")
    }

    func testAtMostSixteenDifferentQuestionsWaitAndNobodyToAskIsARefusal() async throws {
        let confirmations = Confirmations(), asker = Asker()
        let nobody = await Self.refusal(confirmations, Self.request())
        XCTAssertEqual(nobody?.name, .forbidden)
        XCTAssertTrue(nobody?.message.contains("no notification server") == true, nobody?.message ?? "")
        await confirmations.setAsker(asker)
        let waiting = (0..<16).map { n in Self.asking(confirmations, Self.request("/bin/p\(n)")) }
        while asker.asked.withLock({ $0 }) < 16 { await Task.yield() }
        let seventeenth = await Self.refusal(confirmations, Self.request("/bin/one-more"))
        XCTAssertEqual(seventeenth?.name, .busy)
        await asker.answerAll(.deny)
        for task in waiting { _ = await task.value }
    }

    func testAHostsAllowForAnHourHoldsForThatSessionHostGroupAndVerbAndADenialNamesTheHost() async throws {
        let confirmations = Confirmations(), asker = Asker()
        let nobody = await Self.refusal(confirmations, ConfirmationRequest(group: "g", verb: "token", host: "build01", forward: "s1"))
        XCTAssertTrue(nobody?.message.contains("calls from host build01 wait for your confirmation") == true, nobody?.message ?? "")
        await confirmations.setAsker(asker)
        let first = Self.asking(confirmations, ConfirmationRequest(group: "g", verb: "token", host: "build01", forward: "s1"))
        await asker.answerAll(.allow(forSeconds: 3600))
        let allowed = await first.value
        XCTAssertNil(allowed)
        let again = await Self.refusal(confirmations, ConfirmationRequest(group: "g", verb: "token", host: "build01", forward: "s1"), now: 60)
        XCTAssertNil(again, "the same host, group and verb: not asked again within the hour")
        for other in [ConfirmationRequest(group: "g", verb: "sign", host: "build01", forward: "s1"), ConfirmationRequest(group: "g", verb: "token", host: "ci", forward: "s1"),
                      ConfirmationRequest(group: "h", verb: "token", host: "build01", forward: "s1"),
                      // Another forward under the same name (another session, or any program of the user's): asked again.
                      ConfirmationRequest(group: "g", verb: "token", host: "build01", forward: "s2")] {
            let asked = Self.asking(confirmations, other, now: 60)
            await asker.answerAll(.deny)
            let denied = await asked.value
            XCTAssertEqual(denied?.name, .forbidden)
            XCTAssertTrue(denied?.message.contains("you did not allow host \(other.host!) to \(other.verb) with \"\(other.group)\"") == true,
                          denied?.message ?? "")
        }
        XCTAssertEqual(asker.asked.withLock { $0 }, 5)
    }
}
