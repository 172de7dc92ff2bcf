import AsyncHTTPClient
import FoundationEssentials
import Glibc
import Logging
import MSSOCore
import MSSOProtocol
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// HTTP to identity providers, through AsyncHTTPClient on the daemon's own event loops.
///
/// Strict where a broker must be: no redirect is ever followed (a 3xx from an IdP endpoint is an
/// error, so a client secret or a code can never be carried to a third origin); bodies are read up
/// to a cap; every request has a deadline; TLS is verified against the system's trust store, or
/// against the group's own CA file (`ca_file`) for a private IdP. Proxies are taken from the
/// environment as curl takes them (``ProxySettings``).
final class IdPHTTP: Sendable {
    private let direct: HTTPClient
    private let proxied: HTTPClient?
    private let proxy: ProxySettings

    /// The most an IdP answer may hold.
    static let maximumBody = 256 * 1024

    init(environment: [String: String]) {
        proxy = ProxySettings(environment: environment)
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow)
        configuration.timeout = .init(connect: .seconds(10), read: .seconds(30))
        configuration.httpVersion = .http1Only
        // An IdP that refuses connections is down now: say so at once rather than retry until the
        // deadline (the broker has its own backoff for refreshes).
        configuration.connectionPool.retryConnectionEstablishment = false
        direct = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
        if let server = proxy.server {
            configuration.proxy = server
            proxied = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
        } else {
            proxied = nil
        }
    }

    func shutdown() async {
        try? await direct.shutdown()
        try? await proxied?.shutdown()
    }

    /// An IdP's answer: status, the headers that matter, and the body (at most ``maximumBody``).
    struct Answer: Sendable {
        var status: Int
        var body: ByteBuffer
        var retryAfter: Double?
        var dpopNonce: String?
        var location: String?
    }

    enum Failure: Error {
        case timedOut
        case unreachable(String)
        case tooLarge
    }

    /// Sends one request and reads its answer; throws ``Failure`` when there is none.
    func send(_ url: URL, method: HTTPMethod, headers: [(String, String)], body: [UInt8]?, caFile: String?,
              timeout: Double) async throws(Failure) -> Answer {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(body) }
        if let caFile {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .file(caFile)
            request.tlsConfiguration = tls
        }
        let client = (proxy.applies(to: url) ? proxied : nil) ?? direct
        let milliseconds = Int64(min(max(timeout, 0.001), 86400) * 1000)
        let deadline = ContinuousClock.now + .milliseconds(milliseconds)
        do {
            let response = try await client.execute(request, timeout: .milliseconds(milliseconds))
            // AsyncHTTPClient's deadline ends with the response head: the body gets one of its own,
            // the rest of the same time, so that an IdP dribbling its answer cannot hold a login
            // or a refresh past the timeout.
            let body = try await Self.collect(response.body, until: deadline)
            return Answer(status: Int(response.status.code), body: body,
                          retryAfter: response.headers.first(name: "Retry-After").flatMap(Self.retryAfter),
                          dpopNonce: response.headers.first(name: "DPoP-Nonce"),
                          location: response.headers.first(name: "Location"))
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
            throw .timedOut
        } catch let error as NIOTooManyBytesError {
            _ = error
            throw .tooLarge
        } catch is CancellationError {
            throw .unreachable("cancelled")
        } catch {
            throw .unreachable(String(describing: type(of: error)))
        }
    }

    /// A response body, at most ``maximumBody`` bytes, read before `deadline` (else `deadlineExceeded`).
    static func collect(_ body: HTTPClientResponse.Body, until deadline: ContinuousClock.Instant) async throws -> ByteBuffer {
        try await withThrowingTaskGroup(of: ByteBuffer?.self) { group in
            group.addTask { try await body.collect(upTo: Self.maximumBody) }
            group.addTask {
                try await Task.sleep(until: deadline, clock: .continuous)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let buffer = first else { throw HTTPClientError.deadlineExceeded }
            return buffer
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
struct ProxySettings: Sendable {
    var server: HTTPClient.Configuration.Proxy?
    var exempt: [String] = []

    init(environment: [String: String]) {
        func value(_ names: String...) -> String? {
            names.lazy.compactMap { environment[$0] }.first { !$0.isEmpty }
        }
        let https = value("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
        server = https.flatMap(Self.parse)
        exempt = (value("no_proxy", "NO_PROXY") ?? "").split(separator: ",").map {
            var entry = $0.filter { $0 != " " && $0 != "\t" }.lowercased()
            if entry.hasPrefix(".") { entry.removeFirst() }
            return entry
        }.filter { !$0.isEmpty }
    }

    /// `http://[user:password@]host:port` or `socks5://host:port`.
    static func parse(_ text: String) -> HTTPClient.Configuration.Proxy? {
        let withScheme = text.contains("://") ? text : "http://" + text
        guard let url = URL(string: withScheme), let host = url.host, !host.isEmpty else { return nil }
        switch url.scheme?.lowercased() {
        case "socks5", "socks5h": return .socksServer(host: host, port: url.port ?? 1080)
        case "http", "https":
            let authorization = url.user.map { HTTPClient.Authorization.basic(username: $0, password: url.password ?? "") }
            return .server(host: host, port: url.port ?? 1080, authorization: authorization)
        default: return nil
        }
    }

    func applies(to url: URL) -> Bool {
        guard server != nil, let host = url.host?.lowercased() else { return false }
        if IdPEndpoints.isLoopback(host) { return false }
        return !exempt.contains { $0 == "*" || host == $0 || host.hasSuffix("." + $0) }
    }
}
