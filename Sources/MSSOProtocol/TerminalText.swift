/// Text from outside (an identity provider, the broker, a file, the kernel's name of a program)
/// made safe to show on a terminal: the one definition every command prints through, and what
/// the daemon puts in a notification or quotes of an identity provider's words.
///
/// An identity provider chooses the discovery `issuer` quoted in errors, a device login's
/// `user_code` and address, the username; a file names groups and apps; an executable's path may
/// hold any byte but `/` and NUL. Written raw to a terminal, an ESC or CSI sequence in any of them
/// could rewrite the screen or the window title, fake a line, or hide the rest of a sentence; a
/// bidi override could reorder what the user reads. So every C0 control character (but a newline
/// where the caller says a multi-line text is its own), DEL, every C1 control character, the
/// bidi embeddings, overrides, isolates and marks, and the Unicode line and paragraph separators
/// become `?`, as pam_msso shows them. JSON output is escaped by ``TerminalText/json(_:)``
/// instead, so that values stay exact.
public enum TerminalText {
    /// `text` with every character a terminal could act on replaced by `?`. With `newlines`,
    /// line feeds are kept (for a multi-line text the command itself composed).
    public static func safe(_ text: String, newlines: Bool = false) -> String {
        // The common case, printable ASCII, costs one pass over the bytes and no copy.
        if text.utf8.allSatisfy({ ($0 >= 0x20 && $0 < 0x7F) || ($0 == 0x0A && newlines) }) { return text }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            out.append(isHarmful(scalar.value, newlines: newlines) ? "?" : scalar)
        }
        return String(out)
    }

    static func isHarmful(_ value: UInt32, newlines: Bool) -> Bool {
        switch value {
        case 0x0A: return !newlines
        case 0x00..<0x20, 0x7F...0x9F: return true // C0, DEL, C1 (0x9B is a CSI of its own)
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: return true // bidi marks, embeddings, overrides, isolates
        case 0x2028, 0x2029: return true // line and paragraph separators
        default: return false
        }
    }

    /// JSON text (as JSONEncoder writes it: control characters below 0x20 already escaped) with
    /// DEL, the C1 controls and the bidi controls escaped too (`\u009b`), which JSON allows
    /// anywhere in a string and which are found nowhere else: the values a program decodes are
    /// unchanged, and a terminal shown the text sees no control character.
    public static func json(_ text: String) -> String {
        if text.utf8.allSatisfy({ $0 < 0x7F }) { return text }
        var out = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if scalar.value >= 0x20, isHarmful(scalar.value, newlines: true) {
                let hex = String(scalar.value, radix: 16)
                out.append(contentsOf: ("\\u" + String(repeating: "0", count: 4 - hex.count) + hex).unicodeScalars)
            } else {
                out.append(scalar)
            }
        }
        return String(out)
    }
}
