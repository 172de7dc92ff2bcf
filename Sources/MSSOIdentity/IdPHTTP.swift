import CMSSOSystem
import FoundationEssentials
import Glibc
import MSSOCore
import MSSOProtocol
import Synchronization

/// HTTP to identity providers, through the system's libcurl (Debian's GnuTLS build, the one git
/// uses), with the system's TLS library and trust store, patched with the distribution
/// (ARCHITECTURE.md says why not a Swift stack), in a process of its own: `mssod-idp`, started
/// for each request with an empty environment (its source says why). mssod never maps libcurl
/// and its TLS libraries, and what an IdP sends is parsed apart from every group's tokens.
///
/// Strict where a broker must be: no redirect is ever followed (a 3xx from an IdP endpoint is an
/// error, so a client secret or a code can never be carried to a third origin); bodies are read up
/// to a cap; every request has a deadline that covers its whole answer; TLS is verified against
/// the system's trust store, or against the group's own CA file (`ca_file`) alone for a private
/// IdP. Each request goes the way its group's ``IdPRoute`` says: an administrator's group directly
/// or through its own `proxy`, never through a proxy of the environment (the helper has none,
/// and libcurl is told so too); a user's group through its `proxy`, else as mssod's environment
/// says, as curl reads it (``ProxySettings``). No connection or TLS session outlives its request.
///
/// Each request's helper is waited for on a thread of the pool (`Workers`), and the waiting task is resumed
/// when it ends. Cancelling the task (or ``shutdown()``) kills the helper at once; so does a
/// helper that overruns its deadline by more than ``grace`` (libcurl keeps the deadline itself).
final class IdPHTTP: Sendable {
    /// The proxy of the daemon's environment: for user groups only.
    private let environmentProxy: ProxySettings
    /// The helper's path: beside mssod's own executable (`../libexec/msso/mssod-idp` where the
    /// package installs it, else in the same directory), nil when it is in neither.
    let helper: String?
    /// The cancel flags of the requests under way.
    private let state = Mutex((running: [ObjectIdentifier: (flag: Flag, route: IdPRoute, kept: Bool)](), closed: false))

    /// The most an IdP answer may hold.
    static let maximumBody = 256 * 1024
    /// The most its headers may hold, all lines together (the helper's cap).
    static let maximumHeaders = 64 * 1024
    /// How long a connection may take to open, at most (within the request's own deadline).
    static let connectTimeout = 10.0
    /// How long past its deadline a helper may take before it is killed.
    static let grace = 5.0
    /// Requests under way at once, at most: each is a process (about 1.5 MB of its own), and
    /// callers can start logins against an IdP that never answers. Each lasts at most its
    /// deadline and ``grace``.
    static let maximumRunning = 16
    /// To one route (``IdPRoute``), at most: an IdP that never answers holds no more than this.
    static let maximumPerRoute = 4
    /// For the user's groups together, at most: the rest is kept for the administrator's.
    static let maximumForUserGroups = 12

    enum Method: Sendable { case get, post }

    init(environment: [String: String],
         executable: String? = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) {
        environmentProxy = ProxySettings(environment: environment)
        helper = executable.flatMap(Self.helper(beside:))
    }

    /// Where the helper is, for mssod at `executable`.
    static func helper(beside executable: String) -> String? {
        let directory = AdminFiles.parent(of: executable), prefix = AdminFiles.parent(of: directory)
        return [(prefix == "/" ? "" : prefix) + "/libexec/msso/mssod-idp", directory + "/mssod-idp"].first { access($0, X_OK) == 0 }
    }

    /// Ends every request under way: their helpers are killed, but for those whose answer is kept
    /// (``Rescue``), which go on to their deadline and keep it for the next mssod.
    func shutdown() async {
        let flags = state.withLock { state in
            state.closed = true
            return state.running.values.filter { !$0.kept }.map(\.flag)
        }
        for flag in flags { flag.cancel() }
    }

    /// Where mssod-idp keeps a 200 answer before it gives it to mssod, so that it outlives a mssod
    /// that dies or stops before storing it (a refresh's: the IdP has already rotated the refresh
    /// token it answers). mssod-idp's source says how.
    struct Rescue: Sendable {
        /// The kernel key's description.
        var key: String
        /// A line mssod reads back with it.
        var tag: String
    }

