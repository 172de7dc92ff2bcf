/// A method of the broker: its wire name and the shape of its arguments and result.
///
/// This table is the single definition used by the daemon's dispatch, the client library and the
/// CLI; docs/PROTOCOL.md documents it for clients in other languages.
public protocol BrokerMethod: Sendable {
    associatedtype Arguments: Codable & Sendable
    associatedtype Result: Codable & Sendable
    static var name: String { get }
    /// The call frame written by hand (see ``QuickCodable``), or nil for `JSONEncoder`.
    static func quickCall(serial: UInt32, _ arguments: Arguments) -> [UInt8]?
    /// The result read from plain JSON by hand (see ``QuickDecodable``), or nil for `JSONDecoder`.
    static func quickResult(_ value: JSONValue) -> Result?
}

extension BrokerMethod {
    public static func quickCall(serial: UInt32, _ arguments: Arguments) -> [UInt8]? { nil }
    public static func quickResult(_ value: JSONValue) -> Result? { nil }
}

extension BrokerMethod where Arguments: QuickCodable {
    public static func quickCall(serial: UInt32, _ arguments: Arguments) -> [UInt8]? {
        Arguments.quickArguments(arguments).map { ReplyWriter.call(serial: serial, method: name, arguments: $0) }
    }
}

extension BrokerMethod where Result: QuickDecodable {
    public static func quickResult(_ value: JSONValue) -> Result? { Result(quick: value) }
}

/// For methods that take or return nothing: encodes as `{}`.
public struct Empty: Codable, Sendable, Equatable {
    public init() {}
}

/// Names one group, or lets the daemon pick the only configured one.
public struct GroupArguments: Codable, Sendable, Equatable {
    public var group: String?
    public init(group: String? = nil) { self.group = group }
}

public enum Methods {
    /// The first call on every connection: agrees on the protocol version.
    public enum Hello: BrokerMethod {
        public static let name = "hello"
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
        public static let name = "ping"
        public typealias Arguments = PingData
        public typealias Result = PingData
    }

    /// Starts a session with the group's identity provider.
    public enum Login: BrokerMethod {
        public static let name = "login"
        public typealias Arguments = LoginArguments
        public typealias Result = SessionStatus
    }

    /// Slides the session window to now + timeout (never past the absolute cap).
    public enum Extend: BrokerMethod {
        public static let name = "extend"
        public typealias Arguments = GroupArguments
        public typealias Result = SessionStatus
    }

    /// Ends a group's session (or every group's with `all`).
    public enum Logout: BrokerMethod {
        public static let name = "logout"
        public struct Arguments: Codable, Sendable, Equatable {
            public var group: String?
            public var all: Bool?
            public init(group: String? = nil, all: Bool = false) {
                self.group = group
                self.all = all ? true : nil
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            /// The groups whose session this call ended (empty when nothing was logged in).
            public var loggedOut: [String]
            public init(loggedOut: [String]) { self.loggedOut = loggedOut }
        }
    }

    /// Describes every configured group's session, or one group's.
    public enum Status: BrokerMethod {
        public static let name = "status"
        public typealias Arguments = GroupArguments
        public struct Result: Codable, Sendable, Equatable {
            public var groups: [SessionStatus]
            /// True while the broker is locked (`lock`); absent otherwise.
            public var locked: Bool?
            /// When the lock took effect.
            public var lockedAt: Double?
            public init(groups: [SessionStatus], locked: Bool? = nil, lockedAt: Double? = nil) {
                self.groups = groups
                self.locked = locked
                self.lockedAt = lockedAt
            }
        }
    }

    /// Answers "is this group's session valid?" for scripts and the PAM module.
    public enum Check: BrokerMethod {
        public static let name = "check"
        public typealias Arguments = GroupArguments
        public typealias Result = SessionStatus
    }

    /// Returns the headers that authenticate an outbound HTTP request.
    public enum Sign: BrokerMethod {
        public static let name = "sign"
        public typealias Arguments = SignRequest
        public typealias Result = SignResponse
    }

    /// The access token itself, for programs that cannot ask the broker to sign each request
    /// (git, kubectl, curl). Only for groups whose tokens are bearer tokens (`bearer`,
    /// `header:NAME`): a DPoP-bound token is useless without the broker's key. Needs a
    /// registration, like `sign`.
    public enum Token: BrokerMethod {
        public static let name = "token"
        public struct Arguments: Codable, Sendable, Equatable {
            public var group: String?
            /// Refresh the token first even if it looks fresh (a server refused it: git's `erase`).
            /// At most once every 10 seconds per group; more often, the current token is returned.
            public var renew: Bool?
            public init(group: String? = nil, renew: Bool = false) {
                self.group = group
                self.renew = renew ? true : nil
            }
        }
        public struct Result: Codable, Sendable, Equatable {
            public var accessToken: String
            /// When the token expires, seconds since the Unix epoch.
            public var expiresAt: Double
            /// How a server wants it: `Bearer` (an `Authorization: Bearer` header), or the header
            /// name of a `header:NAME` profile.
            public var header: String
            public init(accessToken: String, expiresAt: Double, header: String) {
                self.accessToken = accessToken
                self.expiresAt = expiresAt
                self.header = header
            }
        }
    }

    /// Asks for the group signals of some groups (all configured groups when none are named).
    public enum Subscribe: BrokerMethod {
        public static let name = "subscribe"
        public struct Arguments: Codable, Sendable, Equatable {
            public var groups: [String]?
            public init(groups: [String]? = nil) { self.groups = groups }
        }
        public struct Result: Codable, Sendable, Equatable {
            /// The groups this connection now receives signals for.
            public var groups: [String]
            public init(groups: [String]) { self.groups = groups }
        }
    }

    /// The app registrations in force (and the caller as the broker sees it). The user's tools only.
    public enum Apps: BrokerMethod {
        public static let name = "apps"
        public typealias Arguments = Empty
        public struct Result: Codable, Sendable, Equatable {
            public var caller: CallerDescription
            public var registrations: [AppRegistration]
            /// The user's registrations not in force (the admin defines the name, or user apps are off).
            public var ignored: [AppRegistration]
            /// Whether the admin lets the user register apps.
            public var userApps: Bool
            /// Where the user's registrations live.
            public var userDirectory: String
            public init(caller: CallerDescription, registrations: [AppRegistration], ignored: [AppRegistration],
                        userApps: Bool, userDirectory: String) {
                self.caller = caller
                self.registrations = registrations
                self.ignored = ignored
                self.userApps = userApps
                self.userDirectory = userDirectory
            }
        }
    }

    /// Rows of the audit log, oldest first. The user's tools only.
    public enum Audit: BrokerMethod {
        public static let name = "audit"
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

    /// The public half of a group's signing key (made on first use); `rotate` replaces the key.
    public enum Keys: BrokerMethod {
        public static let name = "keys"
        public struct Arguments: Codable, Sendable, Equatable {
            public var group: String?
            public var rotate: Bool?
            public init(group: String? = nil, rotate: Bool = false) {
                self.group = group
                self.rotate = rotate ? true : nil
            }
        }
        public typealias Result = KeyDescription
    }
}
