import MSSOProtocol

extension Broker {
    /// Arms the group's `Expiring` and `Expired` timers for its current window.
    func armExpiryTimer(_ name: String) {
        groups[name]?.expiryTimer?.cancel()
        groups[name]?.expiringTimer?.cancel()
        guard let credential = groups[name]?.credential else { return }
        let delay = credential.endsAt - now()
        guard delay > 0 else { return }
        let clock = self.clock
        groups[name]!.expiryTimer = Task { [weak self] in
            await clock.sleep(delay)
            guard !Task.isCancelled else { return }
            await self?.windowPassed(name)
        }
        let lead = configuration.groups[name]?.expiringLead ?? 0
        guard lead > 0, delay > lead else { return }
        groups[name]!.expiringTimer = Task { [weak self] in
            await clock.sleep(delay - lead)
            guard !Task.isCancelled else { return }
            await self?.windowClosing(name)
        }
    }

    private func windowClosing(_ name: String) {
        guard let credential = groups[name]?.credential, now() < credential.endsAt,
              let config = configuration.groups[name] else { return }
        emit(.expiring, status(credential, config))
    }

    private func windowPassed(_ name: String) {
        guard let credential = groups[name]?.credential else { return }
        guard now() >= credential.endsAt else { return armExpiryTimer(name) }
        logger.info("session expired", metadata: ["group": "\(name)"])
        publish(name)
        if let config = configuration.groups[name] { emit(.expired, status(credential, config)) }
    }
}