    /// The proxy a request of `route` to `url` goes through, nil for none. Loopback addresses are
    /// always reached directly.
    func proxy(for route: IdPRoute, to url: URL) -> String? {
        guard let host = url.host?.lowercased(), !Loopback.isHost(host) else { return nil }
        switch route.proxy {
        case .direct: return nil
        case .configured(let proxy): return proxy
        case .environment:
            // Never for an administrator's group, whatever a caller made of its route.
            guard !route.admin, environmentProxy.applies(to: url) else { return nil }
            return environmentProxy.text
        }
    }

    /// An IdP's answer: status, the headers that matter, and the body (at most ``maximumBody``).
    struct Answer: Sendable {
        var status: Int
        var body: [UInt8]
        var retryAfter: Double?
        var dpopNonce: String?
        var location: String?
    }

    enum Failure: Error {
        /// No whole answer within the deadline; `answering`: its status line had come.
        case timedOut(answering: Bool)
        /// Not reached, in libcurl's words.
        case unreachable(String)
        /// Its TLS failed (an untrusted or mismatched certificate, most often), in libcurl's words.
        case untrusted(String)
        /// Its body over ``maximumBody``.
        case tooLarge
        /// Its headers over ``maximumHeaders``.
        case headersTooLarge
        /// As many requests under way as this one may join (``maximumPerRoute`` and the others): said in words.
        case busy(String)
        /// mssod's own part failed (the helper missing, or not started): said in words.
        case local(String)
    }

