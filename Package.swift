// swift-tools-version:6.0
import PackageDescription

// One target per responsibility; see docs/ARCHITECTURE.md for how they fit together.
let package = Package(
    name: "msso",
    products: [
        .library(name: "MSSOClient", targets: ["MSSOClient"]),
        .library(name: "MSSOClientFoundation", targets: ["MSSOClientFoundation"]),
        .executable(name: "mssod", targets: ["mssod"]),
        .executable(name: "mssod-idp", targets: ["mssod-idp"]),
        .executable(name: "msso", targets: ["msso"]),
        .executable(name: "msso-logout", targets: ["msso-logout"]),
        .executable(name: "git-credential-msso", targets: ["git-credential-msso"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
    ],
    targets: [
        // Wire protocol: message types, error names, framing. Shared by daemon, CLI and client.
        // Optimised in debug builds too: its byte loops (every frame's JSON, read and written) run
        // about 20 times slower unoptimised, which the tests' 600 MB floods spent minutes on.
        .target(name: "MSSOProtocol", swiftSettings: [.unsafeFlags(["-O"], .when(configuration: .debug))]),
        // The library apps and the commands link: blocking calls with deadlines, and an async
        // client over the same socket code. No event loop, nothing of Foundation beyond Essentials.
        .target(name: "MSSOClient", dependencies: ["MSSOProtocol", "CMSSOSystem"]),
        // `URLRequest` signing, for apps that already use Foundation's networking.
        .target(name: "MSSOClientFoundation", dependencies: ["MSSOClient"]),
        // Broker logic: sessions, the two clocks, config, dispatch. Storage and IdP behind protocols.
        .target(name: "MSSOCore", dependencies: [
            "MSSOProtocol", "MSSOSigning",
            // The monotonic clock for the pool's timers.
            "CMSSOSystem",
            // PBKDF2 for the lock's passphrase hash.
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "CryptoExtras", package: "swift-crypto"),
            .product(name: "Logging", package: "swift-log"),
        ], swiftSettings: [
            // Debug builds (the tests') take the administrator's directory from $MSSO_SYSTEM_DIR;
            // a release build reads /etc/msso and nothing else (Configuration.swift).
            .define("MSSO_TEST_PATHS", .when(configuration: .debug)),
        ]),
        // The stores: the Secret Service (libsecret), the kernel keyring (keyctl), the choice between them.
        .systemLibrary(name: "CLibSecret", pkgConfig: "libsecret-1",
                       providers: [.apt(["libsecret-1-dev"])]),
        .target(name: "MSSOKeyring", dependencies: ["CLibSecret", "CMSSOSystem", "MSSOCore", "MSSOProtocol"]),
        // Desktop notifications (freedesktop Notifications over GDBus, which libsecret already loads).
        .systemLibrary(name: "CDesktopBus", pkgConfig: "gio-2.0", providers: [.apt(["libglib2.0-dev"])]),
        .target(name: "MSSODesktop", dependencies: ["CDesktopBus", "CMSSOSystem", "MSSOCore", "MSSOProtocol",
                                                    .product(name: "Logging", package: "swift-log")]),
        // The audit log: who asked for what, in SQLite (libsqlite3).
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .target(name: "MSSOAudit", dependencies: ["CSQLite", "MSSOCore", "MSSOProtocol", .product(name: "Logging", package: "swift-log")]),
        // Request signing: RFC 9421 message signatures, RFC 9449 DPoP proofs. Pure functions (the
        // protocol module for its JSON strings and trimming, written once).
        .target(name: "MSSOSigning", dependencies: ["MSSOProtocol", .product(name: "Crypto", package: "swift-crypto")]),
        // OpenID Connect / OAuth 2.0 client flows, over mssod-idp; the browser login's loopback listener.
        .target(name: "MSSOIdentity", dependencies: [
            "MSSOCore", "MSSOSigning", "CMSSOSystem",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Crypto", package: "swift-crypto"),
            // RSA: private_key_jwt client assertions (RS256) and ID token signatures (RS/PS).
            .product(name: "CryptoExtras", package: "swift-crypto"),
        ]),
        // The Unix-socket server: its own epoll loop, each call judged by the process that sent it.
        .target(name: "MSSOServer", dependencies: [
            "MSSOCore", "MSSOProtocol", "CMSSOSystem",
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // recvmsg with credentials, pidfds, statx, epoll: system calls Swift cannot make directly.
        .target(name: "CMSSOSystem"),
        .executableTarget(name: "mssod", dependencies: [
            "CMSSOSystem", "MSSOServer", "MSSOCore", "MSSOKeyring", "MSSOIdentity", "MSSOAudit", "MSSODesktop",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        // HTTP to identity providers, one request a process: C over the system's libcurl
        // (Debian's libcurl4-gnutls-dev), so that mssod maps neither it nor its TLS libraries.
        .executableTarget(name: "mssod-idp", dependencies: ["CMSSOSystem"], linkerSettings: [.linkedLibrary("curl-gnutls")]),
        .executableTarget(name: "msso", dependencies: [
            "MSSOClient", "CMSSOSystem",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        .executableTarget(name: "msso-logout", dependencies: [
            "MSSOClient",
            .product(name: "ArgumentParser", package: "swift-argument-parser"),
        ]),
        // git's credential helper (gitcredentials(7)): a fresh access token as the password.
        .executableTarget(name: "git-credential-msso", dependencies: ["MSSOClient"]),

        // Example apps of one suite, sharing one login (examples/README.md).
        .target(name: "SuiteKit", dependencies: ["MSSOClientFoundation"], path: "examples/SuiteKit"),
        .executableTarget(name: "App1", dependencies: ["SuiteKit"], path: "examples/App1"),
        .executableTarget(name: "App2", dependencies: ["SuiteKit"], path: "examples/App2"),
        .executableTarget(name: "Logout", dependencies: ["MSSOClient"], path: "examples/Logout"),

        // swift-crypto here only to check BodyDigest against it.
        .testTarget(name: "MSSOProtocolTests", dependencies: ["MSSOProtocol", .product(name: "Crypto", package: "swift-crypto")]),
        // The broker's tests, and the dispatcher's (MSSOServer), which drive the broker through the same fakes.
        .testTarget(name: "MSSOCoreTests", dependencies: ["MSSOCore", "MSSOServer"]),
        .testTarget(name: "MSSOAuditTests", dependencies: ["MSSOAudit", "CSQLite"]),
        .testTarget(name: "MSSOSigningTests", dependencies: ["MSSOSigning"]),
        .testTarget(name: "MSSOIdentityTests", dependencies: [
            "MSSOIdentity", "MSSOCore", "MSSOProtocol", "MSSOSigning", "CMSSOSystem",
            // Keys and tokens made in the test, to check the ID token verifier.
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "CryptoExtras", package: "swift-crypto"),
        ]),
        .testTarget(name: "MSSOServerTests", dependencies: ["MSSOServer", "MSSOCore", "MSSOProtocol", "CMSSOSystem"]),
    ]
)
