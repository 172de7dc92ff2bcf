import CMSSOSystem
import Glibc

/// mssod's one pool of threads for blocking work, beside the reactor and the broker actor:
/// identifying a new process, re-reading the registrations, the keyring's calls, the audit log's
/// writes, the notifier's bus calls and main loop, a request to an identity provider, a browser
/// login's listener, signals, and the timers that bound them.
///
/// A job never waits for another to end: an idle thread takes it, or a new thread is started.
/// That is the difference from Dispatch's pool on Linux, which runs about one thread per CPU and
/// adds one only after it notices a blocked one, so one caller whose FUSE root stalls would hold
/// everyone's next job for that long. Each kind of job keeps its own cap (8 identifications, 16
/// requests to identity providers, ...), so the threads stay few; a finished thread waits for the
/// next job, up to ``idleKept`` of them (a thread's start costs more than most jobs).
/// Work that must run in order, one job at a time (the keyring's calls, the audit log's writes,
/// the notifier's state), goes through a ``Lane``.
public final class Workers: @unchecked Sendable {
    public static let shared = Workers()

    /// Threads that wait for work when there is none.
    static let idleKept = 4
    /// Threads at most: past the sum of every kind's cap, so reached only if one leaks.
    static let maximumThreads = 96

    private let condition = Condition()
    // Guarded by `condition`:
    private var jobs: [() -> Void] = []
    private var idle = 0
    private var threads = 0
    private let timersChanged = Condition()
    // Guarded by `timersChanged`:
    private var timers: [Timer] = []
    private var firing: Timer?
    /// What the timers' thread waits on (``Timer``'s three clocks); nil when it could not be had.
    private let waiter: cmsso_clock_waiter?
    /// Whether the timers' thread runs: a thread of its own, started with the pool and outside its
    /// ceiling, so that a timeout fires when every other thread is taken (that is what it bounds).
    private var timerThread = false

    init() {
        var waiter = cmsso_clock_waiter()
        self.waiter = cmsso_clock_waiter_open(&waiter) == 0 ? waiter : nil
        if let waiter = self.waiter { timerThread = Self.startThread { self.serveTimers(waiter) } }
    }

    /// Threads of the pool now, and of those idle (tests).
    public var counts: (threads: Int, idle: Int) { condition.locked { (threads, idle) } }

    /// Timers waiting to fire (tests).
    var timerCount: Int { timersChanged.locked { timers.count } }

    /// Runs `job` on a thread of the pool, now. False when no thread could be had (the system
    /// is out of threads, or the pool is at its ceiling): nothing runs, the caller says so.
    @discardableResult
    public func run(_ job: @escaping () -> Void) -> Bool {
        let start = condition.locked { () -> Bool? in
            if idle > jobs.count {
                jobs.append(job)
                condition.signal()
                return false
            }
            guard threads < Self.maximumThreads else { return nil }
            threads += 1
            return true
        }
        guard let start else { return false }
        guard start else { return true }
        if Self.startThread({ self.serve(first: job) }) { return true }
        condition.locked { threads -= 1 }
        return false
    }

    private func serve(first: @escaping () -> Void) {
        var job = first
        while true {
            job()
            let next = condition.locked { () -> (() -> Void)? in
                if jobs.isEmpty {
                    guard idle < Self.idleKept else { return nil }
                    idle += 1
                    while jobs.isEmpty { condition.wait() }
                    idle -= 1
                }
                return jobs.removeFirst()
            }
            guard let next else { break }
            job = next
        }
        condition.locked { threads -= 1 }
    }

    /// A new detached thread running `body` (without Foundation's `Thread`); false when the
    /// system would make none.
    private static func startThread(_ body: @escaping () -> Void) -> Bool {
        final class Body {
            let run: () -> Void
            init(_ run: @escaping () -> Void) { self.run = run }
        }
        let box = Unmanaged.passRetained(Body(body)).toOpaque()
        var thread = pthread_t()
        let status = pthread_create(&thread, nil, { argument in
            Unmanaged<Body>.fromOpaque(argument!).takeRetainedValue().run()
            return nil
        }, box)
        guard status == 0 else {
            Unmanaged<Body>.fromOpaque(box).release()
            return false
        }
        pthread_detach(thread)
        return true
    }

