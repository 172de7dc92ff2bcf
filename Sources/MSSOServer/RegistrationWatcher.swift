import Glibc
import Logging
import MSSOCore

/// Watches the `apps.d` directories with inotify, so that `msso apps allow` or a file shipped by
/// configuration management is in force for the next call, without a signal and without reading
/// any file on the accept path.
///
/// A directory that does not exist yet is watched through its nearest existing ancestor, for the
/// creation of the next directory on the way; once a new directory is watched, the registrations
/// are read again, since files may have landed in it before the watch did.
final class RegistrationWatcher: ReactorHandler {
    let fd: Int32
    private let rules: Rules
    private let logger: Logger
    /// Watch descriptor → the directory it watches, and (for an ancestor) the one name in it
    /// that matters.
    private var watches: [Int32: (path: String, awaiting: String?)] = [:]
    var onChange: () -> Void = {}
    /// A change arrived while a reload was running: read again once it is done.
    var changedAgain = false

    init?(rules: Rules, logger: Logger) {
        fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else {
            logger.warning("no inotify: app registrations are read again only on SIGHUP")
            return nil
        }
        self.rules = rules
        self.logger = logger
        _ = watchNewDirectories()
    }

    deinit { close(fd) }

    /// Watches each wanted directory, or the nearest existing ancestor of one that does not exist.
    /// Returns true when a wanted directory got its watch just now.
    func watchNewDirectories() -> Bool {
        var added = false
        let watched = Set(watches.values.filter { $0.awaiting == nil }.map(\.path))
        for directory in rules.watchedDirectories where !watched.contains(directory) {
            let full = UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF)
            let descriptor = inotify_add_watch(fd, directory, full | UInt32(IN_ONLYDIR))
            if descriptor >= 0 {
                watches[descriptor] = (directory, nil)
                added = true
                continue
            }
            // Not there yet: watch the closest ancestor that is, for the next step's creation.
            var child = directory
            var parent = AdminFiles.parent(of: directory)
            while parent != child {
                let step = String(child.dropFirst(parent == "/" ? 1 : parent.count + 1))
                let descriptor = inotify_add_watch(fd, parent, UInt32(IN_CREATE | IN_MOVED_TO | IN_ONLYDIR))
                if descriptor >= 0 {
                    if watches[descriptor] == nil { watches[descriptor] = (parent, step) }
                    break
                }
                child = parent
                parent = AdminFiles.parent(of: parent)
            }
        }
        return added
    }

    func ready(_ events: UInt32) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var changed = false
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            var offset = 0
            let header = MemoryLayout<inotify_event>.size
            while offset + header <= count {
                let (descriptor, mask, length) = buffer.withUnsafeBytes { bytes in
                    (bytes.load(fromByteOffset: offset, as: Int32.self), bytes.load(fromByteOffset: offset + 4, as: UInt32.self),
                     Int(bytes.load(fromByteOffset: offset + 12, as: UInt32.self)))
                }
                let name = buffer[(offset + header)..<min(offset + header + length, count)].prefix { $0 != 0 }
                offset += header + length
                if mask & UInt32(IN_IGNORED) != 0 {
                    watches[descriptor] = nil // gone (its directory was removed): watched anew below
                    changed = true
                    continue
                }
                guard let watch = watches[descriptor] else { continue }
                if let awaiting = watch.awaiting, String(decoding: name, as: UTF8.self) != awaiting { continue }
                changed = true
            }
        }
        if changed { onChange() }
    }
}
