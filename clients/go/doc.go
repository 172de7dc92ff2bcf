// Package msso is the Go client of msso's broker, mssod: a Go program signs its HTTP requests
// with the single sign-on session of its access group, without ever holding a password or a
// refresh token. It speaks the wire protocol of docs/PROTOCOL.md over the broker's Unix socket,
// with the standard library only.
//
//	client := &msso.Client{}                        // $MSSO_SOCKET, else $XDG_RUNTIME_DIR/msso/broker.sock
//	headers, err := client.Sign(ctx, msso.SignRequest{Method: "GET", URL: "https://api.example.com/items"})
//
//	http := &http.Client{Transport: &msso.Transport{}} // every request signed, in any profile
//
//	source := &msso.TokenSource{Resource: "https://api.example.com/"} // oauth2.TokenSource's shape
//
// Errors the broker answers with are *Error values, named as in the protocol (errors.Is(err,
// msso.ErrNotLoggedIn)), carrying the daemon's sentence and the msso command's exit status.
//
// mssod knows a program by its executable, as the kernel names it: register the compiled program
// (`msso apps allow /usr/local/bin/report --group com.example.suite`) before it can sign.
package msso
