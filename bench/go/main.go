// Command goclient is the Go side of msso's benchmark (bench/run.py): the bearer `sign` of the
// Go library (clients/go, msso.Client.Sign) beside a minimal Go client written from
// docs/PROTOCOL.md (encode, frame, write, read, decode: the work any client does), the latter
// against both the broker and bench/echo.c (the Go echo floor), in turns of calls/10 each so that
// all three see the same drift of the machine's speed. It prints
// {"floor": [p50, p99], "sign": [p50, p99], "library": [p50, p99]} in microseconds.
//
//	goclient ECHO-SOCKET BROKER-SOCKET GROUP URL CALLS
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"time"

	"msso"
)

// minimal is a client that does what any client written from the protocol must, and no more.
type minimal struct {
	conn   net.Conn
	serial uint32
	header [4]byte
}

type call struct {
	Type   string `json:"type"`
	Serial uint32 `json:"serial"`
	Method string `json:"method"`
	Args   any    `json:"args"`
}

type signArgs struct {
	Group  string `json:"group"`
	Method string `json:"method"`
	URL    string `json:"url"`
}

type reply struct {
	Type   string `json:"type"`
	Serial uint32 `json:"serial"`
	Result struct {
		Headers [][2]string `json:"headers"`
	} `json:"result"`
}

func dial(path string, hello bool) *minimal {
	conn, err := net.Dial("unix", path)
	check(err)
	client := &minimal{conn: conn}
	if hello {
		client.call("hello", map[string]any{"version": 1, "client": "bench"})
	}
	return client
}

func (c *minimal) call(method string, args any) reply {
	c.serial++
	payload, err := json.Marshal(call{Type: "call", Serial: c.serial, Method: method, Args: args})
	check(err)
	frame := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(payload)), uint32(len(payload)))
	_, err = c.conn.Write(append(frame, payload...))
	check(err)
	_, err = io.ReadFull(c.conn, c.header[:])
	check(err)
	body := make([]byte, binary.BigEndian.Uint32(c.header[:]))
	_, err = io.ReadFull(c.conn, body)
	check(err)
	var answer reply
	check(json.Unmarshal(body, &answer))
	if answer.Type != "reply" {
		check(fmt.Errorf("%s", body))
	}
	return answer
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "goclient:", err)
		os.Exit(1)
	}
}

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: goclient ECHO-SOCKET BROKER-SOCKET GROUP URL CALLS")
		os.Exit(64)
	}
	echoPath, brokerPath, group, url := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	calls, err := strconv.Atoi(os.Args[5])
	check(err)
	args := signArgs{Group: group, Method: "GET", URL: url}
	floor, hand := dial(echoPath, false), dial(brokerPath, true)
	library := &msso.Client{SocketPath: brokerPath, Name: "bench"}
	ctx := context.Background()
	request := msso.SignRequest{Group: group, Method: "GET", URL: url}
	runs := []func(){
		func() { floor.call("sign", args) },
		func() { hand.call("sign", args) },
		func() {
			_, err := library.Sign(ctx, request)
			check(err)
		},
	}
	samples := make([][]float64, len(runs))
	for _, run := range runs { // warm up
		for i := 0; i < calls/10; i++ {
			run()
		}
	}
	for round := 0; round < 10; round++ {
		for r, run := range runs {
			for i := 0; i < calls/10; i++ {
				started := time.Now()
				run()
				samples[r] = append(samples[r], float64(time.Since(started).Nanoseconds())/1000)
			}
		}
	}
	out := map[string][2]float64{}
	for r, name := range []string{"floor", "sign", "library"} {
		sort.Float64s(samples[r])
		out[name] = [2]float64{samples[r][len(samples[r])/2], samples[r][len(samples[r])*99/100]}
	}
	check(json.NewEncoder(os.Stdout).Encode(out))
}
