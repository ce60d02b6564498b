package transfer

import (
	"bytes"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// flakyListener is a fake listener for a fault a test cannot cause in its
// own process without starving everything else of descriptors: its first
// fails accepts return EMFILE (as accept(2) does when the process is out of
// descriptors), then it accepts for real. tests/ causes the real fault with
// prlimit on an appliance process.
type flakyListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// Running out of descriptors pauses the accept loop (Health says so) and
// does not end it: once accepts succeed again the engine serves.
func TestAcceptBacksOffOnEMFILE(t *testing.T) {
	srv := newEngine(t, Config{})
	mem := bytes.Repeat([]byte("x"), 4096)
	if err := srv.RegisterSegment("s", mem); err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: inner}
	fl.fails.Store(8) // 5+10+...+640 ms: about a second of back-off
	addr, err := srv.serveListener(fl)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(srv.Health()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("Health never reported the failing accepts")
		}
		time.Sleep(time.Millisecond)
	}
	if h := srv.Health(); !strings.Contains(h[0], "too many open files") || !strings.Contains(h[0], "retrying") {
		t.Fatalf("health %q", h)
	}
	cli := newEngine(t, Config{})
	buf := make([]byte, 4096)
	if err := do1(t, cli, Request{Op: Read, Endpoint: addr.String(), Segment: "s", Buf: buf}); err != nil {
		t.Fatalf("read after the accept errors: %v", err)
	}
	if !bytes.Equal(buf, mem) {
		t.Fatal("bytes differ")
	}
	if h := srv.Health(); len(h) != 0 {
		t.Fatalf("health after recovery %q", h)
	}
	if st := srv.Stats(); st.AcceptErrors != 8 {
		t.Fatalf("accept errors %d, want 8", st.AcceptErrors)
	}
}

// A listener that fails for good says so in Health.
func TestAcceptStopsOnFatalError(t *testing.T) {
	srv := newEngine(t, Config{})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &fatalListener{Listener: inner}
	if _, err := srv.serveListener(fl); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(srv.Health()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a stopped listener is not reported")
		}
		time.Sleep(time.Millisecond)
	}
	if h := srv.Health(); !strings.Contains(h[0], "stopped") {
		t.Fatalf("health %q", h)
	}
}

type fatalListener struct{ net.Listener }

func (l *fatalListener) Accept() (net.Conn, error) {
	return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EINVAL)}
}

// A connection that sends half a header is closed after IOTimeout; one that
// sends nothing after IdleTimeout. Neither holds the server.
func TestHeaderAndIdleDeadlines(t *testing.T) {
	srv := newEngine(t, Config{IOTimeout: 200 * time.Millisecond, IdleTimeout: 300 * time.Millisecond})
	if err := srv.RegisterSegment("s", make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedWithin := func(what string, send []byte, limit time.Duration) {
		t.Helper()
		c, err := net.Dial("tcp", addr.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if len(send) > 0 {
			if _, err := c.Write(send); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(make([]byte, 1))
		if n != 0 || err == nil || strings.Contains(err.Error(), "timeout") {
			t.Fatalf("%s: connection not closed by the server (n=%d, err=%v)", what, n, err)
		}
		if took := time.Since(start); took > limit {
			t.Fatalf("%s: closed after %v, want under %v", what, took, limit)
		}
	}
	closedWithin("half a header", make([]byte, requestHeaderLen/2), 2*time.Second)
	closedWithin("idle", nil, 2*time.Second)
	// A complete request still works after both.
	cli := newEngine(t, Config{})
	if err := do1(t, cli, Request{Op: Read, Endpoint: addr.String(), Segment: "s", Buf: make([]byte, 64)}); err != nil {
		t.Fatal(err)
	}
}
