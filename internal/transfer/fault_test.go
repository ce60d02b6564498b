package transfer

import (
	"bytes"
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// silentServer accepts connections and reads requests but never answers.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(io.Discard, c)
			}()
		}
	}()
	return l.Addr().String()
}

func TestIOTimeout(t *testing.T) {
	addr := silentServer(t)
	cli := newEngine(t, Config{IOTimeout: 200 * time.Millisecond, ConnsPerPeer: 1})
	err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "s", Buf: make([]byte, 10)})
	wantCode(t, err, kverr.TransferFail, "timeout")
	// A peer that stopped answering is not asked again: a retry would
	// dial it once more and wait a second IOTimeout before the caller
	// could turn to another replica.
	if d := cli.Stats().ConnsDialed; d != 1 {
		t.Fatalf("dialled %d connections to a peer that timed out, want 1 (no retry)", d)
	}
}

func TestCloseFailsInflight(t *testing.T) {
	addr := silentServer(t)
	cli, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	b := cli.Submit(context.Background(), []Request{
		{Op: Read, Endpoint: addr, Segment: "s", Buf: make([]byte, 10)},
		{Op: Write, Endpoint: addr, Segment: "s", Buf: make([]byte, 3<<20)},
	})
	for cli.Stats().ConnsDialed == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
	default:
		t.Fatal("batch still pending after Close returned")
	}
	for _, err := range b.Wait() {
		wantCode(t, err, kverr.TransferFail, "")
	}
}

// countingSource records the most bytes its ReadExtent held at once.
type countingSource struct {
	cur, max atomic.Int64
}

func (c *countingSource) ReadExtent(ctx context.Context, bucket, offset uint64, dst []byte) error {
	n := c.cur.Add(int64(len(dst)))
	for {
		m := c.max.Load()
		if n <= m || c.max.CompareAndSwap(m, n) {
			break
		}
	}
	time.Sleep(2 * time.Millisecond) // hold the buffer a little, like a disk read
	fillPattern(dst, bucket<<32+offset)
	c.cur.Add(-int64(len(dst)))
	return nil
}

