import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@_exported import MSSOClient

/// For apps that already build requests with Foundation: sign a `URLRequest` in place. Kept apart
/// from `MSSOClient` so that programs which do not use Foundation's networking never link it
/// (on Linux, `URLRequest` lives in FoundationNetworking, with libcurl behind it).
extension SSOClient {
    /// Adds the authenticating headers to `request` in place (as the group's `account`, by
    /// default the client's ``SSOClient/account``).
    public func sign(_ request: inout URLRequest, group: String? = nil, account: String? = nil) async throws {
        guard let url = request.url?.absoluteString else {
            throw BrokerError(.badRequest, "the request has no URL")
        }
        let existing = (request.allHTTPHeaderFields ?? [:]).sorted { $0.key < $1.key }.map { Header($0.key, $0.value) }
        let headers = try await sign(method: request.httpMethod ?? "GET", url: url, headers: existing,
                                     body: request.httpBody.map { Array($0) }, group: group, account: account)
        for header in headers { request.setValue(header.value, forHTTPHeaderField: header.name) }
    }
}

extension SSOClient {
    /// Sends `request` signed by the broker, and returns what came back. A redirect within the
    /// request's origin (scheme, host and port) is followed with a request signed anew for its URL,
    /// at most `maximumRedirects` times; a redirect to another origin is not followed but returned,
    /// so that the headers signed for one server never reach another (Foundation's own redirect
    /// handling would copy them to wherever a server, or an open redirect on it, points).
    public func data(for request: URLRequest, group: String? = nil, account: String? = nil,
                     maximumRedirects: Int = 5) async throws -> (Data, URLResponse) {
        var request = request
        let unsigned = request
        for _ in 0...maximumRedirects {
            try await sign(&request, group: group, account: account)
            let (data, response) = try await Self.send(request)
            guard let http = response as? HTTPURLResponse, (300..<400).contains(http.statusCode),
                  let location = http.value(forHTTPHeaderField: "Location"),
                  let next = URL(string: location, relativeTo: request.url)?.absoluteURL,
                  let from = request.url, Self.sameOrigin(from, next) else { return (data, response) }
            var following = unsigned
            following.url = next
            if http.statusCode == 303 || ((http.statusCode == 301 || http.statusCode == 302) && request.httpMethod == "POST") {
                following.httpMethod = "GET"
                following.httpBody = nil
            }
            request = following
        }
        throw BrokerError(.badRequest, "more than \(maximumRedirects) redirects from \(unsigned.url?.absoluteString ?? "the request")")
    }

    static func sameOrigin(_ a: URL, _ b: URL) -> Bool {
        func port(_ url: URL) -> Int? { url.port ?? (url.scheme?.lowercased() == "https" ? 443 : url.scheme?.lowercased() == "http" ? 80 : nil) }
        return a.scheme?.lowercased() == b.scheme?.lowercased() && a.host?.lowercased() == b.host?.lowercased() && port(a) == port(b)
    }

    /// A session that follows no redirect by itself (``data(for:group:account:maximumRedirects:)`` does).
    private static let session = URLSession(configuration: .ephemeral, delegate: NoRedirects(), delegateQueue: nil)

    /// One request on ``session``; a refusal that challenges for a password (`401` with
    /// `WWW-Authenticate: Basic`, what git servers and registries send) comes back as the `401`
    /// it is, without its body (``NoRedirects`` declines the challenge, which ends the task).
    private static func send(_ request: URLRequest) async throws -> (Data, URLResponse) {
        try await withCheckedThrowingContinuation { continuation in
            let box = TaskBox()
            let task = session.dataTask(with: request) { data, response, error in
                if let error {
                    if (error as? URLError)?.code == .cancelled, let refused = box.task?.response as? HTTPURLResponse, refused.statusCode == 401 {
                        return continuation.resume(returning: (data ?? Data(), refused))
                    }
                    return continuation.resume(throwing: error)
                }
                guard let response else { return continuation.resume(throwing: URLError(.badServerResponse)) }
                continuation.resume(returning: (data ?? Data(), response))
            }
            box.task = task
            task.resume()
        }
    }
}

/// The task a completion handler belongs to (set before it can run: the task starts after).
private final class TaskBox: @unchecked Sendable {
    var task: URLSessionTask?
}

/// Refuses every redirect, so that the response that asked for it is what the caller gets; and
/// declines a password challenge the app has no credential for. swift-corelibs-foundation before
/// Swift 6.3.2 otherwise leaves such a task waiting forever (swift-corelibs-foundation#5456).
private final class NoRedirects: NSObject, URLSessionTaskDelegate, @unchecked Sendable {
    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @escaping (URLRequest?) -> Void) {
        completionHandler(nil)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
                    completionHandler: @escaping (URLSession.AuthChallengeDisposition, URLCredential?) -> Void) {
        completionHandler(challenge.proposedCredential == nil ? .cancelAuthenticationChallenge : .performDefaultHandling, nil)
    }
}
