import MSSOProtocol

/// Who hears which group's signals. Owned by the broker actor; delivery never blocks (a sink
/// that cannot keep up is the sink's problem: connections hang up on slow readers).
struct Subscribers {
    private var entries: [ObjectIdentifier: (sink: any SignalSink, groups: Set<String>)] = [:]

    /// Adds `groups` to what `sink` hears; returns everything it now hears.
    mutating func add(_ sink: any SignalSink, groups: [String]) -> [String] {
        let key = ObjectIdentifier(sink)
        var entry = entries[key] ?? (sink, [])
        entry.groups.formUnion(groups)
        entries[key] = entry
        return entry.groups.sorted()
    }

    mutating func remove(_ sink: any SignalSink) {
        entries[ObjectIdentifier(sink)] = nil
    }

    func deliver(_ signal: Signal) {
        for entry in entries.values where entry.groups.contains(signal.group) {
            entry.sink.deliver(signal)
        }
    }
}
