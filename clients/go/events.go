package msso

import (
	"context"
	"sync"
)

// Event is a signal from the broker about a group, with its SessionStatus after the event.
type Event struct {
	Name   string // EventLoggedIn, EventExtended, …
	Group  string
	Status SessionStatus
}

// Subscription delivers a connection's signals on a channel. It lasts as long as the connection:
// when the broker goes (or the client is closed) the channel is closed, and Err says why. At most
// 4,096 signals (1 MiB of their frames) wait unread: past that the connection is closed (as the
// daemon closes a subscriber that stops reading), the channel gives those and is closed, and Err
// says so (ErrBrokerUnreachable): read the channel as signals come, and subscribe again.
type Subscription struct {
	// Groups are those the connection gets signals for (the daemon's answer to subscribe).
	Groups []string

	events chan Event
	only   map[string]bool // the groups named to Subscribe (nil: every group)
	stop   chan struct{}
	once   sync.Once
	wake   chan struct{}
	cn     *conn

	mu          sync.Mutex
	queue       []queued
	unread      int // delivered and not yet received from the channel (the pump holds one)
	unreadBytes int // their frames'
	ended       bool
	reason      *Error
}

type queued struct {
	event Event
	bytes int // its frame's
}

// Subscribe asks for the signals of the named groups (none: every group this program may use,
// as the daemon decides), of the client's account only when it has one (Client.Account), and
// returns them on a channel. Keep reading it: signals wait in memory
// here (4,096 at most, then the connection is closed), never in the daemon, which would
// disconnect a subscriber that leaves them unread.
func (c *Client) Subscribe(ctx context.Context, groups ...string) (*Subscription, error) {
	s := &Subscription{events: make(chan Event), stop: make(chan struct{}), wake: make(chan struct{}, 1)}
	if len(groups) > 0 {
		s.only = map[string]bool{}
		for _, group := range groups {
			s.only[group] = true
		}
	}
	args := map[string]any{}
	if groups != nil {
		args["groups"] = groups
	}
	if account := c.account(); account != "" {
		args["account"] = account
	}
	var result groupList
	for attempt := 0; ; attempt++ {
		cn, err := c.connection(ctx)
		if err != nil {
			return nil, err
		}
		// Attached before the call, on the same connection, so that no signal sent right after
		// the reply is missed.
		if err = cn.attach(s); err == nil {
			err = cn.roundTrip(ctx, methodSubscribe, args, &result, c.timeout(), nil)
		}
		if err != nil {
			cn.detach(s)
			if lost, ok := err.(*connectionEnded); ok {
				if attempt == 0 && lost.reason.Name == "TimedOut" {
					continue
				}
				return nil, lost.reason
			}
			return nil, err
		}
		s.cn = cn
		break
	}
	s.Groups = result
	go s.pump()
	return s, nil
}

// Events is the channel of signals, closed when the subscription ends.
func (s *Subscription) Events() <-chan Event { return s.events }

// Err says why the channel was closed: nil after Close (of the subscription or the client), an
// *Error (ErrBrokerUnreachable, ErrTimedOut, …) when the connection ended: subscribe again.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reason == nil || s.reason == errClosed {
		return nil
	}
	return s.reason
}

// Close stops the deliveries and closes the channel. (The protocol has no unsubscribe: the
// daemon goes on sending this connection the signals, and they are dropped here.)
func (s *Subscription) Close() {
	s.once.Do(func() { close(s.stop) })
	if s.cn != nil {
		s.cn.detach(s)
	}
}

// deliver queues a signal (whose frame was `bytes` long) for the channel; false when the queue is
// full: the caller closes the connection.
func (s *Subscription) deliver(event Event, bytes int) bool {
	if s.only != nil && !s.only[event.Group] {
		return true
	}
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return true
	}
	if s.unread >= maxEvents || s.unreadBytes+bytes > maxEventBytes {
		s.mu.Unlock()
		return false
	}
	s.queue = append(s.queue, queued{event, bytes})
	s.unread, s.unreadBytes = s.unread+1, s.unreadBytes+bytes
	s.mu.Unlock()
	s.nudge()
	return true
}

func (s *Subscription) end(reason *Error) {
	s.mu.Lock()
	s.ended, s.reason = true, reason
	s.mu.Unlock()
	s.nudge()
}

func (s *Subscription) nudge() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pump hands the queued signals to the channel, so that the connection's reader never waits for
// the application.
func (s *Subscription) pump() {
	defer close(s.events)
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			ended := s.ended
			s.mu.Unlock()
			if ended {
				return
			}
			select {
			case <-s.wake:
				continue
			case <-s.stop:
				return
			}
		}
		next := s.queue[0]
		s.queue[0] = queued{} // (the array would keep its strings until it is reallocated)
		s.queue = s.queue[1:]
		s.mu.Unlock()
		select {
		case s.events <- next.event:
			s.mu.Lock()
			s.unread, s.unreadBytes = s.unread-1, s.unreadBytes-next.bytes
			s.mu.Unlock()
		case <-s.stop:
			return
		}
	}
}
