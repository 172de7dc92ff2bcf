/// Durations as people write them in config files: `90s`, `30m`, `12h`, `2d`, `1h30m`.
public enum SessionDuration {
    /// The longest duration any setting takes (10 years): longer ones are refused, so no timer
    /// or date computed from one can overflow.
    public static let maximum: Double = 3650 * 86400

    /// Seconds in `text`, or nil when it is not a positive duration of that form.
    public static func parse(_ text: String) -> Double? {
        var total = 0.0
        var number = ""
        var sawUnit = false
        for ch in text {
            if ch.isASCII, ch.isNumber {
                number.append(ch)
                continue
            }
            let unit: Double
            switch ch {
            case "s": unit = 1
            case "m": unit = 60
            case "h": unit = 3600
            case "d": unit = 86400
            default: return nil
            }
            guard let n = Double(number) else { return nil }
            total += n * unit
            number = ""
            sawUnit = true
        }
        guard number.isEmpty, sawUnit, total > 0, total.isFinite else { return nil }
        return total
    }

    /// The shortest way to write `seconds` back (`1h30m`), for status output and errors.
    public static func format(_ seconds: Double) -> String {
        guard seconds.isFinite else { return "forever" }
        var rest = Int(min(seconds, maximum * 10).rounded())
        guard rest > 0 else { return "0s" }
        var out = ""
        for (unit, suffix) in [(86400, "d"), (3600, "h"), (60, "m"), (1, "s")] where rest >= unit {
            out += "\(rest / unit)\(suffix)"
            rest %= unit
        }
        return out
    }
}
