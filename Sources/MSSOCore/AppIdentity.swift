/// Who a calling app is, from facts the kernel vouches for (never from what the app says).
public struct AppIdentity: Sendable {
    /// The executable behind the caller's pid (`/proc/PID/exe`).
    public var executable: String?
    /// The Flatpak app id, from the sandbox's `.flatpak-info` or the cgroup.
    public var flatpak: String?
    /// The systemd unit from the caller's cgroup (`app-….scope`, `….service`).
    public var unit: String?
    /// The SHA-256 (hex) of the running executable; computed only when a pinned registration
    /// asks, since it reads the whole file.
    public var digest: @Sendable () -> String?

    public init(executable: String?, flatpak: String? = nil, unit: String? = nil, digest: @escaping @Sendable () -> String? = { nil }) {
        self.executable = executable
        self.flatpak = flatpak
        self.unit = unit
        self.digest = digest
    }
}
