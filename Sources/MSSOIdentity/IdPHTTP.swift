import CCurl
import FoundationEssentials
import Glibc
import MSSOCore
import MSSOProtocol
import Synchronization

/// HTTP to identity providers, through libcurl: the system's (Debian's GnuTLS build, the one git
/// uses), with the system's TLS library and trust store, patched with the distribution
/// (ARCHITECTURE.md says why not a Swift stack).
///
/// Strict where a broker must be: no redirect is ever followed (a 3xx from an IdP endpoint is an
/// error, so a client secret or a code can never be carried to a third origin); bodies are read up
/// to a cap; every request has a deadline that covers its whole answer; TLS is verified against
/// the system's trust store, or against the group's own CA file (`ca_file`) alone for a private
/// IdP. Each request goes the way its group's ``IdPRoute`` says: an administrator's group directly
/// or through its own `proxy`, never through a proxy of the environment (libcurl is told so, since
/// it would read one); a user's group through its `proxy`, else as the environment says, as curl
/// reads it (``ProxySettings``). Connections are kept per proxy and per kind of group, so an
/// administrator's group never reuses a connection a user's group made.
///
/// libcurl's easy interface blocks: each request runs on a thread of its own, and the waiting task
/// is resumed when it ends. Cancelling the task (or ``shutdown()``) ends the transfer within about
/// a second (libcurl's progress callback), a name lookup under way included (left to finish alone).
/// Needs libcurl 7.87 or later (Debian 12 has 7.88); an older one refuses an option, and every
/// request then fails as "could not be reached".
final class IdPHTTP: Sendable {
    /// The proxy of the daemon's environment: for user groups only.
    private let environmentProxy: ProxySettings
    private let state = Mutex(State())

    /// Which connections a request may reuse.
    struct Pool: Hashable {
        var admin: Bool
        /// The proxy's URL, nil for direct connections.
        var proxy: String?
    }

    private struct State {
        /// Handles not in use, each with the connections it keeps open (at most ``idleHandles`` a pool).
        var idle: [Pool: [Handle]] = [:]
        /// The cancel flags of the requests under way.
        var running: [ObjectIdentifier: Flag] = [:]
        var closed = false
    }

    /// The most an IdP answer may hold.
    static let maximumBody = 256 * 1024
    /// The most its headers may hold, all lines together.
    static let maximumHeaders = Int(MSSO_HTTP_HEADER_CAP)
    /// Idle handles kept a pool: as many requests to one IdP at once as then find a connection open.
    static let idleHandles = 4
    /// How long a connection may take to open, at most (within the request's own deadline).
    static let connectTimeout = 10.0

    /// At the first request, not at start: libcurl's set-up initialises OpenSSL (for libssh2),
    /// about 1.5 MB resident that a broker nobody logs in with never needs.
    private static let initialized: Bool = curl_global_init(Int(CURL_GLOBAL_DEFAULT)) == CURLE_OK

    enum Method: Sendable { case get, post }

    init(environment: [String: String]) {
        environmentProxy = ProxySettings(environment: environment)
    }

    /// Ends every request under way (each within about a second) and closes kept connections.
    func shutdown() async {
        let (flags, handles) = state.withLock { state in
            state.closed = true
            defer { state.idle = [:] }
            return (Array(state.running.values), state.idle.values.flatMap { $0 })
        }
        for flag in flags { flag.cancel() }
        _ = handles // released here: curl_easy_cleanup closes their connections
    }

