import Glibc

/// Where the broker listens: `$MSSO_SOCKET`, else `$XDG_RUNTIME_DIR/msso/broker.sock`, else (no
/// runtime directory in the environment, e.g. a cron job) `/run/user/UID/msso/broker.sock`.
public enum SocketPath {
    public static func resolve(environment: [String: String]) -> String {
        if let explicit = environment["MSSO_SOCKET"], !explicit.isEmpty { return explicit }
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty { return runtime + "/msso/broker.sock" }
        return "/run/user/\(getuid())/msso/broker.sock"
    }
}
