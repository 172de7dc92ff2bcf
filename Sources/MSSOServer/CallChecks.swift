import MSSOCore
import MSSOProtocol

/// The checks every call on one connection passes before anyone is identified, and `hello`'s
/// own: a value without a socket, its process probes given (``Probes``), so each rule is
/// unit-tested alone (``Connection`` does the I/O and asks this).
///
/// - A call is `{"type": "call", "serial", "method", "args"}`, its serial from 1.
/// - Only the process that opened the connection may call on it (the kernel names each read's
///   sender): a forked child, or a program given the socket, connects itself.
/// - That process has not exec'd since the accept (its address space then is still in use), nor
///   run another program since it last wrote (its executable file then is the one it runs).
/// - `hello` comes first, once, and alone: nothing may follow it until its answer has come.
///   Bytes already there were written before mssod answered, so perhaps before it accepted the
///   connection, by a program the process ran before an exec (docs/SECURITY.md).
struct CallChecks {
    /// The process that opened the connection (`SO_PEERCRED`).
    let connectedPid: Int32
    private(set) var greeted = false
    /// The program the connection's process ran when the daemon last read from it, or when it
    /// accepted the connection (nil: not known yet; .some(nil): no executable to read).
    private var program: ProcessFacts.FileIdentity?? = nil

    init(connectedPid: Int32, running: ProcessFacts.FileIdentity? = nil) {
        self.connectedPid = connectedPid
        if let running { program = .some(running) }
    }

    /// What the kernel says about the connection's process now.
    protocol Probes {
        /// Whether it runs in the address space it had at accept (nil: not known, as for a
        /// process that is not dumpable, or a forward's).
        func sameImage() -> Bool?
        /// Whether it has ended.
        func ended() -> Bool
    }

    enum Verdict {
        /// Refused: answer this, go on with the next call.
        case refuse(UInt32, BrokerError)
        /// A method this protocol does not have (refused, and audited, by the dispatcher).
        case unknown(UInt32, String)
        /// `ping`: the floor, echoed at once, touching no state, needing nobody's identity.
        case echo(UInt32, PingData)
        /// Goes on: its sender is identified, then the gate decides. (Its size: its frame's bytes.)
        case call(UInt32, String, CallArguments, size: Int)
    }

    static let senderGone = BrokerError(.forbidden, "the process that sent this call is gone (it exited, or its pid is now another process's), so it cannot be served")
    static let unreadable = BrokerError(.forbidden, "this process's executable can no longer be read (its main thread has ended, or the process is ending), so it cannot be identified; call from a process whose main thread runs")
    static let execdSince = BrokerError(.forbidden, "this process exec'd since it opened this connection or last wrote on it (it runs another program, or ran one meanwhile), so this call may have been written by that program; open a new connection")

    /// The checks of one decoded call from `senderPid` (the kernel's, from the read).
    func check(_ decoded: InboundFrames.Decoded, senderPid: Int32, probes: some Probes) -> Verdict {
        let call: IncomingCall
        switch decoded {
        case .malformed(let serial, let error): return .refuse(serial, error)
        case .call(let incoming): call = incoming
        }
        guard call.type == .call, let serial = call.serial, let method = call.method else {
            return .refuse(call.serial ?? 0, BrokerError(.badRequest, "expected a call: {\"type\": \"call\", \"serial\", \"method\", \"args\"}"))
        }
        guard serial != 0 else {
            return .refuse(0, BrokerError(.badRequest, "serials run from 1 to 4294967295; 0 means \"no call\""))
        }
        guard isConnections(senderPid) else {
            return .refuse(serial, BrokerError(.forbidden, "only the process that opened a connection may call on it (this one was opened by pid \(connectedPid); the call came from pid \(senderPid)); open a connection of your own: a forked child, or a program given the socket, connects itself"))
        }
        guard probes.sameImage() != false else {
            return .refuse(serial, probes.ended() ? Self.senderGone : Self.execdSince)
        }
        guard greeted || method == Methods.Hello.name else {
            return .refuse(serial, BrokerError(.badRequest, "the first call must be hello"))
        }
        guard CallArguments.Kind(rawValue: method) != nil else { return .unknown(serial, method) }
        switch call.arguments {
        case .failure(let error): return .refuse(serial, error)
        case .success(.ping(let data)): return .echo(serial, data)
        case .success(let arguments): return .call(serial, method, arguments, size: call.size)
        }
    }

    /// Whether `pid` (the kernel's, from a read) is the process that opened the connection.
    func isConnections(_ pid: Int32) -> Bool { pid == connectedPid && connectedPid > 0 }

    /// Refuses a call from the connection's process when it ran another program when it last
    /// wrote here (`running`: the executable it runs now): it exec'd since, and the kernel names
    /// the sender of bytes by its process, not by the program that wrote them, so this call may
    /// have been written before the exec by the program it replaced. The connection stays
    /// refused to it; a program that wants the broker after an exec opens a connection of its own.
    mutating func sameProgram(running executable: ProcessFacts.FileIdentity?) -> BrokerError? {
        guard let previous = program else {
            program = .some(executable)
            return nil
        }
        // The same file, by device and inode (a file changed in place is the identity's
        // business: a pin, or a path that no longer names it).
        guard previous?.device == executable?.device && previous?.inode == executable?.inode else {
            // No executable to read now, where there was one: not an exec, but a process whose
            // main thread has ended (another thread calls) or that is ending.
            return executable == nil && previous != nil ? Self.unreadable : Self.execdSince
        }
        return nil
    }

    enum Greeting: Equatable {
        case greeted
        /// Refused; the connection stays.
        case refused(BrokerError)
        /// Refused; the connection closes once the answer is written.
        case refusedClosing(BrokerError)
    }

    /// `hello`: the first call, once, alone (`nothingBehind`: no byte read or unread after it).
    mutating func greet(_ hello: Methods.Hello.Arguments, nothingBehind: Bool) -> Greeting {
        guard !greeted else { return .refused(BrokerError(.badRequest, "hello may be sent only once, first")) }
        guard nothingBehind else {
            return .refusedClosing(BrokerError(.badRequest, "something was sent after hello before its answer came; a client waits for hello's answer before it sends anything else (what is sent with hello may have been written by a program this process ran before an exec), so this connection is closed: connect again, and wait for the answer"))
        }
        guard hello.version == protocolVersion else {
            return .refused(BrokerError(.unsupportedVersion, "this mssod speaks protocol version \(protocolVersion), not \(hello.version); update the client or the daemon"))
        }
        greeted = true
        return .greeted
    }
}
