import Foundation
import MSSOClient

// The Logout app: one action that logs the user out of every app of every suite.
do {
    let sso = try await SSOClient.connect(clientName: "Logout")
    let ended = try await sso.logoutAll()
    print("[Logout] " + (ended.isEmpty ? "no session was active" : "ended the SSO session of \(ended.joined(separator: ", "))"))
    await sso.close()
} catch let error as BrokerError {
    print("[Logout] \(error.message)")
    exit(1)
}
