package msso

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeBroker speaks just enough of the protocol to test the client's own work: hello, then each
// call handed to answer, which writes what it likes.
type fakeBroker struct {
	path     string
	listener net.Listener
	answer   func(w *fakeConn, serial uint32, method string, args json.RawMessage)
	mu       sync.Mutex
	accepted int
}

type fakeConn struct {
	net.Conn
	mu sync.Mutex
}

func (w *fakeConn) send(message any) {
	payload, _ := json.Marshal(message)
	data := binary.BigEndian.AppendUint32(nil, uint32(len(payload)))
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.Write(append(data, payload...))
}

func newFakeBroker(t *testing.T, answer func(w *fakeConn, serial uint32, method string, args json.RawMessage)) *fakeBroker {
	path := filepath.Join(t.TempDir(), "broker.sock")
	listener, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeBroker{path: path, listener: listener, answer: answer}
	t.Cleanup(func() { listener.Close() })
	go func() {
		for {
			c, err := listener.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.accepted++
			f.mu.Unlock()
			go f.serve(&fakeConn{Conn: c})
		}
	}()
	return f
}

func (f *fakeBroker) serve(w *fakeConn) {
	defer w.Close()
	for {
		var header [4]byte
		if _, err := io.ReadFull(w, header[:]); err != nil {
			return
		}
		payload := make([]byte, binary.BigEndian.Uint32(header[:]))
		if _, err := io.ReadFull(w, payload); err != nil {
			return
		}
		var call struct {
			Serial uint32
			Method string
			Args   json.RawMessage
		}
		_ = json.Unmarshal(payload, &call)
		if call.Method == "hello" {
			w.send(map[string]any{"type": "reply", "serial": call.Serial, "result": map[string]any{
				"version": 1, "daemon": "fake", "peer": map[string]any{"uid": 1, "pid": 2}}})
			continue
		}
		f.answer(w, call.Serial, call.Method, call.Args)
	}
}

func TestRepliesAreMatchedToCallsBySerial(t *testing.T) {
	// Holds every ping until 16 are in, then answers them in reverse order.
	var mu sync.Mutex
	var held []func()
	broker := newFakeBroker(t, func(w *fakeConn, serial uint32, method string, args json.RawMessage) {
		var ping struct{ Data string }
		_ = json.Unmarshal(args, &ping)
		mu.Lock()
		defer mu.Unlock()
		held = append(held, func() {
			w.send(map[string]any{"type": "reply", "serial": serial, "result": map[string]string{"data": ping.Data}})
		})
		if len(held) == 16 {
			for i := len(held) - 1; i >= 0; i-- {
				held[i]()
			}
		}
	})
	client := NewClient(broker.path)
	defer client.Close()
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			data := fmt.Sprint("ping ", i)
			if got, err := client.Ping(context.Background(), data); err != nil || got != data {
				t.Errorf("%q: %q, %v", data, got, err)
			}
		}(i)
	}
	wg.Wait()
	if broker.accepted != 1 {
		t.Fatalf("%d connections for one client", broker.accepted)
	}
}

func TestAnIdleConnectionClosedByTheDaemonIsOpenedAgain(t *testing.T) {
	// The first connection's first call is met with what mssod says as it closes an idle
	// connection; the call is carried out once more on a new one.
	first := true
	broker := newFakeBroker(t, func(w *fakeConn, serial uint32, method string, args json.RawMessage) {
		if first {
			first = false
			w.send(map[string]any{"type": "error", "serial": 0, "error": "TimedOut", "message": "idle for 10 minutes"})
			w.Close()
			return
		}
		w.send(map[string]any{"type": "reply", "serial": serial, "result": map[string]string{"data": "again"}})
	})
	client := NewClient(broker.path)
	defer client.Close()
	if got, err := client.Ping(context.Background(), "x"); err != nil || got != "again" || broker.accepted != 2 {
		t.Fatalf("%q %v, %d connections", got, err, broker.accepted)
	}
}

