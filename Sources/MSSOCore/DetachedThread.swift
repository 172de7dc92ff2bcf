import Glibc

/// Detached threads for blocking work (the reactor itself, identifying a new process, a request to
/// an identity provider, a browser login's loopback listener, the notifier's main loop), without
/// Foundation (and not named `Thread`, which is Foundation's).
public enum DetachedThread {
    private final class Body {
        let run: () -> Void
        init(_ run: @escaping () -> Void) { self.run = run }
    }

    /// Runs `body` on a new detached thread; false when no thread could be made.
    @discardableResult
    public static func start(_ body: @escaping () -> Void) -> Bool {
        let box = Unmanaged.passRetained(Body(body)).toOpaque()
        var thread = pthread_t()
        let status = pthread_create(&thread, nil, { argument in
            Unmanaged<Body>.fromOpaque(argument!).takeRetainedValue().run()
            return nil
        }, box)
        guard status == 0 else {
            Unmanaged<Body>.fromOpaque(box).release()
            return false
        }
        pthread_detach(thread)
        return true
    }
}
