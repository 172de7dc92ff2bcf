import MSSOProtocol

/// The newest DPoP nonce each origin asked for (RFC 9449 §8, §9), for one group: a few origins,
/// the least recently used dropped first, each nonce short.
///
/// Bounded because any registered app of a `dpop` group chooses both the URL and the nonce of its
/// `sign`: a map keyed by whatever origins it named, holding whatever it sent, grew by 60 KB a
/// call and was never given back. A group keeps at most ``maximumOrigins`` entries of at most
/// ``maximumOriginBytes`` + ``maximumNonceBytes`` bytes: about 16 KiB.
struct DPoPNonces: Sendable, Equatable {
    /// Origins remembered per group: an app talks to a handful of resource servers.
    static let maximumOrigins = 16
    /// RFC 9449 nonces are short opaque strings (the RFC's examples are 43 characters; servers
    /// send tens of bytes): a longer one is refused rather than carried in every proof.
    static let maximumNonceBytes = 512
    /// An origin is a scheme, a host name (at most 253 bytes in DNS) and a port.
    static let maximumOriginBytes = 512

    /// Oldest use first.
    private(set) var entries: [(origin: String, nonce: String)] = []

    static func == (lhs: DPoPNonces, rhs: DPoPNonces) -> Bool {
        lhs.entries.elementsEqual(rhs.entries) { $0.origin == $1.origin && $0.nonce == $1.nonce }
    }

    /// The nonce `origin` last asked for, if it is remembered.
    func nonce(for origin: String) -> String? {
        entries.last { $0.origin == origin }?.nonce
    }

    /// Remembers `nonce` for `origin` as its most recent use, forgetting the least recently used
    /// origin when full. Call only with a nonce ``check(_:origin:)`` accepted.
    mutating func remember(_ nonce: String, for origin: String) {
        if let index = entries.firstIndex(where: { $0.origin == origin }) { entries.remove(at: index) }
        if entries.count >= Self.maximumOrigins { entries.removeFirst(entries.count - Self.maximumOrigins + 1) }
        entries.append((origin, nonce))
    }

    /// Marks `origin`'s entry as just used (a sign that took its nonce), so it is dropped last.
    mutating func touch(_ origin: String) {
        guard let index = entries.firstIndex(where: { $0.origin == origin }), index != entries.count - 1 else { return }
        entries.append(entries.remove(at: index))
    }

    /// Refuses a nonce the broker would not keep, saying why.
    static func check(_ nonce: String, origin: String) throws(BrokerError) {
        let length = nonce.utf8.count
        guard length > 0, length <= maximumNonceBytes else {
            throw BrokerError(.badRequest, "`dpopNonce` is \(length) bytes; a DPoP nonce (the server's `DPoP-Nonce` header, RFC 9449) is a short string, and msso accepts at most \(maximumNonceBytes) bytes")
        }
        guard origin.utf8.count <= maximumOriginBytes else {
            throw BrokerError(.badRequest, "the URL's origin (scheme, host and port) is \(origin.utf8.count) bytes; msso keeps DPoP nonces only for origins of at most \(maximumOriginBytes) bytes")
        }
    }
}
