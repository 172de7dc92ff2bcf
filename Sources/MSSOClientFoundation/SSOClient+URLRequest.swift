import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
@_exported import MSSOClient

/// For apps that already build requests with Foundation: sign a `URLRequest` in place. Kept apart
/// from `MSSOClient` so that programs which do not use Foundation's networking never link it
/// (on Linux, `URLRequest` lives in FoundationNetworking, with libcurl behind it).
extension SSOClient {
    /// Adds the authenticating headers to `request` in place.
    public func sign(_ request: inout URLRequest, group: String? = nil) async throws {
        guard let url = request.url?.absoluteString else {
            throw BrokerError(.badRequest, "the request has no URL")
        }
        let existing = (request.allHTTPHeaderFields ?? [:]).sorted { $0.key < $1.key }.map { Header($0.key, $0.value) }
        let headers = try await sign(method: request.httpMethod ?? "GET", url: url, headers: existing,
                                     body: request.httpBody.map { Array($0) }, group: group)
        for header in headers { request.setValue(header.value, forHTTPHeaderField: header.name) }
    }
}