    /// Sends one request and reads its answer; throws ``Failure`` when there is none.
    func send(_ url: URL, method: Method, headers: [(String, String)], body: [UInt8]?, route: IdPRoute,
              timeout: Double, rescue: Rescue? = nil) async throws(Failure) -> Answer {
        guard let helper else {
            throw .local("mssod-idp, the program that makes mssod's requests, is not installed where mssod looks for it (../libexec/msso/ or beside mssod); reinstall msso")
        }
        var proxy = ""
        if let text = self.proxy(for: route, to: url) {
            guard let parsed = ProxySettings.parse(text) else { throw .unreachable("the proxy URL cannot be used") }
            proxy = parsed
        }
        let timeout = min(max(timeout, 0.001), 86400)
        let milliseconds = Int(timeout * 1000)
        var fields: [[UInt8]] = [Array(url.absoluteString.utf8), Array((method == .post ? "POST" : "GET").utf8), Array(proxy.utf8),
                                 Array((route.caFile ?? "").utf8), Array(String(milliseconds).utf8),
                                 Array(String(Int(Self.connectTimeout * 1000)).utf8), body ?? [],
                                 Array((rescue?.key ?? "").utf8), Array((rescue?.tag ?? "").utf8)]
        fields += headers.map { Array("\($0.0): \($0.1)".utf8) }
        let request = Helper.frame(fields)
        guard let flag = Flag() else { throw .local("mssod has no file descriptor left for the request") }
        let admitted: Failure? = state.withLock { state in
            guard !state.closed else { return .local("mssod is shutting down") }
            let running = state.running.values
            if running.count(where: { $0.route == route }) >= Self.maximumPerRoute {
                return .busy("\(Self.maximumPerRoute) requests to this identity provider are under way and it has not answered them yet")
            }
            if !route.admin, running.count(where: { !$0.route.admin }) >= Self.maximumForUserGroups {
                return .busy("\(Self.maximumForUserGroups) requests for the user's groups are under way already")
            }
            if running.count >= Self.maximumRunning {
                return .busy("\(Self.maximumRunning) requests to identity providers are under way already")
            }
            state.running[ObjectIdentifier(flag)] = (flag, route, rescue != nil)
            return nil
        }
        if let admitted { throw admitted }
        defer { _ = state.withLock { $0.running.removeValue(forKey: ObjectIdentifier(flag)) } }
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<Answer, Failure>, Never>) in
                let started = Workers.shared.run {
                    continuation.resume(returning: Helper.run(helper, request, deadline: timeout + Self.grace, cancel: flag))
                }
                if !started { continuation.resume(returning: .failure(.local("mssod could not start a thread for the request"))) }
            }
        } onCancel: {
            flag.cancel()
        }
        return try outcome.get()
    }

    /// Set to end a request: an eventfd its thread waits on beside the helper's answer.
    private final class Flag: @unchecked Sendable {
        let fd: Int32
        init?() {
            fd = cmsso_eventfd()
            if fd < 0 { return nil }
        }
        deinit { close(fd) }
        func cancel() { cmsso_eventfd_signal(fd) }
    }

    /// One run of the helper, on the calling thread (it blocks until the answer is in, the
    /// deadline passes, or the request is cancelled). Fields both ways: see mssod-idp's source.
    private enum Helper {
        static func frame(_ fields: [[UInt8]]) -> [UInt8] {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(fields.reduce(0) { $0 + 4 + $1.count })
            for field in fields {
                let length = UInt32(field.count)
                bytes += [UInt8(length >> 24), UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff)]
                bytes += field
            }
            return bytes
        }

        static func run(_ path: String, _ request: [UInt8], deadline: Double, cancel: Flag) -> Result<Answer, Failure> {
            var input: Int32 = -1, output: Int32 = -1
            let pid = cmsso_spawn_alone(path, &input, &output)
            guard pid > 0 else { return .failure(.local("mssod-idp could not be started: \(String(cString: strerror(-pid)))")) }
            defer { close(output) }
            var status: Int32 = 0
            var ended = false
            defer {
                if input >= 0 { close(input) }
                if !ended {
                    kill(pid, SIGKILL) // it must not outlive its request (stopped, it dies all the same)
                    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                }
            }
            // Written as the helper reads, under the same deadline: a helper that stops reading
            // (stopped, say) holds nothing but its own request.
            _ = fcntl(input, F_SETFL, fcntl(input, F_GETFL) | O_NONBLOCK)
            var written = 0
            var answer: [UInt8] = []
            let end = cmsso_monotonic_ns() + UInt64(deadline * 1e9)
            var chunk = [UInt8](repeating: 0, count: 65536)
            while true {
                let now = cmsso_monotonic_ns()
                // libcurl keeps the request's own deadline: past it and the grace, the helper is
                // stuck (or was stopped), not the IdP slow.
                guard now < end else { return .failure(.local("mssod-idp did not answer within \(Int(deadline)) s (stopped, or stuck); it was killed")) }
                var waits = [pollfd(fd: output, events: Int16(POLLIN), revents: 0), pollfd(fd: cancel.fd, events: Int16(POLLIN), revents: 0),
                             pollfd(fd: input, events: Int16(POLLOUT), revents: 0)]
                let ready = poll(&waits, input >= 0 ? 3 : 2, Int32(min((end - now) / 1_000_000 + 1, 1_000_000)))
                if ready < 0 && errno != EINTR { return .failure(.local("mssod cannot wait for mssod-idp")) }
                if waits[1].revents != 0 { return .failure(.unreachable("cancelled")) }
                if input >= 0, waits[2].revents != 0 {
                    let count = request.withUnsafeBytes { Glibc.write(input, $0.baseAddress! + written, $0.count - written) }
                    if count > 0 { written += count }
                    // All of it written, or the helper gone (its answer, read below, says why).
                    if written == request.count || (count < 0 && errno != EAGAIN && errno != EINTR) {
                        close(input)
                        input = -1
                    }
                }
                guard waits[0].revents != 0 else { continue }
                let count = chunk.withUnsafeMutableBytes { Glibc.read(output, $0.baseAddress, $0.count) }
                if count < 0 && (errno == EINTR || errno == EAGAIN) { continue }
                if count <= 0 { break }
                answer += chunk[..<count]
                // An answer is its body and a few short fields: more is a helper gone wrong.
                if answer.count > IdPHTTP.maximumBody + 8192 { return .failure(.local("mssod-idp answered more than it may")) }
            }
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            ended = true
            if answer.isEmpty {
                // No answer at all: say what ended it, not that the network is down.
                if status & 0x7f != 0 { return .failure(.local("mssod-idp was killed (signal \(status & 0x7f)) before it answered")) }
                if (status >> 8) & 0xff == 127 { return .failure(.local("mssod-idp could not be started")) }
            }
            return parse(answer)
        }

        static func parse(_ bytes: [UInt8]) -> Result<Answer, Failure> {
            var fields: [ArraySlice<UInt8>] = []
            var at = 0
            while at < bytes.count {
                guard bytes.count - at >= 4 else { break }
                let length = Int(bytes[at]) << 24 | Int(bytes[at + 1]) << 16 | Int(bytes[at + 2]) << 8 | Int(bytes[at + 3])
                guard length <= bytes.count - at - 4 else { break }
                fields.append(bytes[(at + 4)..<(at + 4 + length)])
                at += 4 + length
            }
            func text(_ index: Int) -> String? {
                guard index < fields.count, !fields[index].isEmpty else { return nil }
                return String(decoding: fields[index], as: UTF8.self)
            }
            switch text(0) {
            case "ok" where fields.count == 6:
                guard let status = text(1).flatMap({ Int($0) }) else { break }
                return .success(Answer(status: status, body: Array(fields[5]), retryAfter: text(2).flatMap(IdPHTTP.retryAfter),
                                       dpopNonce: text(3), location: text(4)))
            case "timeout": return .failure(.timedOut(answering: text(1).flatMap { Int($0) }.map { $0 > 0 } ?? false))
            case "tls": return .failure(.untrusted(text(1) ?? "TLS failed"))
            case "too-large": return .failure(.tooLarge)
            case "headers-too-large": return .failure(.headersTooLarge)
            case "error": return .failure(.unreachable(text(1) ?? "mssod-idp failed"))
            default: break
            }
            return .failure(.local("mssod-idp ended without an answer"))
        }
    }

    /// `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date, as seconds from now.
    static func retryAfter(_ value: String) -> Double? {
        let text = String(value.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
        if let seconds = Double(text), seconds.isFinite, seconds >= 0 { return seconds }
        return httpDate(text).map { max(0, $0 - Date().timeIntervalSince1970) }
    }

    /// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) as Unix seconds.
    static func httpDate(_ text: String) -> Double? {
        let parts = text.split(separator: " ")
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard parts.count == 6, parts[5] == "GMT", let day = Int(parts[1]), let month = months.firstIndex(of: String(parts[2])),
              let year = Int(parts[3]), (1970...9999).contains(year), (1...31).contains(day) else { return nil }
        let clock = parts[4].split(separator: ":").compactMap { Int($0) }
        guard clock.count == 3, (0...23).contains(clock[0]), (0...59).contains(clock[1]), (0...60).contains(clock[2]) else { return nil }
        // Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
        let y = month < 2 ? year - 1 : year, m = month + 1
        let era = y / 400, yearOfEra = y - era * 400
        let dayOfYear = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return Double(days * 86400 + clock[0] * 3600 + clock[1] * 60 + clock[2])
    }
}

