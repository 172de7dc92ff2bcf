/// Who a calling app is, from facts the kernel vouches for (never from what the app says).
public struct AppIdentity: Sendable, Equatable {
    /// The executable behind the caller's pid (`/proc/PID/exe`), as the daemon's file system
    /// names it.
    public var executable: String?
    /// Whether the caller is on the daemon's host: the same mount namespace and root, the same pid
    /// and user namespaces, and, when a registration names its executable's path, the very file at
    /// that path. Only then does the path mean what a registration by path means: a process in a
    /// mount namespace of its own could have mounted anything at that path; a process of ours can
    /// run a file of another namespace that the kernel still names by one of our paths; and a
    /// process in a pid namespace of its own can be named in the credentials of bytes that another
    /// process of that namespace wrote (docs/SECURITY.md, "Who is calling").
    public var onHost: Bool
    /// The Flatpak app id, from the `/.flatpak-info` of a process that really is in a sandbox made
    /// from the daemon's namespaces (as bubblewrap makes one). Never set for a host process.
    public var flatpak: String?
    /// The systemd unit from the caller's cgroup (`app-….scope`, `….service`): shown in `msso
    /// apps` and the audit log, never used for identity (any process can name its own scope).
    public var unit: String?
    /// The SHA-256 (hex) of the running executable, computed when a pinned registration of its
    /// path needs it.
    public var digest: String?

    public init(executable: String?, onHost: Bool = true, flatpak: String? = nil, unit: String? = nil, digest: String? = nil) {
        self.executable = executable
        self.onHost = onHost
        self.flatpak = flatpak
        self.unit = unit
        self.digest = digest
    }
}
