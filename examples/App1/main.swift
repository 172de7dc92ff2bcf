import SuiteKit

// App1 of the example suite: a separate program that shares App2's login through msso.
await SuiteApp(name: "App1").main()
