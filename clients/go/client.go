package msso

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultTimeout bounds a call when Client.Timeout is zero (the Swift and Python clients' default).
const DefaultTimeout = 20 * time.Second

// slowTimeout is the least a lock or unlock may take: a wrong passphrase is answered up to 60 s late.
const slowTimeout = 90 * time.Second

// Client is one connection to the user's broker, mssod, opened (with hello) at the first call.
// Its zero value is ready to use. Goroutines may share it: calls are matched to their replies by
// serial, on one connection, read by a goroutine of its own. A call that finds the connection
// gone (mssod closes idle ones after 10 minutes, or was restarted) opens a new one; a call in
// flight when it went fails with ErrBrokerUnreachable, and its subscriptions end.
//
// mssod knows the caller by its executable as the kernel reports it, never by what the client
// says: a compiled Go program is its own executable, so registering it names exactly that program.
//
// Whatever the broker sends, a call returns an *Error (or the context's error), never panics: a
// frame or an answer that is not the protocol is ErrInternal, naming what, and closes the
// connection (the next call opens another). A subscription keeps at most 4,096 unread signals (1
// MiB of them): past that the connection is closed, and the subscription ends saying so.
type Client struct {
	// SocketPath is the broker's socket; "" means DefaultSocketPath().
	SocketPath string
	// Name labels the connection in the daemon's log (hello's `client`); never used for identity.
	Name string
	// Timeout bounds each call, on top of its context: 0 means DefaultTimeout, negative none.
	// Logins that wait for the user are bounded by the daemon and the context only.
	Timeout time.Duration
	// Account is the account of each group the calls act as (`msso login --account NAME`), unless
	// a request names another: "" means $MSSO_ACCOUNT (read at each call), else the daemon's
	// choice (the program's registration's `account`, else the group's default account). Status
	// lists every account whatever it is, as `msso status` does.
	Account string

	mu     sync.Mutex
	conn   *conn
	hello  Hello
	closed bool
	base   *Client // a view's (WithAccount): the client whose connection it uses
}

// NewClient returns a client of the broker listening on socketPath ("" for the default).
func NewClient(socketPath string) *Client {
	return &Client{SocketPath: socketPath}
}

// WithAccount returns a client that acts as the named account of each group ("": as Account
// says), on c's connection: for a program that works as two accounts, each call as the one it
// names, without a connection for each. Its Timeout is c's; closing it does nothing (close c).
func (c *Client) WithAccount(account string) *Client {
	base := c
	if c.base != nil {
		base = c.base
	}
	return &Client{SocketPath: base.SocketPath, Name: base.Name, Timeout: c.Timeout, Account: account, base: base}
}

// account is what the client's calls name: Account, else $MSSO_ACCOUNT ("": none, the daemon's choice).
func (c *Client) account() string {
	if c.Account != "" {
		return c.Account
	}
	return os.Getenv("MSSO_ACCOUNT")
}

// Hello says hello if the client is not connected yet, and returns the daemon's answer: its
// version and how it sees this process (Peer.Executable is what registrations are matched against).
func (c *Client) Hello(ctx context.Context) (Hello, error) {
	if c.base != nil {
		return c.base.Hello(ctx)
	}
	if _, err := c.connection(ctx); err != nil {
		return Hello{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hello, nil
}

// Close closes the connection: pending calls fail, subscriptions end. Later calls fail too. On a
// client made by WithAccount it does nothing.
func (c *Client) Close() error {
	if c.base != nil {
		return nil
	}
	c.mu.Lock()
	c.closed = true
	cn := c.conn
	c.conn = nil
	c.mu.Unlock()
	if cn != nil {
		cn.end(errClosed)
	}
	return nil
}

var errClosed = unreachable("this msso client was closed")

// Call calls any method by name, with args (nil: {}) encoded as JSON and the reply's result
// decoded into result (nil: ignored; a *json.RawMessage gets it as it came). The verbs are
// wrappers of it; it is here for a method this library does not know yet.
func (c *Client) Call(ctx context.Context, method string, args, result any) error {
	return c.call(ctx, method, args, result, c.timeout(), nil)
}

func (c *Client) timeout() time.Duration {
	if c.Timeout == 0 {
		return DefaultTimeout
	}
	return c.Timeout
}

func (c *Client) call(ctx context.Context, method string, args, result any, timeout time.Duration,
	prompt func(*loginPrompt)) error {
	for attempt := 0; ; attempt++ {
		cn, err := c.connection(ctx)
		if err != nil {
			return err
		}
		err = cn.roundTrip(ctx, method, args, result, timeout, prompt)
		var lost *connectionEnded
		if errors.As(err, &lost) {
			// The daemon closed the connection for idleness (or a frame that came too slowly)
			// before it read this call, so the call was not carried out: once more, on a new one.
			if attempt == 0 && lost.reason.Name == "TimedOut" {
				continue
			}
			return lost.reason
		}
		return err
	}
}

// connection is the open connection, opened (and hello said) first if there is none.
func (c *Client) connection(ctx context.Context) (*conn, error) {
	if c.base != nil {
		return c.base.connection(ctx)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	if c.conn != nil && !c.conn.ended() {
		return c.conn, nil
	}
	path := c.SocketPath
	if path == "" {
		path = DefaultSocketPath()
	}
	cn, hello, err := dial(ctx, path, c.label(), c.timeout())
	if err != nil {
		return nil, err
	}
	c.conn, c.hello = cn, hello
	return cn, nil
}

func (c *Client) label() string {
	if c.Name != "" {
		return c.Name
	}
	program := "go"
	if executable, err := os.Executable(); err == nil {
		program = filepath.Base(executable)
	}
	return "msso.go (" + program + ")"
}

func dial(ctx context.Context, path, label string, timeout time.Duration) (*conn, Hello, error) {
	dialer := net.Dialer{}
	if timeout > 0 {
		dialer.Timeout = timeout
	}
	sock, err := dialer.DialContext(ctx, "unix", path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, Hello{}, ctx.Err()
		}
		switch {
		case errors.Is(err, syscall.EACCES):
			return nil, Hello{}, unreachable("no permission to talk to the msso broker at %s: it is another user's", path)
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, Hello{}, unreachable("the msso broker did not accept the connection in %s (%s); is mssod stuck? "+
				"`systemctl --user restart msso.service`", timeout, path)
		}
		return nil, Hello{}, unreachable("the msso broker is not running (nothing answers on %s); start it with "+
			"`systemctl --user start msso.socket` or `mssod`", path)
	}
	if err := checkPeer(sock.(*net.UnixConn), path); err != nil {
		sock.Close()
		return nil, Hello{}, err
	}
	cn := &conn{sock: sock.(*net.UnixConn), path: path, pending: map[uint32]*pending{}, subs: map[*Subscription]bool{},
		done: make(chan struct{})}
	go cn.read()
	var hello Hello
	err = cn.roundTrip(ctx, methodHello, map[string]any{"version": ProtocolVersion, "client": label}, &hello, timeout, nil)
	if err != nil {
		cn.end(errClosed)
		var lost *connectionEnded
		if errors.As(err, &lost) {
			err = lost.reason
		}
		return nil, Hello{}, err
	}
	return cn, hello, nil
}

// conn is one connection to the daemon, and the goroutine that reads it.
type conn struct {
	sock *net.UnixConn
	path string

	writing sync.Mutex // one frame at a time on the socket

	mu       sync.Mutex
	serial   uint32
	pending  map[uint32]*pending // nil once ended
	subs     map[*Subscription]bool
	stray    *Error // the last serial-0 error: why the daemon is closing the connection
	watching bool   // watch runs
	reason   *Error // why it ended, once done is closed
	done     chan struct{}
}

// pending is a call waiting for its answer (the frame, which the caller decodes) and, for a
// login, its prompt.
type pending struct {
	answer   chan answer // a nil payload once its deadline passed
	prompts  chan *loginPrompt
	deadline time.Time // zero: none
}

// connectionEnded is a call's failure because its connection ended before the answer came.
type connectionEnded struct{ reason *Error }

func (e *connectionEnded) Error() string { return e.reason.Error() }

func (cn *conn) ended() bool {
	select {
	case <-cn.done:
		return true
	default:
		return false
	}
}

func (cn *conn) roundTrip(ctx context.Context, method string, args, result any, timeout time.Duration,
	show func(*loginPrompt)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cn.mu.Lock()
	if cn.pending == nil {
		cn.mu.Unlock()
		return &connectionEnded{cn.reason}
	}
	// Unique among pending calls is all the protocol asks; 0 means "no call".
	for cn.serial++; cn.serial == 0 || cn.pending[cn.serial] != nil; cn.serial++ {
	}
	serial := cn.serial
	p := &pending{answer: make(chan answer, 1)}
	if show != nil {
		p.prompts = make(chan *loginPrompt, 4) // the daemon sends one; more are dropped
	}
	if timeout > 0 {
		p.deadline = time.Now().Add(timeout)
		if !cn.watching {
			cn.watching = true
			go cn.watch()
		}
	}
	cn.pending[serial] = p
	cn.mu.Unlock()

	data, err := frame(serial, method, args)
	if err != nil {
		cn.forget(serial)
		return err
	}
	cn.write(data)
	for {
		select {
		case a := <-p.answer:
			return cn.answered(a, method, timeout, result)
		case m := <-p.prompts:
			show(m)
		case <-cn.done:
			select {
			case a := <-p.answer: // it came just before the end
				return cn.answered(a, method, timeout, result)
			default:
				return &connectionEnded{cn.reason}
			}
		case <-ctx.Done():
			cn.forget(serial)
			return ctx.Err()
		}
	}
}

// answered decodes a call's answer; none (nil) means its deadline passed. An answer that is not
// the protocol closes the connection.
func (cn *conn) answered(a answer, method string, timeout time.Duration, result any) error {
	if a.payload == nil {
		return unreachable("the msso broker did not answer %s in %s; is mssod stuck? "+
			"`systemctl --user restart msso.service`", method, timeout)
	}
	err := decodeAnswer(a, result)
	if m, ok := err.(*malformed); ok {
		return cn.broken("an answer to " + method + " in which " + m.what)
	}
	return err
}

// broken ends the connection because the broker sent something that is not the protocol: the
// stream can no longer be trusted. The error names what, and is the one its calls fail with.
func (cn *conn) broken(what string) *Error {
	err := &Error{Name: "Internal", Message: fmt.Sprintf("the msso broker at %s sent %s: not the protocol "+
		"(docs/PROTOCOL.md); is the real mssod listening there?", cn.path, what)}
	cn.end(err)
	return err
}

// watchInterval is how often a connection's calls are checked against their deadlines.
const watchInterval = 100 * time.Millisecond

// watch fails the calls that passed their deadline (Client.Timeout), while any call has one:
// one ticker per connection rather than a timer per call, which would cost the hot path more
// than the rest of the client's work (a call may so be failed up to watchInterval late).
func (cn *conn) watch() {
	ticker := time.NewTicker(watchInterval)
	defer ticker.Stop()
	for {
		select {
		case <-cn.done:
			return
		case now := <-ticker.C:
			cn.mu.Lock()
			waiting := false
			for serial, p := range cn.pending {
				if p.deadline.IsZero() {
					continue
				}
				if now.After(p.deadline) {
					delete(cn.pending, serial)
					p.answer <- answer{} // buffered, and no answer can come any more: never blocks
				} else {
					waiting = true
				}
			}
			if !waiting {
				cn.watching = false
				cn.mu.Unlock()
				return
			}
			cn.mu.Unlock()
		}
	}
}

// write sends one frame. A failure means the daemon closed the connection: the reader sees the
// end, and the reason the daemon gave before closing (Busy at its connection cap, say).
func (cn *conn) write(data []byte) {
	cn.writing.Lock()
	_, err := cn.sock.Write(data)
	cn.writing.Unlock()
	if err != nil {
		_ = cn.sock.CloseWrite()
	}
}

// forget drops a call given up on: a reply that comes later finds no pending serial.
func (cn *conn) forget(serial uint32) {
	cn.mu.Lock()
	if cn.pending != nil {
		delete(cn.pending, serial)
	}
	cn.mu.Unlock()
}

func (cn *conn) read() {
	in := bufio.NewReaderSize(cn.sock, 16384)
	var header [4]byte
	for {
		if _, err := io.ReadFull(in, header[:]); err != nil {
			cn.end(lostConnection)
			return
		}
		length := binary.BigEndian.Uint32(header[:])
		if length > maxFrame {
			cn.broken(fmt.Sprintf("a frame of %d bytes, over the protocol's %d", length, maxFrame))
			return
		}
		payload := make([]byte, length)
		if _, err := io.ReadFull(in, payload); err != nil {
			cn.end(lostConnection)
			return
		}
		if m := checkFrame(payload); m != nil {
			cn.broken(m.what)
			return
		}
		// A reply goes to its caller undecoded (peek reads its type, serial and the first byte
		// of its result); anything else is decoded here.
		if kind, serial, result, ok := peek(payload); ok && (kind == "reply" || kind == "error" && serial != 0) {
			cn.answer(serial, answer{payload, result})
			continue
		}
		var m message
		if err := json.Unmarshal(payload, &m); err != nil {
			what := readErr(err).what // a clause: "the frame is not JSON", "`type` is a number, …"
			if strings.HasPrefix(what, "the frame is") {
				what = "a frame that is" + strings.TrimPrefix(what, "the frame is")
			} else {
				what = "a message in which " + what
			}
			cn.broken(what)
			return
		}
		if m := cn.dispatch(&m, payload); m != nil {
			cn.broken(m.what)
			return
		}
		if cn.ended() { // (signals left unread past the bound)
			return
		}
	}
}

// answer hands a reply to the call waiting for it; one nobody waits for any more is dropped.
func (cn *conn) answer(serial uint32, a answer) {
	cn.mu.Lock()
	p := cn.pending[serial]
	delete(cn.pending, serial)
	cn.mu.Unlock()
	if p != nil {
		p.answer <- a // buffered: never blocks
	}
}

var lostConnection = unreachable("the connection to the msso broker was lost; is mssod still running?")

// dispatch files a message other than a reply peek followed, checked as every library checks
// it (the type, serial, names; a prompt or a status where it is used); what is not the protocol
// is returned.
func (cn *conn) dispatch(m *message, payload []byte) *malformed {
	if m.Type == nil {
		return &malformed{"a message without a type"}
	}
	switch *m.Type {
	case "reply", "error":
		serial, ok := serialOf(m.Serial)
		switch {
		case !ok && *m.Type == "reply":
			return &malformed{fmt.Sprintf("a reply without a serial from 0 to %d", uint32(math.MaxUint32))}
		case !ok:
			return &malformed{fmt.Sprintf("an error without a serial from 0 to %d", uint32(math.MaxUint32))}
		case *m.Type == "reply" && m.Result == nil:
			return &malformed{"a reply without a result"}
		case *m.Type == "error" && (m.Error == nil || m.Message == nil):
			return &malformed{"an error without a name or a message"}
		case *m.Type == "error" && serial == 0:
			cn.mu.Lock()
			cn.stray = errorOf(*m.Error, *m.Message)
			cn.mu.Unlock()
		default:
			var result byte
			if len(m.Result) > 0 {
				result = m.Result[0]
			}
			cn.answer(serial, answer{payload, result})
		}
	case "signal":
		if m.Signal == nil || m.Group == nil {
			return &malformed{"a signal without a name or a group"}
		}
		if *m.Signal == "DevicePrompt" || *m.Signal == "BrowserPrompt" {
			serial, ok := serialOf(m.Serial)
			if !ok {
				return &malformed{"a " + *m.Signal + " without its login's serial"}
			}
			cn.mu.Lock()
			p := cn.pending[serial]
			cn.mu.Unlock()
			if p == nil || p.prompts == nil {
				return nil
			}
			shown, err := promptOf(m)
			if err != nil {
				return &malformed{"a " + *m.Signal + " in which " + err.what}
			}
			select {
			case p.prompts <- shown:
			default:
			}
			return nil
		}
		cn.mu.Lock()
		nobody := len(cn.subs) == 0
		cn.mu.Unlock()
		if nobody {
			return nil // nobody subscribed: dropped, so that a broker pushing signals makes us hold nothing
		}
		event := Event{Name: *m.Signal, Group: *m.Group}
		if len(m.Status) > 0 && m.Status[0] == '{' { // (a status that is not an object is none, as libmsso reads it)
			if err := json.Unmarshal(m.Status, &event.Status); err != nil {
				return &malformed{"a " + *m.Signal + " signal in which " + readErr(err).what}
			}
		}
		full := false
		cn.mu.Lock()
		for s := range cn.subs {
			full = !s.deliver(event, len(payload)) || full
		}
		cn.mu.Unlock()
		if full {
			cn.end(unreachable("more than %d events (or %d KiB of them) were left unread: the connection was closed; "+
				"read Events() as they come, and subscribe again", maxEvents, maxEventBytes/1024))
		}
	}
	return nil // a type of a newer protocol: ignored, like unknown keys
}

// end ends the connection once: pending calls and subscriptions fail with reason (or with what
// the daemon said before closing, when the connection was lost).
func (cn *conn) end(reason *Error) {
	cn.mu.Lock()
	if cn.pending == nil {
		cn.mu.Unlock()
		return
	}
	if reason == lostConnection && cn.stray != nil {
		reason = cn.stray
	}
	cn.reason = reason
	cn.pending = nil
	subs := cn.subs
	cn.subs = nil
	close(cn.done)
	cn.mu.Unlock()
	_ = cn.sock.Close()
	for s := range subs {
		s.end(reason)
	}
}

func (cn *conn) attach(s *Subscription) error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.pending == nil {
		return &connectionEnded{cn.reason}
	}
	cn.subs[s] = true
	return nil
}

func (cn *conn) detach(s *Subscription) {
	cn.mu.Lock()
	if cn.subs != nil {
		delete(cn.subs, s)
	}
	cn.mu.Unlock()
}

// checkPeer refuses a broker whose process runs as another user (unless we are root, who may
// address any user's broker): a socket another user planted would read the calls, a login's
// password among them.
func checkPeer(sock *net.UnixConn, path string) error {
	raw, err := sock.SyscallConn()
	var peer *syscall.Ucred
	if err == nil {
		controlErr := raw.Control(func(fd uintptr) {
			peer, err = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
		})
		if err == nil {
			err = controlErr
		}
	}
	if err != nil {
		return unreachable("the msso broker at %s runs as another user (uid unknown): not talking to it; check MSSO_SOCKET and XDG_RUNTIME_DIR", path)
	}
	if int(peer.Uid) != os.Geteuid() && !(os.Geteuid() == 0 && initialUserNamespace()) {
		return unreachable("the msso broker at %s runs as another user (uid %d): not talking to it; check MSSO_SOCKET and XDG_RUNTIME_DIR", path, peer.Uid)
	}
	return nil
}

// initialUserNamespace says whether this process is in the machine's own user namespace: root's
// exemption is the real root's, not that of a user in a namespace of their own (`unshare -r`).
func initialUserNamespace() bool {
	uidMap, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(uidMap))
	return len(fields) == 3 && fields[0] == "0" && fields[1] == "0" && fields[2] == "4294967295"
}
