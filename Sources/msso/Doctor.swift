import ArgumentParser
import FoundationEssentials
import Glibc
import MSSOClient

struct Doctor: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "doctor",
        abstract: "Check that msso works here, in the order a user would, and say how to fix what does not.",
        discussion: """
            Checks: mssod answers; the Secret Service is there and unlocked; the configuration \
            parses (read again now by mssod); each group's identity provider answers discovery \
            (with the time it took); whether msso is registered for the groups (sign, token and \
            exec need it) and what that gives away; msso is not locked; mssod writes its audit \
            log; a PAM service uses \
            pam_msso.so; the systemd user units are installed and enabled. Registration, PAM and \
            the units are optional setup: they are warnings (!), which do not change the exit \
            status. Registering a tool (msso, git-credential-msso) lets any program of yours run \
            it and get the group's token or signatures, within the group's `resources`: set those \
            first (and `confirm = true` on the registration).

            Exit status: 0 when every check passes (or only warns); else the status of the first \
            failed check: 3 broker, 4 keyring, 78 configuration, 5 identity provider, 8 locked, \
            73 audit log. \
            MSSO_PAM_DIR replaces /etc/pam.d, and SYSTEMD_UNIT_PATH the unit \
            directories (as for systemd), e.g. for tests.
            """)

    @Flag(help: "Print machine-readable JSON on standard output.")
    var json = false

    @Option(help: ArgumentHelp("The broker's socket (default: $MSSO_SOCKET, else $XDG_RUNTIME_DIR/msso/broker.sock).", valueName: "path"))
    var socket: String?

    @Option(help: ArgumentHelp("Seconds to wait for the broker's answer.", valueName: "seconds"))
    var timeout: Double = 30

    func run() throws {
        var report = Report()
        let environment = ProcessInfo.processInfo.environment
        let path = socket ?? SocketPath.resolve(environment: environment)
        let connected: BrokerConnection?
        do {
            connected = try BrokerConnection.connect(socketPath: socket, clientName: "msso doctor", timeout: timeout)
        } catch {
            connected = nil
            report.fail("broker", "mssod does not answer on \(path) (\(error.message)); start it: `systemctl --user start msso.socket`, or run `mssod &`",
                        status: .brokerUnreachable)
            for name in ["keyring", "configuration", "discovery", "registration", "lock", "audit"] {
                report.skip(name, "not checked: mssod did not answer")
            }
        }
        if let broker = connected {
            report.pass("broker", "mssod answers on \(path)")
            let found: Result<Diagnosis, BrokerError>
            do { found = .success(try broker.call(Methods.Diagnose.self, Empty())) } catch { found = .failure(error) }
            broker.close()
            switch found {
            case .success(let diagnosis): report.daemonChecks(diagnosis)
            case .failure(let error): report.fail("diagnose", "mssod could not run its checks: \(error.message)", status: ExitStatus(error))
            }
        }
        report.pamCheck(directory: environment["MSSO_PAM_DIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/etc/pam.d")
        report.unitCheck(environment: environment)
        if json { Output.json(report) } else { report.checks.forEach { Output.print($0.line) } }
        if let failed = report.checks.first(where: { $0.status == .fail }) {
            throw ExitCode(failed.exitStatus ?? ExitStatus.internalError.rawValue)
        }
    }
}

/// What `msso doctor` found, check by check.
struct Report: Encodable {
    enum Outcome: String, Encodable { case pass, fail, warn, skip }

    struct Check: Encodable {
        var name: String
        var status: Outcome
        /// One sentence: what was found, and for a failure or a warning, what to do.
        var message: String
        var group: String?
        var seconds: Double?
        var exitStatus: Int32?

        var line: String {
            let mark = switch status {
            case .pass: "✓"
            case .fail: "✗"
            case .warn: "!"
            case .skip: "-"
            }
            return "\(mark) \(message)"
        }
    }

    var checks: [Check] = []
    var ok: Bool { !checks.contains { $0.status == .fail } }

    enum CodingKeys: String, CodingKey { case ok, checks }
    func encode(to encoder: Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(ok, forKey: .ok)
        try container.encode(checks, forKey: .checks)
    }

    mutating func pass(_ name: String, _ message: String, group: String? = nil, seconds: Double? = nil) {
        checks.append(Check(name: name, status: .pass, message: message, group: group, seconds: seconds))
    }