// Many clients reading extents cannot make the server hold more than
// MaxInflightBytes of extent buffers.
func TestServerExtentBuffersBounded(t *testing.T) {
	const bound = 256 << 10
	srv := newEngine(t, Config{MaxInflightBytes: bound, SliceSize: 64 << 10})
	src := &countingSource{}
	if err := srv.RegisterSource("ssd", src); err != nil {
		t.Fatal(err)
	}
	a, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	for c := range 6 {
		cli := newEngine(t, Config{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]Request, 8)
			for i := range reqs {
				reqs[i] = Request{Op: Read, Endpoint: a.String(), Segment: "ssd", Bucket: uint64(c + 1), Offset: uint64(i) << 20, Buf: make([]byte, 100<<10)}
			}
			for _, err := range cli.Do(context.Background(), reqs) {
				if err != nil {
					errc <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if m := src.max.Load(); m > bound || m < 100<<10 {
		t.Fatalf("server held %d extent bytes at once, bound %d", m, bound)
	}
}

// Submits racing with Close all complete (ok or TRANSFER_FAIL), nothing
// panics, and Close waits for every goroutine.
func TestSubmitRacingClose(t *testing.T) {
	_, _, addr := serverEngine(t, "s", 4<<20)
	for round := range 5 {
		cli, err := New(Config{ConnsPerPeer: 2, SliceSize: 64 << 10, MaxInflightBytes: 128 << 10})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 20 {
					op := Read
					if (g+i)%2 == 0 {
						op = Write
					}
					errs := cli.Do(context.Background(), []Request{{Op: op, Endpoint: addr, Segment: "s", Offset: uint64(g) << 20, Buf: make([]byte, 200<<10)}})
					if errs[0] != nil && !kverr.Is(errs[0], kverr.TransferFail) {
						t.Errorf("round %d: %v", round, errs[0])
					}
				}
			}()
		}
		time.Sleep(time.Duration(round) * time.Millisecond)
		if err := cli.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
}

// Payload bytes go from the socket straight into the destination and from the
// source memory straight to the socket: moving 1 MiB frames allocates only
// bookkeeping, on both sides (here one process), and extent reads reuse
// pooled buffers.
func TestNoPayloadCopies(t *testing.T) {
	srv, _, addr := serverEngine(t, "s", 4<<20)
	if err := srv.RegisterSource("ssd", patternSource{}); err != nil {
		t.Fatal(err)
	}
	cli := newEngine(t, Config{})
	buf := make([]byte, 1<<20)
	reqs := []Request{
		{Op: Read, Endpoint: addr, Segment: "s", Buf: buf},
		{Op: Write, Endpoint: addr, Segment: "s", Offset: 1 << 20, Buf: buf},
		{Op: Read, Endpoint: addr, Segment: "ssd", Bucket: 1, Buf: buf},
	}
	for _, r := range reqs {
		for range 5 { // warm up connections and the buffer pool
			if err := do1(t, cli, r); err != nil {
				t.Fatal(err)
			}
		}
		const n = 40
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			if err := do1(t, cli, r); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 64<<10 {
			t.Errorf("%s %q: %d bytes allocated per 1 MiB request", r.Op, r.Segment, per)
		}
	}
}

// TestDoAbandonsWhenItsContextEnds: a Do whose ctx ends while its frame is
// on the wire to a peer that holds its answer returns TRANSFER_FAIL at
// once, not after IOTimeout, and its buffer is not written afterwards (the
// connection was closed before the peer answered); a Do with a ctx that
// cannot end keeps waiting as before; the next Do dials a fresh
// connection. A caller with another replica turns to it within its own
// bound (client read), not the engine's.
func TestDoAbandonsWhenItsContextEnds(t *testing.T) {
	h := startHeldPeer(t)
	cli := newEngine(t, Config{ConnsPerPeer: 1, DisableSharedMemory: true, IOTimeout: time.Minute})
	if err := do1(t, cli, Request{Op: Read, Endpoint: h.addr, Segment: "s", Buf: make([]byte, 4096)}); err != nil {
		t.Fatal(err) // dials; answered at once
	}
	buf := bytes.Repeat([]byte{0xAA}, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- cli.Do(ctx, []Request{{Op: Read, Endpoint: h.addr, Segment: "s", Buf: buf}})[0] }()
	select {
	case err := <-done:
		wantCode(t, err, kverr.TransferFail, "stopped waiting")
		if d := time.Since(start); d < 150*time.Millisecond {
			t.Fatalf("returned after %v, before its context ended", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Do waited past its context for a held answer (IOTimeout is a minute)")
	}
	close(h.release) // the peer answers zeros now, into a closed connection
	time.Sleep(50 * time.Millisecond)
	if !bytes.Equal(buf, bytes.Repeat([]byte{0xAA}, 4096)) {
		t.Fatal("the abandoned frame's buffer was written after Do returned")
	}
	st := cli.Stats()
	if st.ConnsDialed != 1 {
		t.Fatalf("dialled %d connections, want 1 (the abandoned frame is not retried)", st.ConnsDialed)
	}
}

// TestAbandonedConnectionRetriesOthers: another caller's frame on the
// connection an abandoning Do closed is retried on a fresh connection and
// completes; the Do fails alone.
func TestAbandonedConnectionRetriesOthers(t *testing.T) {
	h := startHeldPeer(t)
	cli := newEngine(t, Config{ConnsPerPeer: 1, DisableSharedMemory: true, IOTimeout: time.Minute})
	read := func() Request { return Request{Op: Read, Endpoint: h.addr, Segment: "s", Buf: make([]byte, 4096)} }
	if err := do1(t, cli, read()); err != nil {
		t.Fatal(err)
	}
	defer close(h.release)
	other := cli.Submit(context.Background(), []Request{read()})
	<-h.got // held on the first connection
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	wantCode(t, cli.Do(ctx, []Request{read()})[0], kverr.TransferFail, "stopped waiting")
	select {
	case <-other.Done():
		if err := other.Wait()[0]; err != nil {
			t.Fatalf("the other caller's read: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other caller's read was not retried on a fresh connection")
	}
	if st := cli.Stats(); st.ConnsDialed != 2 {
		t.Fatalf("dialled %d connections, want 2 (the other caller's retry)", st.ConnsDialed)
	}
}
