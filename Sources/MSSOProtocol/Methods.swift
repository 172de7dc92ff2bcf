/// A method of the broker: its wire name and the shape of its arguments and result.
///
/// `Methods` (here and in `Methods+*.swift`, a file per kind of verb with the values it carries)
/// is the single definition used by the daemon's dispatch, the client library and the CLI;
/// docs/PROTOCOL.md documents it for clients in other languages. Each method's `name` is in
/// WireNames.swift, generated from protocol/names.json with every other language's copy.
public protocol BrokerMethod: Sendable {
    associatedtype Arguments: Codable & Sendable
    associatedtype Result: Codable & Sendable
    static var name: String { get }
}

/// For methods that take or return nothing: encodes as `{}`.
public struct Empty: Codable, Sendable, Equatable {
    public init() {}
}

/// Names one group, or lets the daemon pick the only configured one; and one of its accounts, or
/// lets the daemon pick the group's default account.
public struct GroupArguments: Codable, Sendable, Equatable {
    public var group: String?
    public var account: String?
    public init(group: String? = nil, account: String? = nil) {
        self.group = group
        self.account = account
    }
}

public enum Methods {
    /// The first call on every connection: agrees on the protocol version.
    public enum Hello: BrokerMethod {
        public struct Arguments: Codable, Sendable {
            public var version: Int
            /// A label for logs; never trusted for identity.
            public var client: String?
            public init(version: Int = protocolVersion, client: String? = nil) {
                self.version = version
                self.client = client
            }
        }
        public struct Result: Codable, Sendable {
            public var version: Int
            public var daemon: String
            /// What the kernel says about the caller, as the daemon sees it.
            public var peer: PeerDescription
            public init(version: Int, daemon: String, peer: PeerDescription) {
                self.version = version
                self.daemon = daemon
                self.peer = peer
            }
        }
    }

    /// Echoes its data back. The floor for latency measurements; touches no state.
    public enum Ping: BrokerMethod {
        public typealias Arguments = PingData
        public typealias Result = PingData
    }

    /// Asks for the signals of some groups (when none are named, every group the caller may use).
    public enum Subscribe: BrokerMethod {
        public struct Arguments: Codable, Sendable, Equatable {
            public var groups: [String]?
            /// Only this account's signals (a registration's `account` sets it for its app).
            public var account: String?
            public init(groups: [String]? = nil, account: String? = nil) {
                self.groups = groups
                self.account = account
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            /// The groups this connection now receives signals for.
            public var groups: [String]
            public init(groups: [String]) { self.groups = groups }
        }
    }

    /// Rows of the audit log, oldest first. The user's tools only.
    public enum Audit: BrokerMethod {
        public struct Arguments: Codable, Sendable, Equatable {
            public var group: String?
            /// Only rows at or after this time (Unix seconds).
            public var since: Double?
            /// At most this many rows, the newest (default 1000).
            public var limit: Int?
            public init(group: String? = nil, since: Double? = nil, limit: Int? = nil) {
                self.group = group
                self.since = since
                self.limit = limit
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            public var entries: [AuditEntry]
            public init(entries: [AuditEntry]) { self.entries = entries }
        }
    }
}

/// The caller as the kernel describes it, echoed by `hello` so a client can see what the daemon sees.
public struct PeerDescription: Codable, Sendable, Equatable {
    public var uid: UInt32
    public var pid: Int32
    public var executable: String?
    /// On a socket made for an SSH forward (`forward`): the host the caller is judged as. `uid`
    /// and `pid` are then the local process that carries the forward (ssh), and `executable` is
    /// absent: the caller's identity is the host.
    public var host: String?
    public init(uid: UInt32, pid: Int32, executable: String?, host: String? = nil) {
        self.uid = uid
        self.pid = pid
        self.executable = executable
        self.host = host
    }
}

/// Payload of `ping`.
public struct PingData: Codable, Sendable, Equatable {
    public var data: String
    public init(data: String) { self.data = data }
}