    // MARK: Timers

    /// A job to run at a time, unless cancelled first: when the first of its deadlines comes, each
    /// on its own clock (nanoseconds; `UInt64.max` for none on that clock).
    public final class Timer: @unchecked Sendable {
        /// CLOCK_MONOTONIC: the pool's timeouts, which a jump of the wall clock must not move.
        fileprivate let monotonic: UInt64
        /// CLOCK_BOOTTIME: elapsed time that counts a suspend (a session window's length).
        fileprivate let elapsed: UInt64
        /// CLOCK_REALTIME, the wall clock (a session window's stored end).
        fileprivate let wall: UInt64
        fileprivate let job: () -> Void
        fileprivate init(monotonic: UInt64 = .max, elapsed: UInt64 = .max, wall: UInt64 = .max, job: @escaping () -> Void) {
            (self.monotonic, self.elapsed, self.wall, self.job) = (monotonic, elapsed, wall, job)
        }

        fileprivate func due(_ now: (monotonic: UInt64, elapsed: UInt64, wall: UInt64)) -> Bool {
            now.monotonic >= monotonic || now.elapsed >= elapsed || now.wall >= wall
        }
    }

    /// Runs `job` after `seconds` (0 to about 30 years) on the timers' thread; keep it short: cancel
    /// something, hand work to a lane (a job that waited would hold every other timer). Nil when
    /// the timers have no thread (none could be started with the pool).
    @discardableResult
    public func after(_ seconds: Double, _ job: @escaping () -> Void) -> Timer? {
        let delay = seconds.isNaN ? 0 : min(max(seconds, 0), 1e9)
        return add(Timer(monotonic: cmsso_monotonic_ns() + UInt64(delay * 1e9), job: job))
    }

    /// Runs `job` on the timers' thread when the wall clock reads `wall` (seconds since 1970) or the
    /// boot clock (CLOCK_BOOTTIME, which counts a suspend) reads `elapsed` (seconds), whichever
    /// comes first, within milliseconds whatever the wall clock does meanwhile: a jump past `wall`
    /// fires it, as does a resume from a suspend past either. Otherwise as ``after(_:_:)``.
    @discardableResult
    public func at(wall: Double, elapsed: Double, _ job: @escaping () -> Void) -> Timer? {
        add(Timer(elapsed: Self.nanoseconds(elapsed), wall: Self.nanoseconds(wall), job: job))
    }

    /// Seconds as a clock's nanoseconds: 0 for what cannot be a time, none past about 280 years.
    private static func nanoseconds(_ seconds: Double) -> UInt64 {
        guard !seconds.isNaN, seconds > 0 else { return 0 }
        return seconds < 9e9 ? UInt64(seconds * 1e9) : .max
    }

    private func add(_ timer: Timer) -> Timer? {
        timersChanged.locked { () -> Timer? in
            guard timerThread, let waiter else { return nil }
            timers.append(timer)
            withUnsafePointer(to: waiter) { cmsso_clock_waiter_wake($0) }
            return timer
        }
    }

    /// Cancels `timer`. When this returns its job has run or never will (it may be running now,
    /// on the timer thread: this waits for its end), so what the job touches may be released.
    public func cancel(_ timer: Timer) {
        timersChanged.locked {
            timers.removeAll { $0 === timer }
            while firing === timer { timersChanged.wait() }
        }
    }

