import CMSSOSystem
import Glibc

/// Process-level protections for a daemon that holds credentials in memory (as ssh-agent does).
enum Hardening {
    /// Executed as /proc/self/exe (``apply()``), the process is named "exe" (ps, top, pgrep -x
    /// mssod): give it the name an ordinary exec of its command would have. On the main thread,
    /// before any other starts, so that every thread inherits it.
    static func name() {
        let command = CommandLine.arguments.first.flatMap { $0.split(separator: "/").last }.map(String.init) ?? ""
        _ = cmsso_set_name(command.isEmpty ? "mssod" : command)
    }

    static func apply() {
        // The Swift runtime's crash backtracer prints registers and stack bytes to stderr, which
        // could carry token bytes into the journal, and its settings can name a program to run.
        // It reads them at start, so re-exec once with exactly "off", whatever was set. (The TLS
        // libraries' variables, SSLKEYLOGFILE and GNUTLS_DEBUG_LEVEL among them, never reach an
        // IdP's TLS: mssod loads no TLS library, and mssod-idp starts with an empty environment.)
        if getenv("SWIFT_BACKTRACE").map({ String(cString: $0) }) != "enable=no" {
            setenv("SWIFT_BACKTRACE", "enable=no", 1)
            execv("/proc/self/exe", CommandLine.unsafeArgv)
            unsetenv("SWIFT_BACKTRACE") // exec failed: carry on rather than refuse to start
        }
        // Files we create (the socket above all) are the user's alone.
        umask(0o077)
        // No core dumps: a dump would carry tokens to disk.
        var none = rlimit(rlim_cur: 0, rlim_max: 0)
        setrlimit(Int32(RLIMIT_CORE.rawValue), &none)
        // Not dumpable: also stops other same-uid processes from ptrace-attaching.
        _ = cmsso_set_not_dumpable()
        // Each connection holds up to four descriptors (its socket, and its process's pidfd, /proc
        // directory and address space): use all we are allowed, not the 1024 soft limit systemd
        // gives user services by default.
        var files = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &files) == 0, files.rlim_cur < files.rlim_max {
            files.rlim_cur = files.rlim_max
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)
        }
    }
}
