package fastrpc

import (
	"context"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/testnet"
)

// exist makes one cheap unary call.
func exist(t *testing.T, mc kvtierpb.MasterClient) {
	t.Helper()
	if _, err := mc.Exist(context.Background(), &kvtierpb.KeyRequest{Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
}

// TestServerPollCatchesNextRequest: a request sent while the server polls
// its connection is found by the poll; with polling off nothing polls.
func TestServerPollCatchesNextRequest(t *testing.T) {
	for _, on := range []bool{true, false} {
		c := startCluster(t, true, "127.0.0.1:0")
		if on {
			c.fast.SetPoll(time.Second) // far longer than the gap below
		} else {
			c.fast.SetPoll(0)
		}
		_, mc, _ := dialBoth(t, c.addr)
		exist(t, mc)
		time.Sleep(2 * time.Millisecond) // the server is polling meanwhile
		exist(t, mc)
		caught, missed := c.fast.poll.caught.Load(), c.fast.poll.missed.Load()
		if on && caught < 1 {
			t.Errorf("poll on: the second request was not caught by a poll (caught %d, missed %d)", caught, missed)
		}
		if !on && caught+missed != 0 {
			t.Errorf("poll off: %d polls caught, %d missed; want none", caught, missed)
		}
		c.stop()
	}
}

// waitDone runs p.waitFor(c, d) and fails the test if it has not returned
// within limit (a generous bound: a poll must not hang).
func waitDone(t *testing.T, p *poller, c net.Conn, d, limit time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { p.waitFor(c, d); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("poll still running after %v", limit)
	}
}

func TestPollerStops(t *testing.T) {
	var gate atomic.Bool
	newPoller := func() *poller { return &poller{polling: &gate} }
	a, b := testnet.TCPPair(t)

	t.Run("times out", func(t *testing.T) {
		p := newPoller()
		start := time.Now()
		waitDone(t, p, a, 20*time.Millisecond, 10*time.Second)
		if el := time.Since(start); el < 20*time.Millisecond {
			t.Errorf("poll of 20ms gave up after %v", el)
		}
		if p.missed.Load() != 1 || p.caught.Load() != 0 {
			t.Errorf("caught %d missed %d, want 0 and 1", p.caught.Load(), p.missed.Load())
		}
		if gate.Load() {
			t.Error("the gate is still held after the poll")
		}
	})
	t.Run("another call starts", func(t *testing.T) {
		p := newPoller()
		go func() { time.Sleep(5 * time.Millisecond); p.calls.Add(1) }()
		waitDone(t, p, a, time.Hour, 10*time.Second)
		if p.missed.Load() != 1 {
			t.Errorf("missed %d, want 1", p.missed.Load())
		}
	})
	t.Run("busy before it starts", func(t *testing.T) {
		p := newPoller()
		p.calls.Store(1)
		waitDone(t, p, a, time.Hour, 10*time.Second)
		if p.missed.Load()+p.caught.Load() != 0 {
			t.Error("polled although a call was being answered")
		}
	})
	t.Run("another poller holds the gate", func(t *testing.T) {
		p := newPoller()
		gate.Store(true)
		waitDone(t, p, a, time.Hour, 10*time.Second)
		gate.Store(false)
		if p.missed.Load()+p.caught.Load() != 0 {
			t.Error("polled while another poller held the gate")
		}
	})
	t.Run("bytes arrive", func(t *testing.T) {
		p := newPoller()
		go func() { time.Sleep(5 * time.Millisecond); _, _ = b.Write([]byte{7}) }()
		waitDone(t, p, a, time.Hour, 10*time.Second)
		if p.caught.Load() != 1 {
			t.Errorf("caught %d, want 1", p.caught.Load())
		}
		var got [1]byte
		if _, err := a.Read(got[:]); err != nil || got[0] != 7 {
			t.Errorf("the polled byte was consumed or changed: %v %v", got, err)
		}
	})
	t.Run("peer closes", func(t *testing.T) {
		p := newPoller()
		go func() { time.Sleep(5 * time.Millisecond); _ = b.Close() }()
		waitDone(t, p, a, time.Hour, 10*time.Second)
		if p.caught.Load() != 1 {
			t.Errorf("end of stream: caught %d, want 1", p.caught.Load())
		}
	})
}

func TestGapsWindow(t *testing.T) {
	const limit = time.Millisecond
	var g gaps
	if w := g.window(limit); w != limit {
		t.Errorf("new connection: window %v, want %v", w, limit)
	}
	if w := g.window(0); w != 0 {
		t.Errorf("polling off: window %v", w)
	}
	for range 4 {
		g.add(time.Second) // heartbeats
	}
	if w := g.window(limit); w != 0 {
		t.Errorf("sporadic calls: window %v, want none", w)
	}
	g.add(40 * time.Microsecond) // a run of calls starts
	if w := g.window(limit); w != limit {
		t.Errorf("after a close call: window %v, want %v", w, limit)
	}
	for range 3 {
		g.add(5 * time.Millisecond)
	}
	if w := g.window(limit); w != limit {
		t.Errorf("one close call among the last four: window %v, want %v", w, limit)
	}
	g.add(5 * time.Millisecond)
	if w := g.window(limit); w != 0 {
		t.Errorf("four far-apart calls: window %v, want none", w)
	}
}

// TestServerDoesNotPollForSporadicCalls: calls further apart than the poll
// bound make the connection stop polling after four of them.
func TestServerDoesNotPollForSporadicCalls(t *testing.T) {
	c := startCluster(t, true, "127.0.0.1:0")
	c.fast.SetPoll(time.Millisecond)
	_, mc, _ := dialBoth(t, c.addr)
	for range 5 {
		exist(t, mc)
		time.Sleep(20 * time.Millisecond)
	}
	before := c.fast.poll.caught.Load() + c.fast.poll.missed.Load()
	for range 3 {
		exist(t, mc)
		time.Sleep(20 * time.Millisecond)
	}
	if after := c.fast.poll.caught.Load() + c.fast.poll.missed.Load(); after != before {
		t.Errorf("%d polls during sporadic calls, want none", after-before)
	}
}

// TestNoPollWithOneP: with GOMAXPROCS 1 a poll would starve every other
// connection (the spinning goroutine is always runnable, and the
// scheduler polls the network only when nothing is), so the server does
// not poll; a read on another connection meanwhile wakes at once.
func TestNoPollWithOneP(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var gate atomic.Bool
	p := &poller{polling: &gate}
	a, _ := testnet.TCPPair(t)
	start := time.Now()
	waitDone(t, p, a, time.Hour, 10*time.Second)
	if p.caught.Load()+p.missed.Load() != 0 || time.Since(start) > time.Second {
		t.Fatalf("polled with one P: caught %d, missed %d, %v", p.caught.Load(), p.missed.Load(), time.Since(start))
	}
	runtime.GOMAXPROCS(2)
	go func() { time.Sleep(5 * time.Millisecond); p.calls.Add(1) }()
	waitDone(t, p, a, time.Hour, 10*time.Second)
	if p.missed.Load() != 1 {
		t.Errorf("with two Ps the poll did not run: missed %d, want 1", p.missed.Load())
	}
}
