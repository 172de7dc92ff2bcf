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
import Synchronization

/// HTTP to identity providers, through AsyncHTTPClient on the daemon's own event loops.
///
/// Strict where a broker must be: no redirect is ever followed (a 3xx from an IdP endpoint is an
/// error, so a client secret or a code can never be carried to a third origin); bodies are read up
/// to a cap; every request has a deadline; TLS is verified against the system's trust store, or
/// against the group's own CA file (`ca_file`) for a private IdP. Each request goes the way its
/// group's ``IdPRoute`` says: an administrator's group directly or through its own `proxy`, never
/// through a proxy of the environment; a user's group through its `proxy`, else as the
/// environment says, as curl reads it (``ProxySettings``). Connections are pooled per proxy and
/// per kind of group, so an administrator's group never reuses a connection a user's group made.
final class IdPHTTP: Sendable {
    /// The proxy of the daemon's environment: for user groups only.
    private let environmentProxy: ProxySettings
    private let pools = Mutex(Pools())

    /// Which HTTP client (and connection pool) a request uses.
    struct Pool: Hashable {
        var admin: Bool
        /// The proxy's URL, nil for direct connections.
        var proxy: String?
    }

    private struct Pools {
        var clients: [Pool: HTTPClient] = [:]
        var closed = false
    }

    /// The most an IdP answer may hold.
    static let maximumBody = 256 * 1024

    init(environment: [String: String]) {
        environmentProxy = ProxySettings(environment: environment)
    }

    func shutdown() async {
        let clients = pools.withLock { pools in
            pools.closed = true
            defer { pools.clients = [:] }
            return Array(pools.clients.values)
        }
        for client in clients { try? await client.shutdown() }
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

    /// The client of a pool, made at its first use.
    private func client(_ pool: Pool) throws(Failure) -> HTTPClient {
        var proxy: HTTPClient.Configuration.Proxy?
        if let text = pool.proxy {
            guard let parsed = ProxySettings.parse(text) else { throw .unreachable("the proxy URL cannot be used") }
            proxy = parsed
        }
        let made: HTTPClient? = pools.withLock { pools in
            if let client = pools.clients[pool] { return client }
            guard !pools.closed else { return nil }
            var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow)
            configuration.timeout = .init(connect: .seconds(10), read: .seconds(30))
            configuration.httpVersion = .http1Only
            // An IdP that refuses connections is down now: say so at once rather than retry until
            // the deadline (the broker has its own backoff for refreshes).
            configuration.connectionPool.retryConnectionEstablishment = false
            configuration.proxy = proxy
            let client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
            pools.clients[pool] = client
            return client
        }
        guard let made else { throw .unreachable("shut down") }
        return made
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
    func send(_ url: URL, method: HTTPMethod, headers: [(String, String)], body: [UInt8]?, route: IdPRoute,
              timeout: Double) async throws(Failure) -> Answer {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(body) }
        if let caFile = route.caFile {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .file(caFile)
            request.tlsConfiguration = tls
        }
        let client = try self.client(pool(for: route, to: url))
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
        guard text != nil, let host = url.host?.lowercased() else { return false }
        if Loopback.isHost(host) { return false }
        return !exempt.contains { $0 == "*" || host == $0 || host.hasSuffix("." + $0) }
    }
}
