import FoundationEssentials
import Glibc

/// The device login's address as a QR code on the terminal, for a phone to scan, drawn by
/// `qrencode` (Debian's qrencode package) when it is installed: a QR encoder of our own would be
/// more code than the rest of the command, and libqrencode has no static library for msso's
/// static build. Shown only on a terminal wide enough for it; otherwise, or without qrencode,
/// nothing (the address and code are printed anyway).
enum QRCode {
    static let encoder = "/usr/bin/qrencode"

    static func show(_ address: String) {
        guard isatty(STDERR_FILENO) == 1, access(encoder, X_OK) == 0,
              let lines = draw(address), let width = lines.first?.count, width <= columns() else { return }
        Output.toStandardError(lines.joined(separator: "\n") + "\n")
    }

    /// The code in Unicode half blocks (two rows of modules a line), or nil.
    static func draw(_ address: String) -> [String]? {
        // The address goes on standard input, never in argv: with the device code in it, it is
        // the user's to see, not every process listing's.
        var input: [Int32] = [0, 0], output: [Int32] = [0, 0]
        guard pipe(&input) == 0 else { return nil }
        guard pipe(&output) == 0 else { close(input[0]); close(input[1]); return nil }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, input[0], 0)
        posix_spawn_file_actions_adddup2(&actions, output[1], 1)
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        for fd in input + output { posix_spawn_file_actions_addclose(&actions, fd) }
        let argv = [encoder, "--type=UTF8", "--margin=2", "--level=L"].map { (text: String) in strdup(text) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid = pid_t()
        let spawned = posix_spawn(&pid, encoder, &actions, nil, argv, environ) == 0
        close(input[0])
        close(output[1])
        if spawned {
            let bytes = Array(address.utf8)
            _ = bytes.withUnsafeBytes { write(input[1], $0.baseAddress, $0.count) } // small: fits the pipe
        }
        close(input[1])
        var drawn: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while spawned, drawn.count < 1 << 16 {
            let count = chunk.withUnsafeMutableBytes { read(output[0], $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            drawn += chunk[..<count]
        }
        close(output[0])
        guard spawned else { return nil }
        var status: Int32 = 0
        waitpid(pid, &status, 0)
        guard status == 0 else { return nil }
        let lines = String(decoding: drawn, as: UTF8.self).split(separator: "\n").map(String.init)
        // Only what a QR code is drawn with: nothing else reaches the terminal.
        guard !lines.isEmpty, lines.allSatisfy({ $0.unicodeScalars.allSatisfy { " █▀▄".unicodeScalars.contains($0) } }) else { return nil }
        return lines
    }

    /// The terminal's width in columns (80 when it cannot be asked).
    static func columns() -> Int {
        var size = winsize()
        guard ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return 80 }
        return Int(size.ws_col)
    }
}
