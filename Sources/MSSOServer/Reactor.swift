import CMSSOSystem
import Glibc
import MSSOCore
import Synchronization

/// Something the reactor wakes up when its descriptor is ready.
protocol ReactorHandler: AnyObject {
    /// Called on the reactor's thread with the ready events (`CMSSO_READABLE`, …).
    func ready(_ events: UInt32)
    /// Whether its last turn took all it was allowed (a peer sending as fast as it can): such a
    /// handler waits its turn behind everyone who is not, so that a thousand busy peers cost a
    /// quiet one a few turns, not a round of them all.
    var busy: Bool { get }
}

extension ReactorHandler {
    var busy: Bool { false }
}

/// One thread waiting on epoll: the broker's socket, its connections and its file watches are
/// read, written and timed here, and nowhere else.
///
/// Why not SwiftNIO here: the broker judges every call by the process that sent it, which takes
/// `recvmsg` with `SCM_CREDENTIALS` on a stream socket (each call's sender, checked against the
/// pidfd the connection took at accept, `SO_PEERPIDFD`), and NIO's stream channels read with
/// `read(2)`, dropping that. The loop is small: a wake-up descriptor for work handed
/// in from other threads (``execute(_:)``), handlers by token, and a tick for deadlines.
final class Reactor: @unchecked Sendable {
    private let epoll: Int32
    private let wakeup: Int32
    private let queued = Mutex<[@Sendable () -> Void]>([])
    // Confined to the reactor's thread:
    private var handlers: [UInt64: ReactorHandler] = [:]
    /// Handled first in each round of events (the registration watcher: a file written before
    /// a call was sent must be seen before that call).
    private var urgent: Set<UInt64> = []
    private var nextToken: UInt64 = 1
    private var tickers: [() -> Void] = []
    /// Busy handlers that are ready, in the order they are served (each once per pass).
    private var backlog: [(token: UInt64, events: UInt32)] = []
    private var inBacklog: Set<UInt64> = []
    private var running = true
    private let threadID = Mutex<pthread_t?>(nil)

    /// How often deadlines are checked.
    static let tickNanoseconds: UInt64 = 100_000_000

    init() throws {
        epoll = cmsso_epoll_create()
        wakeup = cmsso_eventfd()
        guard epoll >= 0, wakeup >= 0 else { throw SystemError("cannot create the event loop", errno: -min(epoll, wakeup)) }
        guard cmsso_epoll_control(epoll, 1, wakeup, CMSSO_READABLE, 0) == 0 else {
            throw SystemError("cannot watch the event loop's wake-up descriptor", errno: errno)
        }
    }

    /// Starts the loop on a pool thread, its own for the daemon's life.
    func start() throws {
        let started = Workers.shared.run { [self] in
            threadID.withLock { $0 = pthread_self() }
            run()
        }
        guard started else { throw SystemError("cannot start the event loop's thread", errno: EAGAIN) }
    }

    /// Whether the caller runs on the reactor's thread.
    var inLoop: Bool {
        guard let id = threadID.withLock({ $0 }) else { return false }
        return pthread_equal(id, pthread_self()) != 0
    }

    /// Runs `work` on the reactor's thread, soon (in the order given). Safe from any thread.
    func execute(_ work: @escaping @Sendable () -> Void) {
        let first = queued.withLock { queue in
            queue.append(work)
            return queue.count == 1
        }
        if first { cmsso_eventfd_signal(wakeup) }
    }

    /// Stops the loop after the work already queued.
    func stop() {
        execute { [self] in running = false }
    }

    // MARK: On the reactor's thread only

    func add(_ fd: Int32, events: UInt32, handler: ReactorHandler, urgent isUrgent: Bool = false) throws -> UInt64 {
        let token = nextToken
        nextToken += 1
        let status = cmsso_epoll_control(epoll, 1, fd, events, token)
        guard status == 0 else { throw SystemError("cannot watch a descriptor", errno: -status) }
        handlers[token] = handler
        if isUrgent { urgent.insert(token) }
        return token
    }

    func modify(_ fd: Int32, token: UInt64, events: UInt32) {
        _ = cmsso_epoll_control(epoll, 3, fd, events, token)
    }

    /// Stops watching `fd` (call before closing it).
    func remove(_ fd: Int32, token: UInt64) {
        _ = cmsso_epoll_control(epoll, 2, fd, 0, token)
        handlers[token] = nil
        urgent.remove(token)
    }

    /// Runs `body` on every tick (about every 100 ms).
    func everyTick(_ body: @escaping () -> Void) {
        tickers.append(body)
    }

    /// Busy handlers served between two looks at epoll: what a quiet peer waits behind per look,
    /// rather than a turn of every busy one.
    static let busyPerLook = 8

    /// Each look at epoll serves, in this order: urgent handlers, work handed in, every handler
    /// that is not busy, then the next few busy ones (the rest wait in the backlog, in turn).
    private func run() {
        var events = [cmsso_event](repeating: cmsso_event(), count: 256)
        var nextTick = cmsso_monotonic_ns() + Self.tickNanoseconds
        while running {
            let now = cmsso_monotonic_ns()
            let wait = !backlog.isEmpty || now >= nextTick ? 0 : Int32((nextTick - now) / 1_000_000) + 1
            let count = Int(events.withUnsafeMutableBufferPointer { cmsso_epoll_wait(epoll, $0.baseAddress, 256, wait) })
            if count > 0 {
                if !urgent.isEmpty {
                    for event in events[..<count] where urgent.contains(event.token) { handlers[event.token]?.ready(event.events) }
                }
                if events[..<count].contains(where: { $0.token == 0 }) { runQueued() }
                for event in events[..<count] where event.token != 0 && !urgent.contains(event.token) {
                    guard let handler = handlers[event.token] else { continue } // removed earlier in this round
                    if !handler.busy {
                        handler.ready(event.events)
                    } else if inBacklog.insert(event.token).inserted {
                        backlog.append((event.token, event.events))
                    }
                }
            }
            for (token, events) in backlog.prefix(Self.busyPerLook) {
                inBacklog.remove(token)
                handlers[token]?.ready(events) // epoll reports it again if it still has more
            }
            backlog.removeFirst(min(Self.busyPerLook, backlog.count))
            if cmsso_monotonic_ns() >= nextTick {
                for ticker in tickers { ticker() }
                nextTick = cmsso_monotonic_ns() + Self.tickNanoseconds
            }
        }
        runQueued()
    }

    private func runQueued() {
        cmsso_eventfd_drain(wakeup)
        let work = queued.withLock { queue in
            defer { queue.removeAll(keepingCapacity: true) }
            return queue
        }
        for item in work { item() }
    }
}

/// A failed system call, said in words.
struct SystemError: Error, CustomStringConvertible {
    let description: String
    init(_ what: String, errno code: Int32) {
        description = "\(what): \(String(cString: strerror(code)))"
    }
}