    /// The pool a request of `route` to `url` goes through. Loopback addresses are always reached
    /// directly.
    func pool(for route: IdPRoute, to url: URL) -> Pool {
        guard let host = url.host?.lowercased(), !Loopback.isHost(host) else { return Pool(admin: route.admin, proxy: nil) }
        switch route.proxy {
        case .direct: return Pool(admin: route.admin, proxy: nil)
        case .configured(let proxy): return Pool(admin: route.admin, proxy: proxy)
        case .environment:
            // Never for an administrator's group, whatever a caller made of its route.
            guard !route.admin, environmentProxy.applies(to: url) else { return Pool(admin: route.admin, proxy: nil) }
            return Pool(admin: false, proxy: environmentProxy.text)
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
        case timedOut
        case unreachable(String)
        /// Its body over ``maximumBody``.
        case tooLarge
        /// Its headers over ``maximumHeaders``.
        case headersTooLarge
    }

    /// Sends one request and reads its answer; throws ``Failure`` when there is none.
    func send(_ url: URL, method: Method, headers: [(String, String)], body: [UInt8]?, route: IdPRoute,
              timeout: Double) async throws(Failure) -> Answer {
        guard Self.initialized else { throw .unreachable("libcurl could not be initialised") }
        let pool = pool(for: route, to: url)
        var proxy = ""
        if let text = pool.proxy {
            guard let parsed = ProxySettings.parse(text) else { throw .unreachable("the proxy URL cannot be used") }
            proxy = parsed
        }
        let flag = Flag()
        let handle: Handle? = state.withLock { state in
            guard !state.closed else { return nil }
            state.running[ObjectIdentifier(flag)] = flag
            return state.idle[pool]?.popLast() ?? Handle()
        }
        guard let handle else { throw .unreachable("shut down") }
        defer { _ = state.withLock { $0.running.removeValue(forKey: ObjectIdentifier(flag)) } }
        let request = Request(url: url.absoluteString, post: method == .post, headers: headers.map { "\($0.0): \($0.1)" },
                              body: body, proxy: proxy, caFile: route.caFile,
                              timeout: min(max(timeout, 0.001), 86400), flag: flag)
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<Answer, Failure>, Never>) in
                guard DetachedThread.start({ continuation.resume(returning: request.perform(on: handle)) }) else {
                    return continuation.resume(returning: .failure(.unreachable("no thread for the request")))
                }
            }
        } onCancel: {
            flag.cancel()
        }
        state.withLock { state in
            if !state.closed, case .success = outcome, state.idle[pool, default: []].count < Self.idleHandles {
                state.idle[pool, default: []].append(handle)
            }
        }
        return try outcome.get()
    }

    /// A libcurl easy handle: the connections it opened stay open with it, for the next request.
    private final class Handle: @unchecked Sendable {
        let easy: UnsafeMutableRawPointer?
        init() { easy = curl_easy_init() }
        deinit { curl_easy_cleanup(easy) }
    }

    /// Set to end a request: read by libcurl's progress callback on the request's thread.
    private final class Flag: @unchecked Sendable {
        let value = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        init() { value.initialize(to: 0) }
        deinit { value.deallocate() }
        func cancel() { msso_http_cancel(value) }
    }

    private struct Request: Sendable {
        var url: String
        var post: Bool
        var headers: [String]
        var body: [UInt8]?
        var proxy: String
        var caFile: String?
        var timeout: Double
        var flag: Flag

        /// Runs the request on the calling thread (it blocks until the answer is in, or the deadline).
        func perform(on handle: Handle) -> Result<Answer, Failure> {
            guard let easy = handle.easy else { return .failure(.unreachable("libcurl could not make a handle")) }
            var answer = msso_http_answer()
            answer.cap = IdPHTTP.maximumBody
            defer { msso_http_answer_free(&answer) }
            let milliseconds = Int(timeout * 1000)
            let connecting = min(milliseconds, Int(IdPHTTP.connectTimeout * 1000))
            let lines = headers.map { strdup($0) }
            defer { lines.forEach { free($0) } }
            let pointers = lines.map { UnsafePointer($0) }
            let code = (body ?? []).withUnsafeBufferPointer { bytes in
                msso_http_perform(easy, url, post ? 1 : 0, pointers, pointers.count, bytes.baseAddress, bytes.count,
                                  proxy, caFile, milliseconds, connecting, flag.value, &answer)
            }
            switch (answer.too_large, code) {
            case (1, _): return .failure(.tooLarge)
            case (2, _): return .failure(.headersTooLarge)
            case (_, CURLE_OK): break
            case (_, CURLE_OPERATION_TIMEDOUT): return .failure(.timedOut)
            case (_, CURLE_ABORTED_BY_CALLBACK): return .failure(.unreachable("cancelled"))
            default: return .failure(.unreachable(String(cString: curl_easy_strerror(code))))
            }
            let received = answer.body.map { Array(UnsafeBufferPointer(start: $0, count: answer.length)) } ?? []
            return .success(Answer(status: answer.status, body: received, retryAfter: Self.text(answer.retry_after).flatMap(IdPHTTP.retryAfter),
                                   dpopNonce: Self.text(answer.dpop_nonce), location: Self.text(answer.location)))
        }

        /// A header the shim kept (a C string in a fixed array), nil when it was not sent.
        private static func text<Field>(_ field: Field) -> String? {
            withUnsafeBytes(of: field) { bytes in
                let value = String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
                return value.isEmpty ? nil : value
            }
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
