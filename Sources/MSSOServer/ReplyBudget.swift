/// Bytes of replies the daemon has written that their peers have not read yet, beyond what the
/// kernel's socket buffers took: one connection's (``OutputQueue``) and all connections' together
/// (``ReplyBudget``). Neither touches a descriptor, so both are unit-tested without a socket.
///
/// Each connection pauses its reading at its own high-water mark; a cap per connection alone let
/// 1,020 connections that pipelined pings and read nothing hold 300 MB for up to 10 minutes. So
/// the budget is also counted across connections: past half of it, a connection holding more
/// than a little stops being read (a client that reads its replies holds nothing and goes on
/// being served); past all of it, the connections holding the most are closed until a quarter
/// of it is free again.
struct ReplyBudget: Sendable {
    /// Bytes held across all connections before the biggest holders are closed.
    let total: Int
    /// Bytes one connection may hold before its reading pauses.
    let perConnection: Int
    /// Bytes one connection may hold before its reading pauses once half the budget is held.
    let underPressure: Int
    /// Bytes held now, across all connections.
    private(set) var held = 0

    init(total: Int, perConnection: Int, underPressure: Int = 16 * 1024) {
        self.total = total
        self.perConnection = perConnection
        self.underPressure = min(underPressure, perConnection)
    }

    mutating func add(_ bytes: Int) { held += bytes }
    mutating func remove(_ bytes: Int) { held -= bytes }

    /// Half the budget is held: connections that hold more than a little stop being read.
    var pressed: Bool { held >= total / 2 }
    /// Over the budget: ``victims(_:)`` says which connections to close.
    var exceeded: Bool { held > total }

    /// Whether a connection holding `bytes` of unread replies may be read further.
    func mayRead(holding bytes: Int) -> Bool {
        bytes < (pressed ? underPressure : perConnection)
    }

    /// The holders to close, most bytes first, until at most three quarters of the budget is
    /// held (none when within it): closing a little more than the excess keeps this rare.
    func victims<Holder>(_ holders: [(holder: Holder, bytes: Int)]) -> [Holder] {
        guard exceeded else { return [] }
        var freed = 0
        var chosen: [Holder] = []
        for candidate in holders.sorted(by: { $0.bytes > $1.bytes }) where held - freed > total / 4 * 3 {
            guard candidate.bytes > 0 else { break }
            freed += candidate.bytes
            chosen.append(candidate.holder)
        }
        return chosen
    }
}

/// One connection's bytes waiting to be written: what the kernel's buffer did not take.
struct OutputQueue: Sendable {
    private var bytes: [UInt8] = []
    private var sent = 0

    /// Bytes waiting.
    var pending: Int { bytes.count - sent }

    /// Queues what is left of `frame` after its first `written` bytes went out (the whole frame
    /// when something was already waiting). Returns the bytes added.
    mutating func enqueue(_ frame: [UInt8], after written: Int = 0) -> Int {
        if pending == 0 {
            bytes = Array(frame[written...])
            sent = 0
        } else {
            bytes.append(contentsOf: frame[written...])
        }
        return frame.count - written
    }

    /// Hands the waiting bytes to `write` until it takes none (`-EAGAIN`, or any negative: an
    /// error). Returns the bytes written and whether `write` failed other than with `again`.
    mutating func drain(again: Int, _ write: (UnsafeRawBufferPointer) -> Int) -> (written: Int, failed: Bool) {
        var total = 0
        while pending > 0 {
            let count = bytes.withUnsafeBytes { write(UnsafeRawBufferPointer(rebasing: $0[sent...])) }
            if count == again { break }
            guard count > 0 else { return (total, true) }
            sent += count
            total += count
        }
        if pending == 0 { clear() }
        return (total, false)
    }

    /// Forgets everything waiting (and its memory).
    mutating func clear() {
        bytes = []
        sent = 0
    }
}

/// Bytes of calls running on the broker (their frames: a call holds about that while it waits
/// for an identity provider, a refresh, or the user's answer to a confirmation), across all
/// connections. A call that would pass the budget is answered `Busy` at once: each connection's
/// cap on calls in flight, times the connections, times the frame cap, came to gigabytes.
struct CallBudget: Sendable {
    let total: Int
    private(set) var held = 0

    /// What a call counts at the least, whatever its frame: its task and its answer while it waits
    /// (found by an outside test: pipelined `status` calls of 60 bytes, counted by their frames,
    /// grew mssod to 518 MB).
    static let leastPerCall = 16 * 1024

    init(total: Int) { self.total = total }

    /// What a call whose frame is `bytes` long counts.
    static func charge(_ bytes: Int) -> Int { max(bytes, leastPerCall) }

    /// Takes `bytes` for a call, or says no (nothing taken).
    mutating func take(_ bytes: Int) -> Bool {
        guard held + bytes <= total else { return false }
        held += bytes
        return true
    }

    mutating func release(_ bytes: Int) { held -= bytes }
}
