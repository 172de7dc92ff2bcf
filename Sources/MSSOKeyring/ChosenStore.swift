import FoundationEssentials
import Synchronization
import MSSOCore
import MSSOProtocol

/// The store `store` in msso.toml(5) names: the Secret Service, the kernel keyring, or (`auto`)
/// one of them, found when mssod starts.
///
/// Chosen once (mssod asks as it starts) and kept for the daemon's life: a session
/// stored in one place must not vanish because another appeared (a keyring unlocked later, a
/// desktop session started after an SSH one). So `auto` takes a Secret Service that is there
/// unless it is locked and holds nothing of msso's (over SSH, D-Bus activation starts a keyring
/// nobody can unlock: sessions then go to the kernel keyring); a locked one that holds msso's
/// items keeps them, and the user is asked to unlock it, as is one that is slow to answer.
///
/// Nor must a session vanish because its keyring is gone for a while: a Secret Service that died
/// (or was started again locked, when it shows no items at all) or a session bus that is down
/// would read as "no session here" in the kernel keyring. So once `auto` has taken the Secret
/// Service, a file in msso's state directory (``marker``) says so, and later starts keep to it
/// whatever they find: the user is told to start or unlock the keyring, or to choose.
public final class ChosenStore: CredentialStore, KeyStore, KeyringProbe, StoreDescribing, Sendable {
    public let preference: StorePreference
    /// The file that chose, for the reason given (nil: nobody did, `auto` by default).
    let chosenIn: String?
    let secretService: SecretServiceStore
    let kernel: KernelKeyringStore
    /// The file that says `auto` took the Secret Service (nil: none is kept, in tests).
    let marker: String?
    private let choice = Mutex<Task<Choice, Never>?>(nil)

    /// What the marker holds: anything else is no marker.
    static let markerText = "secret-service\n"

    struct Choice: Sendable {
        var kind: StoreDescription.Kind
        var reason: String
    }

    public init(_ preference: StorePreference, chosenIn: String?, secretService: SecretServiceStore,
                kernel: KernelKeyringStore = KernelKeyringStore(), marker: String? = nil) {
        self.preference = preference
        self.chosenIn = chosenIn
        self.secretService = secretService
        self.kernel = kernel
        self.marker = marker
    }

    private func chosen() async -> Choice {
        let task = choice.withLock { task in
            if let task { return task }
            let made = Task { await self.choose() }
            task = made
            return made
        }
        return await task.value
    }

    private func choose() async -> Choice {
        let file = chosenIn.map { " in \($0)" } ?? ""
        switch preference {
        case .secretService:
            return Choice(kind: .secretService, reason: "`store = \"secret-service\"`\(file)")
        case .kernel:
            return Choice(kind: .kernel, reason: "`store = \"kernel\"`\(file)")
        case .auto:
            let auto = "`store = \"auto\"`\(file) and "
            let found = await secretService.presence()
            switch found {
            case .unlocked:
                remember()
                return Choice(kind: .secretService, reason: auto + "a Secret Service answers on the session bus, its default keyring unlocked")
            case .locked(holdsSessions: true):
                remember()
                return Choice(kind: .secretService, reason: auto + "the Secret Service's default keyring holds msso's sessions, locked: unlock it")
            case .silent:
                return Choice(kind: .secretService, reason: auto + "a Secret Service is on the session bus, though it did not answer in time")
            case .foreign(let why):
                // Never another user's keyring, whatever msso used before.
                return Choice(kind: .kernel, reason: auto + "\(why) (when mssod started)")
            case .locked(holdsSessions: false), .absent:
                if let marker, remembered() {
                    let now = found == .absent ? "no Secret Service answers on the session bus now" : "the Secret Service's default keyring is locked now"
                    return Choice(kind: .secretService, reason: auto + "msso keeps its sessions in the Secret Service (\(marker) says so), though \(now): start or unlock your keyring; to keep sessions in the kernel keyring instead, set `store = \"kernel\"` (sessions in the keyring are then not used)")
                }
                return Choice(kind: .kernel, reason: auto + (found == .absent
                    ? "no Secret Service answers on the session bus (when mssod started)"
                    : "the Secret Service's default keyring is locked and holds none of msso's items (when mssod started)"))
            }
        }
    }

    /// Whether the marker says `auto` took the Secret Service before. Read as hostile (the state
    /// directory is the user's programs' too): a link, a FIFO or anything but the one line is none.
    private func remembered() -> Bool {
        guard let marker, case .success(let data?) = StateFile.read(marker, maximumSize: 64) else { return false }
        return data == Data(Self.markerText.utf8)
    }

    /// Writes the marker (once: it is never taken back, since sessions may be in the keyring).
    private func remember() {
        guard let marker, !remembered() else { return }
        _ = StateFile.write(Data(Self.markerText.utf8), to: marker)
    }

    private func store() async -> any CredentialStore & KeyStore & KeyringProbe {
        await chosen().kind == .secretService ? secretService : kernel
    }

    public func describe() async -> StoreDescription {
        let choice = await chosen()
        let place = choice.kind == .secretService
            ? "the desktop keyring (the Secret Service's default collection)" : KernelKeyringStore.place()
        return StoreDescription(kind: choice.kind, place: place, reason: choice.reason)
    }

    public func load(group: String) async throws -> Credential? { try await store().load(group: group) }
    public func save(_ credential: Credential, group: String) async throws { try await store().save(credential, group: group) }
    @discardableResult
    public func delete(group: String) async throws -> Bool { try await store().delete(group: group) }
    public func storedAccounts(group: String) async throws -> [String] { try await store().storedAccounts(group: group) }
    public func loadKey(group: String) async throws -> StoredKey? { try await store().loadKey(group: group) }
    public func saveKey(_ key: StoredKey, group: String) async throws { try await store().saveKey(key, group: group) }
    public func probe() async -> BrokerError? { await store().probe() }
    public func cannotSave(_ credential: Credential, group: String) async -> BrokerError? {
        await chosen().kind == .secretService ? await secretService.probe() : await kernel.cannotSave(credential, group: group)
    }
}