    mutating func fail(_ name: String, _ message: String, status: ExitStatus, group: String? = nil, seconds: Double? = nil) {
        checks.append(Check(name: name, status: .fail, message: message, group: group, seconds: seconds, exitStatus: status.rawValue))
    }

    mutating func warn(_ name: String, _ message: String) {
        checks.append(Check(name: name, status: .warn, message: message))
    }

    mutating func skip(_ name: String, _ message: String) {
        checks.append(Check(name: name, status: .skip, message: message))
    }

    /// The checks mssod made, in the user's order.
    mutating func daemonChecks(_ found: Diagnosis) {
        // Where sessions are kept and why: `store` chose, or `auto` found no usable Secret Service.
        let kept = found.store.map { "sessions are kept in \($0.place): \($0.reason)" }
        if let message = found.keyring.message, !found.keyring.ok {
            fail("keyring", message + (kept.map { " (\($0))" } ?? ""),
                 status: found.keyring.error.map { ExitStatus(BrokerError($0, message)) } ?? .keyring)
        } else if let store = found.store, store.kind == .kernel {
            pass("keyring", "S" + kept!.dropFirst())
        } else {
            pass("keyring", "the Secret Service is there and its default keyring is unlocked" + (kept.map { "; \($0)" } ?? ""))
        }

        if !found.configuration.ok {
            fail("configuration", found.configuration.message ?? "the configuration does not parse", status: .config)
        } else if found.groups.isEmpty {
            fail("configuration", "no access group is configured; add one to ~/.config/msso/config.toml (or /etc/msso/config.toml), then reload mssod (`systemctl --user reload msso`)", status: .config)
        } else if found.configurationChanged {
            warn("configuration", "the configuration parses, but has changed since mssod read it; reload mssod (`systemctl --user reload msso`, or send it SIGHUP) to use it")
        } else {
            pass("configuration", "the configuration parses: \(found.groups.count) access group\(found.groups.count == 1 ? "" : "s") (\(found.groups.joined(separator: ", ")))")
        }
        for warning in found.configurationWarnings { warn("configuration", warning) }

        for probe in found.discovery {
            let time = Self.seconds(probe.seconds)
            if probe.ok {
                pass("discovery", "the identity provider of \(probe.group) answers discovery at \(probe.issuer) in \(time)", group: probe.group, seconds: probe.seconds)
            } else {
                fail("discovery", "\(probe.message ?? "the identity provider of \(probe.group) does not answer") (after \(time))",
                     status: probe.error.map { ExitStatus(BrokerError($0, "")) } ?? .idpUnavailable, group: probe.group, seconds: probe.seconds)
            }
        }

        for probe in found.discovery {
            if let minting = probe.minting {
                if probe.mintingFails == true {
                    fail("tokens", minting, status: .refused, group: probe.group)
                } else {
                    pass("tokens", "\(probe.group) \(minting)", group: probe.group)
                }
            }
            for mint in probe.mints ?? [] {
                if mint.ok {
                    pass("tokens", "\(probe.group): the last token for \(mint.target) was minted at \(Output.local(mint.at, "%H:%M:%S"))", group: probe.group)
                } else {
                    warn("tokens", "\(probe.group): the last request for a token for \(mint.target), at \(Output.local(mint.at, "%H:%M:%S")), failed: \(mint.message ?? "")")
                }
            }
        }

        registrationCheck(found)

        if found.locked {
            fail("lock", "msso is locked, so nothing signs or gets a token; run `msso unlock`", status: .locked)
        } else {
            pass("lock", "msso is not locked")
        }

        // A failure, though mssod serves on: calls go unrecorded until it is fixed.
        if let audit = found.audit {
            if let problem = audit.problem { fail("audit", problem, status: .auditLog) } else { pass("audit", "mssod writes its audit log (\(audit.path))") }
        } else {
            skip("audit", "not checked: this mssod does not say whether it writes its audit log")
        }
    }

