import Glibc

/// A Unix time as text, through strftime(3), for the commands of this package (msso, msso-logout):
/// one definition of the clamping and the buffer, in the local time zone or in UTC.
package enum TimeText {
    /// `time` in the local time zone ("14:03" for "%H:%M"); "?" when the C library cannot say.
    package static func local(_ time: Double, _ format: String) -> String {
        text(time, format, local: true)
    }

    /// `time` in UTC ("2026-11-23T14:03:12Z" for "%Y-%m-%dT%H:%M:%SZ").
    package static func utc(_ time: Double, _ format: String) -> String {
        text(time, format, local: false)
    }

    private static func text(_ time: Double, _ format: String, local: Bool) -> String {
        // Clamped to years 1970 to 9999: a broker's garbage or infinity still formats.
        var seconds = time_t(time.isFinite ? max(min(time, 253_402_300_799), 0) : 0)
        var parts = tm()
        guard (local ? localtime_r(&seconds, &parts) : gmtime_r(&seconds, &parts)) != nil else { return "?" }
        var buffer = [CChar](repeating: 0, count: 64)
        let count = strftime(&buffer, buffer.count, format, &parts)
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
