import MSSOProtocol

/// Who hears which group's signals. Owned by the broker actor; delivery never blocks (a sink
/// that cannot keep up is the sink's problem: connections hang up on slow readers).
struct Subscribers {
    private struct Entry {
        let sink: any SignalSink
        var groups: Set<String> = []
        /// Every group, those configured later (by a reload) included.
        var everyGroup = false
        /// Only this account's signals (nil: every account's).
        var account: String?
    }

    private var entries: [ObjectIdentifier: Entry] = [:]

    /// Adds `groups` to what `sink` hears (nil: every group, those configured later included);
    /// returns the groups it names now, or nil when it hears every group.
    mutating func add(_ sink: any SignalSink, groups: [String]?, account: String? = nil) -> [String]? {
        let key = ObjectIdentifier(sink)
        var entry = entries[key] ?? Entry(sink: sink)
        if let groups { entry.groups.formUnion(groups) } else { entry.everyGroup = true }
        entry.account = account ?? entry.account
        entries[key] = entry
        return entry.everyGroup ? nil : entry.groups.sorted()
    }

    mutating func remove(_ sink: any SignalSink) {
        entries[ObjectIdentifier(sink)] = nil
    }

    func deliver(_ signal: Signal) {
        for entry in entries.values where (entry.everyGroup || entry.groups.contains(signal.group))
            && (entry.account == nil || signal.status?.account == nil || signal.status?.account == entry.account) {
            entry.sink.deliver(signal)
        }
    }
}
