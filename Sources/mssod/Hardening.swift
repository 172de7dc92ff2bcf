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

    /// Read by libcurl and the libraries under it (GnuTLS for TLS, OpenSSL for libssh2, p11-kit):
    /// every TLS secret to a file (SSLKEYLOGFILE, GNUTLS_KEYLOGFILE) or to stderr
    /// (GNUTLS_DEBUG_LEVEL logs each connection's keys), the ciphers and versions allowed, a
    /// configuration that can load code, trust anchors. None may reach the TLS of a request that
    /// carries a refresh token, a password or a client secret: mssod starts again without them,
    /// every variable of those libraries' prefixes (gone for a browser it opens too).
    static let tlsVariables = ["SSLKEYLOGFILE", "SSL_CERT_FILE", "SSL_CERT_DIR"]
    static let tlsPrefixes = ["GNUTLS_", "OPENSSL_", "P11_KIT_", "CURL_"]

    /// The TLS libraries' variables set in this process's environment.
    static func tlsVariablesSet() -> [String] {
        var names: [String] = []
        var entry = environ
        while let pointer = entry.pointee {
            let name = String(decoding: UnsafeBufferPointer(start: pointer, count: strcspn(pointer, "=")).map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if tlsVariables.contains(name) || tlsPrefixes.contains(where: name.hasPrefix) { names.append(name) }
            entry += 1
        }
        return names
    }

    static func apply() {
        // The Swift runtime's crash backtracer prints registers and stack bytes to stderr, which
        // could carry token bytes into the journal, and its settings can name a program to run.
        // It reads them at start, so re-exec once with exactly "off", whatever was set.
        // And without the TLS libraries' variables (`tlsVariables`): GnuTLS initialises itself as
        // it is loaded, before main.
        let tls = Self.tlsVariablesSet()
        if !tls.isEmpty || getenv("SWIFT_BACKTRACE").map({ String(cString: $0) }) != "enable=no" {
            for name in tls { unsetenv(name) }
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
        // Each connection holds two descriptors (socket and pidfd): use all we are allowed, not
        // the 1024 soft limit systemd gives user services by default.
        var files = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &files) == 0, files.rlim_cur < files.rlim_max {
            files.rlim_cur = files.rlim_max
            setrlimit(Int32(RLIMIT_NOFILE.rawValue), &files)
        }
    }
}
