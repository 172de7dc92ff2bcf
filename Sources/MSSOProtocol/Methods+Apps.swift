extension Methods {
    /// The app registrations in force (and the caller as the broker sees it). The user's tools only.
    public enum Apps: BrokerMethod {
        public typealias Arguments = Empty
        public struct Result: Codable, Sendable, Equatable {
            public var caller: CallerDescription
            public var registrations: [AppRegistration]
            /// The user's registrations not in force (the admin defines the name, or user apps are off).
            public var ignored: [AppRegistration]
            /// Whether the admin lets the user register apps.
            public var userApps: Bool
            /// Where the user's registrations live.
            public var userDirectory: String
            public init(caller: CallerDescription, registrations: [AppRegistration], ignored: [AppRegistration],
                        userApps: Bool, userDirectory: String) {
                self.caller = caller
                self.registrations = registrations
                self.ignored = ignored
                self.userApps = userApps
                self.userDirectory = userDirectory
            }
        }
    }
}

/// An app registered for access groups, from an `apps.d` file.
public struct AppRegistration: Equatable, Sendable, Codable {
    public init(name: String, executable: String?, sha256: String?, flatpak: String?, groups: [String], source: String, admin: Bool) {
        self.name = name
        self.executable = executable
        self.sha256 = sha256
        self.flatpak = flatpak
        self.groups = groups
        self.source = source
        self.admin = admin
    }

    public var name: String
    /// The executable's path, symlinks resolved (as the kernel reports a running one).
    public var executable: String?
    /// Pins the executable's content: lowercase hex SHA-256.
    public var sha256: String?
    public var flatpak: String?
    public var groups: [String]
    /// `FILE:LINE` of the definition.
    public var source: String
    /// True when it comes from the admin's directory.
    public var admin: Bool
    /// Each new program that asks this app for a token or a signature (the program that ran it,
    /// as the kernel names it) must be allowed by the user, in a desktop notification (`confirm =
    /// true`, like `ssh-add -c`). Nil: no.
    public var confirm: Bool?
    /// The scopes this app's tokens and signatures are minted with, a subset of each group's
    /// (`scopes = [...]`). Nil: the group's own token.
    public var scopes: [String]?
    /// The account of its groups this app always acts as (`account = "NAME"`): a call naming
    /// none gets it, a call naming another is refused. Nil: whichever the call names.
    public var account: String?
}

/// The caller as the broker recognises it, answered by `apps`.
public struct CallerDescription: Codable, Sendable, Equatable {
    public var executable: String?
    public var flatpak: String?
    public var unit: String?
    /// The registrations the caller matches.
    public var apps: [String]
    /// The groups it may use (every group for the user's own tools).
    public var groups: [String]

    public init(executable: String?, flatpak: String?, unit: String?, apps: [String], groups: [String]) {
        self.executable = executable
        self.flatpak = flatpak
        self.unit = unit
        self.apps = apps
        self.groups = groups
    }
}