/// Proxies from the environment, as curl reads them for https: `https_proxy` (or `HTTPS_PROXY`),
/// else `all_proxy` (or `ALL_PROXY`); `no_proxy` (or `NO_PROXY`) lists hosts to reach directly,
/// each with its subdomains (a leading dot changes nothing), `*` for all. Loopback addresses are
/// always reached directly, and only they may be plain http, so `http_proxy` never applies.
/// For user groups only: the environment is the user's to set.
struct ProxySettings: Sendable {
    /// The proxy's URL as the environment gives it, when it can be used.
    var text: String?
    var exempt: [String] = []

    init(environment: [String: String]) {
        func value(_ names: String...) -> String? {
            names.lazy.compactMap { environment[$0] }.first { !$0.isEmpty }
        }
        let https = value("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
        text = https.flatMap { Self.parse($0) == nil ? nil : $0 }
        exempt = (value("no_proxy", "NO_PROXY") ?? "").split(separator: ",").map {
            var entry = $0.filter { $0 != " " && $0 != "\t" }.lowercased()
            if entry.hasPrefix(".") { entry.removeFirst() }
            return entry
        }.filter { !$0.isEmpty }
    }

    /// `http://[user:password@]host:port` (an `https` scheme: the same plain CONNECT proxy) or
    /// `socks5://host:port`, as the URL libcurl is given: the port 1080 when none is named; over
    /// SOCKS the proxy resolves the IdP's name (`socks5h`), as it would have to where only it can.
    static func parse(_ text: String) -> String? {
        let withScheme = text.contains("://") ? text : "http://" + text
        guard var parts = URLComponents(string: withScheme), let host = parts.host, !host.isEmpty else { return nil }
        switch parts.scheme?.lowercased() {
        case "socks5", "socks5h":
            parts.scheme = "socks5h"
            parts.user = nil
            parts.password = nil
        case "http", "https": parts.scheme = "http"
        default: return nil
        }
        parts.port = parts.port ?? 1080
        parts.path = ""
        parts.query = nil
        parts.fragment = nil
        return parts.string
    }

    func applies(to url: URL) -> Bool {
        guard text != nil, let host = url.host?.lowercased() else { return false }
        if Loopback.isHost(host) { return false }
        return !exempt.contains { $0 == "*" || host == $0 || host.hasSuffix("." + $0) }
    }
}
