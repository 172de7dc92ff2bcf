import SuiteKit

// App2 of the example suite: a separate program that shares App1's login through msso.
await SuiteApp(name: "App2").main()