func TestSignalsArriveOnTheSubscriptionAndItEndsWithTheConnection(t *testing.T) {
	broker := newFakeBroker(t, func(w *fakeConn, serial uint32, method string, args json.RawMessage) {
		w.send(map[string]any{"type": "reply", "serial": serial, "result": map[string]any{"groups": []string{"a", "b"}}})
		for _, group := range []string{"a", "b", "a"} {
			w.send(map[string]any{"type": "signal", "signal": "LoggedOut", "group": group,
				"status": map[string]any{"group": group, "state": "notLoggedIn"}})
		}
		w.Close()
	})
	client := NewClient(broker.path)
	defer client.Close()
	subscription, err := client.Subscribe(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for event := range subscription.Events() {
		seen = append(seen, event.Name+" "+event.Group+" "+string(event.Status.State))
	}
	if fmt.Sprint(seen) != "[LoggedOut a notLoggedIn LoggedOut a notLoggedIn]" {
		t.Fatalf("only group a's signals, in order: %v", seen)
	}
	if !errors.Is(subscription.Err(), ErrBrokerUnreachable) {
		t.Fatalf("the connection's end is the reason: %v", subscription.Err())
	}
}

func TestACallNotAnsweredInTimeIsBrokerUnreachable(t *testing.T) {
	broker := newFakeBroker(t, func(*fakeConn, uint32, string, json.RawMessage) {})
	client := &Client{SocketPath: broker.path, Timeout: 50 * time.Millisecond}
	defer client.Close()
	if _, err := client.Ping(context.Background(), "x"); !errors.Is(err, ErrBrokerUnreachable) {
		t.Fatalf("%v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := client.Ping(ctx, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the context's own error: %v", err)
	}
	if _, err := NewClient(filepath.Join(t.TempDir(), "nothing.sock")).Ping(context.Background(), "x"); !errors.Is(err, ErrBrokerUnreachable) ||
		err.(*Error).ExitStatus() != 3 {
		t.Fatalf("%v", err)
	}
}

func TestASubscriptionLeftUnreadEndsAtItsBound(t *testing.T) {
	// Signals pushed before each ping's reply: 4,096 small ones are kept, then the connection is
	// closed (the ping fails, saying so); 60 KiB ones stop at 1 MiB. (Tests/e2e/hostile_replies.py
	// runs the same bounds, and every hostile reply, against the three libraries.)
	for _, c := range []struct {
		name     string
		username string
		pushed   int
		kept     int
	}{{"small", "", 4096 + 100, 4096}, {"big", strings.Repeat("u", 60000), 100, 17}} {
		t.Run(c.name, func(t *testing.T) {
			broker := newFakeBroker(t, func(w *fakeConn, serial uint32, method string, args json.RawMessage) {
				if method == "ping" {
					for i := 0; i < c.pushed; i++ {
						w.send(map[string]any{"type": "signal", "signal": "Expiring", "group": "a",
							"status": map[string]any{"group": "a", "state": "valid", "username": c.username}})
					}
				}
				w.send(map[string]any{"type": "reply", "serial": serial, "result": map[string]any{"groups": []string{"a"}, "data": "x"}})
			})
			client := &Client{SocketPath: broker.path, Timeout: 10 * time.Second}
			defer client.Close()
			subscription, err := client.Subscribe(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Ping(context.Background(), "x"); !errors.Is(err, ErrBrokerUnreachable) ||
				!strings.Contains(err.Error(), "unread") {
				t.Fatalf("the call in flight fails with the reason: %v", err)
			}
			got := 0
			for range subscription.Events() {
				got++
			}
			if got != c.kept || !errors.Is(subscription.Err(), ErrBrokerUnreachable) {
				t.Fatalf("%d signals then %v; want %d then the reason", got, subscription.Err(), c.kept)
			}
			// A new connection (not subscribed: its signals are dropped) serves the next call.
			if data, err := client.Ping(context.Background(), "x"); err != nil || data != "x" {
				t.Fatal(data, err)
			}
		})
	}
}

func TestTheAccountGoesWithEveryCallAboutOneSession(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	broker := newFakeBroker(t, func(w *fakeConn, serial uint32, method string, args json.RawMessage) {
		var named struct{ Account *string }
		_ = json.Unmarshal(args, &named)
		account := "-"
		if named.Account != nil {
			account = *named.Account
		}
		mu.Lock()
		calls = append(calls, method+" "+account)
		mu.Unlock()
		var result any = map[string]any{"group": "g", "state": "valid", "account": account}
		switch method {
		case "status":
			result = map[string]any{"groups": []any{}}
		case "sign":
			result = map[string]any{"headers": [][]string{}}
		case "token":
			result = map[string]any{"accessToken": "t", "expiresAt": 1, "header": "Bearer"}
		case "logout":
			result = map[string]any{"loggedOut": []string{}}
		case "subscribe":
			result = map[string]any{"groups": []string{"g"}}
		}
		w.send(map[string]any{"type": "reply", "serial": serial, "result": result})
	})
	ctx := context.Background()
	t.Setenv("MSSO_ACCOUNT", "from-env")
	client := &Client{SocketPath: broker.path, Account: "admin"}
	defer client.Close()
	sandbox := client.WithAccount("sandbox")
	fromEnv := client.WithAccount("")
	_, _ = client.Check(ctx, "")
	_, _ = client.Extend(ctx, "")
	_, _ = client.Status(ctx, "")
	_, _ = client.Login(ctx, "", "u", "p")
	_, _ = client.Sign(ctx, SignRequest{URL: "https://a.example/"})
	_, _ = client.Sign(ctx, SignRequest{URL: "https://a.example/", Account: "other"})
	_, _ = client.Token(ctx, TokenRequest{})
	_, _ = sandbox.Token(ctx, TokenRequest{})
	_, _ = sandbox.Check(ctx, "")
	_, _ = fromEnv.Check(ctx, "")
	_, _ = client.Logout(ctx, "")
	_, _ = client.LogoutAll(ctx)
	subscription, _ := sandbox.Subscribe(ctx)
	subscription.Close()
	_ = sandbox.Close() // a view's: the client's connection stays
	_, _ = (&TokenSource{Client: client, Account: "ts"}).Token()
	want := "check admin,extend admin,status -,login admin,sign admin,sign other,token admin,token sandbox,check sandbox," +
		"check from-env,logout admin,logout -,subscribe sandbox,token ts"
	if got := strings.Join(calls, ","); got != want {
		t.Fatalf("calls:\n%s\nwant:\n%s", got, want)
	}
	if broker.accepted != 1 {
		t.Fatalf("%d connections: the views share the client's", broker.accepted)
	}
}
