extension Methods {
    /// Makes a socket through which a remote host reaches the broker for the length of an SSH
    /// session (`msso ssh`): every call that arrives on it is judged as that host, within its
    /// `[forward."HOST"]` table, never as the local process that carries it. The socket lives
    /// while the connection that asked for it stays open. The user's own tools only.
    public enum Forward: BrokerMethod {
        public struct Arguments: Codable, Sendable, Equatable {
            /// The host as the user names it to ssh (an alias of `~/.ssh/config` included),
            /// without a user name; compared without case.
            public var host: String
            public init(host: String) { self.host = host }
        }
        public struct Result: Codable, Sendable, Equatable {
            /// The path of the socket made for the host (to give `ssh -R` as its local end).
            public var socket: String
            public init(socket: String) { self.socket = socket }
        }
    }
}

/// Host names as `[forward."HOST"]` tables and the `forward` method take them.
public enum ForwardHost {
    /// The longest host name taken (a DNS name is at most 253 bytes).
    public static let maximumLength = 253

    /// `name` in the form tables are looked up by (lowercase), or nil when it is not a host name:
    /// letters, digits, `.`, `-`, `_` and `:` (an IPv6 address), 1 to 253 bytes. Nothing else
    /// reaches a file name, a notification or an audit row.
    public static func normalized(_ name: String) -> String? {
        guard !name.isEmpty, name.utf8.count <= maximumLength,
              name.utf8.allSatisfy({ byte in
                  (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte)
                      || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ":")
              }), name.first != "-" else { return nil }
        return name.lowercased()
    }
}
