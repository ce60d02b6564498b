package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"
)

// testEventLoop makes startServerOn serve with Config.EventLoop (set by
// TestEventLoopMode around the tests it runs again).
var testEventLoop bool

// TestEventLoopMode runs the server tests again with the event loop
// serving the connections (Config.EventLoop): every behaviour must hold in
// both modes.
func TestEventLoopMode(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event loop is Linux only (epoll)")
	}
	testEventLoop = true
	defer func() { testEventLoop = false }()
	for _, tc := range []struct {
		name string
		test func(*testing.T)
	}{
		{"ServerConcurrent", TestServerConcurrent},
		{"ServerLargeValueRoundTrip", TestServerLargeValueRoundTrip},
		{"ServerMaxClients", TestServerMaxClients},
		{"GetInPlaceChecksFirstForShortValues", TestGetInPlaceChecksFirstForShortValues},
		{"GetInPlaceLongValueFailsAfterSending", TestGetInPlaceLongValueFailsAfterSending},
		{"SetInPlaceComparesBytes", TestSetInPlaceComparesBytes},
		{"GetInPlaceSlowReader", TestGetInPlaceSlowReader},
		{"SetComparedWhileArrivingThenReplaced", TestSetComparedWhileArrivingThenReplaced},
		{"EventLoopHandsOver", TestEventLoopHandsOver},
	} {
		t.Run(tc.name, tc.test)
	}
}

// TestEventLoopHandsOver: on one connection, pipelined short commands (run
// by the loop), a long SET and GET (run by the connection's goroutine),
// commands outside the loop's set (DEL, MSET, DBSIZE), a command split
// across writes, and QUIT, all answered in order. Run in both modes.
func TestEventLoopHandsOver(t *testing.T) {
	s, addr, _ := startServerOn(t, Config{}, true)
	c := dial(t, addr)
	defer c.nc.Close()
	big := strings.Repeat("v", 100<<10)
	c.send("SET", "a", "1")
	c.send("GET", "a")
	c.send("SET", "big", big)
	c.send("GET", "big")
	c.send("MSET", "b", "2", "c", "3")
	c.send("GET", "b")
	c.send("DEL", "c")
	c.send("EXISTS", "a", "b", "c")
	c.send("DBSIZE")
	if err := c.bw.Flush(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"+OK", "1", "+OK", big, "+OK", "2", ":1", ":2", ":3"} {
		got, err := c.read()
		if err != nil || got != want {
			t.Fatalf("reply %d: %.40q %v, want %.40q", i, got, err, want)
		}
	}
	// Replacements, one request at a time (the loop serves each): the
	// goroutine runs them again from the start.
	for i, tc := range []struct {
		req  []string
		want string
	}{
		{[]string{"SET", "a", "one", "XX"}, "+OK"},
		{[]string{"GET", "a"}, "one"},
		{[]string{"SET", "a", "two"}, "+OK"},
		{[]string{"SET", "a", "x", "NX"}, "(nil)"},
		{[]string{"GET", "a"}, "two"},
	} {
		if got := c.do(tc.req...); got != tc.want {
			t.Fatalf("request %d %q: %q, want %q", i, tc.req, got, tc.want)
		}
	}
	// A command that arrives in pieces is run once it is whole.
	req := "*2\r\n$3\r\nGET\r\n$1\r\nb\r\n"
	for i := range req {
		if _, err := c.nc.Write([]byte(req[i : i+1])); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if got, err := c.read(); got != "2" {
		t.Fatalf("GET sent byte by byte: %q %v", got, err)
	}
	if runs := s.loopRuns.Load(); testEventLoop != (runs > 0) {
		t.Fatalf("event loop mode %v, commands the loop ran: %d", testEventLoop, runs)
	}
	if got := c.do("QUIT"); got != "+OK" {
		t.Fatalf("QUIT: %q", got)
	}
	if _, err := c.br.ReadByte(); err == nil {
		t.Fatal("connection open after QUIT")
	}
}

// TestScan: scan finds whole commands as next parses them.
func TestScan(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"", scanPartial},
		{"GET a", scanPartial},
		{"GET a\r\n", scanReady},
		{"*2\r\n$3\r\nGET\r\n$1\r\na", scanPartial},
		{"*2\r\n$3\r\nGET\r\n$1\r\na\r", scanPartial},
		{"*2\r\n$3\r\nGET\r\n$1\r\na\r\n", scanReady},
		{"*2\r\n$3\r\nGET\r\n$1\r\na\r\n*1\r\n", scanReady},
		{"*2\r\n$3\r\nSET\r\n$16384\r\n", scanBig},
		{"*2\r\n$3\r\nSET\r\n$16383\r\n", scanPartial},
		{"*2\r\n$x\r\n", scanReady},  // next reports it
		{"*2\r\n:1\r\n", scanReady},  // next reports it
		{"*2\r\n$-1\r\n", scanReady}, // next reports it
		{"*0\r\n", scanReady},
	} {
		if got := scan([]byte(tc.in), 1<<20); got != tc.want {
			t.Errorf("scan(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// errReader fails every read: a reader over it parses only what is
// buffered.
type errReader struct{}

var errRead = errors.New("read past the buffered bytes")

func (errReader) Read([]byte) (int, error) { return 0, errRead }

// FuzzScan: whenever scan says a command is ready, next parses it (or
// reports a protocol error) from the buffered bytes alone, never reading
// further: the event loop must never wait for the socket.
func FuzzScan(f *testing.F) {
	f.Add([]byte("*2\r\n$3\r\nGET\r\n$1\r\na\r\nGET b\r\n"))
	f.Add([]byte("set \"a\\x41\" 'b'\r\n"))
	f.Add([]byte("*1\r\n$99999999999999999999\r\n"))
	f.Add([]byte("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvvXX"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var pool bufPool
		r := newReader(io.MultiReader(bytes.NewReader(raw), errReader{}), 1<<10, 1<<16, &pool)
		if _, err := r.br.Peek(len(raw)); err != nil && !errors.Is(err, errRead) && len(raw) <= 1<<10 {
			t.Fatal(err)
		}
		for range 100 {
			n := r.br.Buffered()
			if n == 0 {
				return
			}
			b, _ := r.br.Peek(n)
			if scan(b, r.maxBulk) != scanReady {
				return
			}
			if _, err := r.next(); err != nil {
				if errors.Is(err, errRead) {
					t.Fatalf("next read past a command scan found whole, in %q", fmt.Sprintf("%.200q", b))
				}
				return
			}
		}
	})
}
