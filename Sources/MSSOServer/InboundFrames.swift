import MSSOProtocol

/// The reading half of a ``Connection`` without its descriptor: bytes read that do not yet make a
/// whole frame, who wrote them, how much to read next, and the frames each read completes. Plain
/// values in and out, so every prefix of a stream, every interleaving of two writers and every
/// cap is unit-tested in milliseconds (`InboundFramesTests`), as NIO's `EmbeddedChannel` does
/// for its handlers. The large-frame slots are the server's; the connection claims one when
/// ``needsLargeFrameSlot`` says so.
struct InboundFrames {
    /// Bytes of unfinished frames a connection may hold without a large-frame slot.
    static let smallFrameRoom = 4096
    /// Bytes read from a connection per round of the reactor: the unit of fairness. A peer that
    /// pipelines thousands of calls gets about ten answered per round, as does every other
    /// connection; the rest wait in the kernel's buffer, where epoll reports them again.
    static let fairShare = 512

    /// Who wrote some bytes (`process`: see ``Sender/process``; the pid alone could be another
    /// process's by now).
    typealias Writer = (pid: Int32, uid: UInt32, process: UInt64)

    /// A frame as read: a call, or what was wrong with it (and the serial to answer, 0 if none).
    enum Decoded {
        case call(IncomingCall)
        case malformed(UInt32, BrokerError)
    }

    /// What a read brought: the frames it completed, or a header announcing more than the cap
    /// (the stream cannot be trusted any further).
    enum Outcome {
        case frames([Decoded])
        case tooLarge(announced: Int)
    }

    private(set) var bytes: [UInt8] = []
    /// Who wrote the bytes of the partial frame, and whether more than one process did.
    private var writer: Writer?
    private var mixed = false
    /// When the unfinished frame began (0: none), for the frame timeout.
    private(set) var frameStarted: UInt64 = 0

    var count: Int { bytes.count }

    /// The whole length of the frame begun (0 before its header is in): a large frame, once it
    /// has a slot, is read in as few reads as it takes.
    var expectedFrameLength: Int {
        guard bytes.count >= Framing.headerSize else { return 0 }
        return Int(bytes[0]) << 24 | Int(bytes[1]) << 16 | Int(bytes[2]) << 8 | Int(bytes[3])
    }

    /// How many bytes the next read may take (0: none until a large-frame slot comes). Without a
    /// slot, no more than fits in the small room: bytes already read would be held whether or
    /// not a slot comes, so the cap on large frames must bound the read itself.
    func room(holdsLargeFrame: Bool, scratch: Int) -> Int {
        min(holdsLargeFrame ? scratch : Self.smallFrameRoom - bytes.count,
            max(Self.fairShare, Framing.headerSize + expectedFrameLength - bytes.count))
    }

    /// An unfinished frame fills the small room: it needs a large-frame slot to be read further.
    var needsLargeFrameSlot: Bool { bytes.count >= Self.smallFrameRoom }

    /// Takes what `writer` wrote (one read) and returns the frames it completes. A frame whose
    /// bytes came from more than one process is answered `Forbidden`: nobody can be held to it.
    mutating func take(_ read: ArraySlice<UInt8>, from writer: Writer, now: () -> UInt64) -> Outcome {
        if !bytes.isEmpty, let previous = self.writer, previous != writer { mixed = true }
        if bytes.isEmpty { mixed = false }
        bytes.append(contentsOf: read)
        self.writer = writer

        var calls: [Decoded] = []
        var start = 0
        parsing: while true {
            let parse = bytes.withUnsafeBytes { Framing.parse(UnsafeRawBufferPointer(rebasing: $0[start...])) }
            switch parse {
            case .incomplete:
                break parsing
            case .tooLarge(let announced):
                return .tooLarge(announced: announced)
            case .frame(let payload):
                defer { start += payload.upperBound }
                if mixed {
                    mixed = false
                    calls.append(.malformed(0, BrokerError(.forbidden, "a call was written by more than one process; each process must write its calls whole")))
                    continue
                }
                calls.append(Self.decode(bytes[(start + payload.lowerBound)..<(start + payload.upperBound)]))
            }
        }
        bytes.removeFirst(start)
        if bytes.isEmpty {
            self.writer = nil
            frameStarted = 0
            if bytes.capacity > Self.smallFrameRoom { bytes = [] }
        } else if frameStarted == 0 || start > 0 {
            frameStarted = now()
        }
        return .frames(calls)
    }

    /// Gives back the memory a large frame took, once what is left fits in the small room.
    mutating func compact() {
        if bytes.capacity > 2 * Self.smallFrameRoom { bytes = Array(bytes) }
    }

    /// Forgets everything (the connection closed).
    mutating func clear() {
        bytes = []
        writer = nil
        mixed = false
        frameStarted = 0
    }

    static func decode(_ payload: ArraySlice<UInt8>) -> Decoded {
        let read = payload.withUnsafeBytes { bytes in Result { () throws(BrokerError) in try IncomingCall.read(bytes) } }
        switch read {
        case .success(let call): return .call(call)
        case .failure(let error): return .malformed(0, error)
        }
    }
}