    /// Whether msso is registered, and what that gives away. Registering it is optional (login,
    /// status, logout and the rest need none): a registered tool gives any program of the user the
    /// group's token or signatures, so the safe setups are no registration, or one for a group
    /// that names its `resources`. Never a failure: a warning says what to weigh.
    mutating func registrationCheck(_ found: Diagnosis) {
        let me = found.caller.executable ?? "msso"
        let resources = found.resources ?? [:]
        guard !found.groups.isEmpty else { return skip("registration", "not checked: no access group is configured") }
        let mine = found.caller.groups
        let giveaway = "any program of yours can then run it and get the group's token or signatures"
        let advice = "set `resources` for the group (the servers its tokens are for, msso.toml(5)) and, on the registration, `confirm = true` (a desktop confirmation per requesting program)"
        if mine.isEmpty {
            return warn("registration", "\(me) is not registered for any access group, so `msso sign`, `msso token` and `msso exec` are refused (everything else works); optional: registering a tool (`msso`, `git-credential-msso`) means \(giveaway) (within its `resources`), so first \(advice), then `msso apps allow \(me) --group \(found.groups[0])`, or ask your administrator (/etc/msso/apps.d)")
        }
        let open = mine.filter { resources[$0] == nil }
        if !open.isEmpty {
            return warn("registration", "\(me) is registered for \(open.joined(separator: ", ")), which name\(open.count == 1 ? "s" : "") no `resources`: \(giveaway), for any server; \(advice)")
        }
        let held = mine.map { "\($0) (only for \(resources[$0]!.joined(separator: ", ")))" }
        pass("registration", "\(me) is registered for \(held.joined(separator: "; "))")
    }

    /// A PAM service file that names pam_msso.so, and the module it names on disk.
    mutating func pamCheck(directory: String) {
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
        for file in files {
            guard let data = FileManager.default.contents(atPath: directory + "/" + file), data.count <= 1 << 20 else { continue }
            for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
                let words = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard let first = words.first, !first.hasPrefix("#"),
                      let module = words.dropFirst().first(where: { $0.hasSuffix("pam_msso.so") }) else { continue }
                let candidates = module.hasPrefix("/") ? [String(module)]
                    : ["/usr/lib/x86_64-linux-gnu/security", "/lib/x86_64-linux-gnu/security", "/usr/lib/aarch64-linux-gnu/security",
                       "/lib/aarch64-linux-gnu/security", "/usr/lib/security", "/lib/security", "/usr/local/lib/security"].map { $0 + "/" + module }
                guard let found = candidates.first(where: { access($0, R_OK) == 0 }) else {
                    return fail("pam", "\(directory)/\(file) uses \(module), but it is not installed (looked in \(candidates.count == 1 ? candidates[0] : "the PAM module directories")); run `make install` or fix the line",
                                status: .config)
                }
                return pass("pam", "\(directory)/\(file) uses pam_msso.so (\(found))")
            }
        }
        warn("pam", "no PAM service in \(directory) uses pam_msso.so, so logins do not show the SSO state; optional: add `session optional pam_msso.so` (docs/GUIDE.md, At session start)")
    }

    /// msso.socket and msso.service installed for systemd's user manager, and the socket enabled
    /// (a `sockets.target.wants` link). Where systemd looks: `$SYSTEMD_UNIT_PATH` when set (as
    /// systemd itself does), else the user's and the system's user-unit directories.
    mutating func unitCheck(environment: [String: String]) {
        let home = environment["HOME"] ?? "/"
        let userConfig = environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.config"
        let directories = environment["SYSTEMD_UNIT_PATH"].flatMap { $0.isEmpty ? nil : $0.split(separator: ":").map(String.init) }
            ?? [userConfig + "/systemd/user", "/etc/systemd/user", "/usr/local/lib/systemd/user", "/usr/lib/systemd/user", "/lib/systemd/user"]
        let installed = directories.filter { access($0 + "/msso.socket", R_OK) == 0 && access($0 + "/msso.service", R_OK) == 0 }
        guard let where_ = installed.first else {
            return warn("units", "the systemd user units (msso.socket, msso.service) are not installed, so mssod must be started by hand; optional: `make install`, then `systemctl --user enable --now msso.socket`")
        }
        if let enabled = directories.map({ $0 + "/sockets.target.wants/msso.socket" }).first(where: { access($0, F_OK) == 0 }) {
            pass("units", "the systemd user units are installed (\(where_)) and msso.socket is enabled (\(enabled))")
        } else {
            warn("units", "the systemd user units are installed (\(where_)) but msso.socket is not enabled; run `systemctl --user enable --now msso.socket`")
        }
    }

    static func seconds(_ value: Double) -> String {
        value < 1 ? "\(Int((value * 1000).rounded())) ms" : "\(Int(value * 10) / 10).\(Int(value * 10) % 10) s"
    }
}