    /// The timers' thread, for the pool's life: it fires what is due, then waits on every clock
    /// for the next deadline, a change of the timers, or a set of the wall clock.
    private func serveTimers(_ waiter: cmsso_clock_waiter) {
        timersChanged.locked {
            while true {
                let now = (monotonic: cmsso_monotonic_ns(), elapsed: cmsso_boottime_ns(), wall: cmsso_realtime_ns())
                if let next = timers.lazy.filter({ $0.due(now) }).min(by: { $0.monotonic < $1.monotonic }) {
                    timers.removeAll { $0 === next }
                    firing = next
                    timersChanged.unlocked(next.job)
                    firing = nil
                    timersChanged.broadcast()
                    continue
                }
                let (monotonic, elapsed, wall) = timers.reduce((UInt64.max, UInt64.max, UInt64.max)) {
                    (min($0.0, $1.monotonic), min($0.1, $1.elapsed), min($0.2, $1.wall))
                }
                timersChanged.unlocked {
                    if withUnsafePointer(to: waiter, { cmsso_clock_waiter_wait($0, monotonic, elapsed, wall) }) != 0 {
                        usleep(1000) // a timer the kernel would not arm (out of memory): look again shortly
                    }
                }
            }
        }
    }

    // MARK: Lanes

    /// Jobs run one at a time, in the order given, each on whichever pool thread is free: for a
    /// C library that wants its calls one at a time, or state only its jobs touch.
    public final class Lane: @unchecked Sendable {
        private let workers: Workers
        private let condition = Condition()
        private var jobs: [() -> Void] = []
        private var draining = false
        /// The thread running the lane's jobs now.
        private var drainer: pthread_t?

        public init(on workers: Workers = .shared) {
            self.workers = workers
        }

        /// Runs `job` after the lane's earlier jobs.
        public func async(_ job: @escaping () -> Void) {
            let start = condition.locked { () -> Bool in
                jobs.append(job)
                defer { draining = true }
                return !draining
            }
            if start { startDraining() }
        }

        private func startDraining() {
            if workers.run({ self.drain() }) { return }
            // No thread to be had now: tried again shortly, from the timers' thread, which never
            // runs the jobs itself (it would hold every timeout meanwhile); without even that
            // thread, the caller's own runs them rather than lose them (a keyring call's caller
            // would wait for ever).
            if workers.after(0.05, { self.startDraining() }) == nil { drain() }
        }

        /// Runs `job` after the lane's earlier jobs, and waits for it. From one of the lane's own
        /// jobs (an object whose deinit flushes, released by a job), it runs at once.
        public func sync<T, E: Error>(_ job: @escaping () throws(E) -> T) throws(E) -> T {
            if condition.locked({ drainer.map { pthread_equal($0, pthread_self()) != 0 } ?? false }) { return try job() }
            let done = Condition()
            var result: Result<T, E>?
            // Dropped before the caller goes on: what `job` holds (an object that flushes from
            // its deinit) must not outlive the call on the lane's thread.
            var job: (() throws(E) -> T)? = job
            async {
                let outcome: Result<T, E>
                do throws(E) { outcome = .success(try job!()) } catch { outcome = .failure(error) }
                job = nil
                done.locked {
                    result = outcome
                    done.signal()
                }
            }
            return try done.locked { () -> Result<T, E> in
                while result == nil { done.wait() }
                return result!
            }.get()
        }

        /// Runs `job` on the lane after `seconds`.
        public func after(_ seconds: Double, _ job: @escaping () -> Void) {
            if workers.after(seconds, { self.async(job) }) == nil { async(job) }
        }

        private func drain() {
            while let job = condition.locked({ () -> (() -> Void)? in
                if jobs.isEmpty {
                    draining = false
                    drainer = nil
                    return nil
                }
                drainer = pthread_self()
                return jobs.removeFirst()
            }) {
                job()
            }
        }
    }
}

/// A mutex and its condition variable, on the monotonic clock.
final class Condition: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let variable = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(variable, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(variable)
        pthread_mutex_destroy(mutex)
        variable.deallocate()
        mutex.deallocate()
    }

    func locked<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// Runs `body` with the lock let go (inside ``locked(_:)``).
    func unlocked(_ body: () -> Void) {
        pthread_mutex_unlock(mutex)
        defer { pthread_mutex_lock(mutex) }
        body()
    }

    /// Inside ``locked(_:)``: lets go of the lock until signalled (or woken for nothing: check again).
    func wait() { pthread_cond_wait(variable, mutex) }

    func signal() { pthread_cond_signal(variable) }
    func broadcast() { pthread_cond_broadcast(variable) }
}
