package transfer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kvtier/kvtier/kverr"
)

var roundTripSizes = []int{1, 7, 4096, 65536, 1<<20 - 1, 1<<20 + 3, 4 << 20, 16<<20 + 5, 64 << 20}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestRoundTripTCPInProcess(t *testing.T) {
	const segSize = 64<<20 + 4096
	_, mem, addr := serverEngine(t, "s0", segSize)
	cli := newEngine(t, Config{})
	for i, n := range roundTripSizes {
		if testing.Short() && n > 4<<20 {
			continue
		}
		off := uint64(segSize - n - i) // near the end, unaligned
		src := randBytes(uint64(n), n)
		if err := do1(t, cli, Request{Op: Write, Endpoint: addr, Segment: "s0", Offset: off, Buf: src}); err != nil {
			t.Fatalf("write %d: %v", n, err)
		}
		if !bytes.Equal(mem[off:off+uint64(n)], src) {
			t.Fatalf("write %d: server memory differs", n)
		}
		dst := make([]byte, n)
		if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "s0", Offset: off, Buf: dst}); err != nil {
			t.Fatalf("read %d: %v", n, err)
		}
		if !bytes.Equal(dst, src) {
			t.Fatalf("read %d: bytes differ", n)
		}
	}
	st := cli.Stats()
	if st.TCPRequests == 0 || st.LocalRequests != 0 || st.Errors != 0 || st.BytesRead != st.BytesWritten {
		t.Fatalf("client stats %+v", st)
	}
}

func TestRoundTripCrossProcess(t *testing.T) {
	const segSize = 64<<20 + 64<<10
	h := startHelper(t, segSize)
	cli := newEngine(t, Config{})
	// The helper's segment is pattern-filled: reads must see the pattern.
	for _, n := range []int{1, 65536, 3<<20 + 1} {
		dst := make([]byte, n)
		if err := do1(t, cli, Request{Op: Read, Endpoint: h.addr, Segment: helperSegment, Offset: 12345, Buf: dst}); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, n)
		fillPattern(want, 12345)
		if !bytes.Equal(dst, want) {
			t.Fatalf("read %d: not the helper's pattern", n)
		}
	}
	for i, n := range roundTripSizes {
		if testing.Short() && n > 4<<20 {
			continue
		}
		off := uint64(i * 4096)
		src := randBytes(uint64(n)+99, n)
		dst := make([]byte, n)
		errs := cli.Do(context.Background(), []Request{{Op: Write, Endpoint: h.addr, Segment: helperSegment, Offset: off, Buf: src}})
		if errs[0] != nil {
			t.Fatalf("write %d: %v", n, errs[0])
		}
		errs = cli.Do(context.Background(), []Request{{Op: Read, Endpoint: h.addr, Segment: helperSegment, Offset: off, Buf: dst}})
		if errs[0] != nil {
			t.Fatalf("read %d: %v", n, errs[0])
		}
		if !bytes.Equal(dst, src) {
			t.Fatalf("size %d: bytes differ across processes", n)
		}
	}
	// A peer that dies: requests fail with TRANSFER_FAIL, never hang.
	h.kill()
	err := do1(t, cli, Request{Op: Read, Endpoint: h.addr, Segment: helperSegment, Buf: make([]byte, 1<<20)})
	wantCode(t, err, kverr.TransferFail, h.addr)
}

func TestLocalPath(t *testing.T) {
	e := newEngine(t, Config{})
	mem := make([]byte, 1<<20)
	if err := e.RegisterSegment("local", mem); err != nil {
		t.Fatal(err)
	}
	src := randBytes(5, 4000)
	// Endpoint is irrelevant for a segment registered in this engine.
	if err := do1(t, e, Request{Op: Write, Endpoint: "192.0.2.1:1", Segment: "local", Offset: 100, Buf: src}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem[100:4100], src) {
		t.Fatal("local write did not land")
	}
	dst := make([]byte, 4000)
	if err := do1(t, e, Request{Op: Read, Segment: "local", Offset: 100, Buf: dst}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, src) {
		t.Fatal("local read differs")
	}
	wantCode(t, do1(t, e, Request{Op: Read, Segment: "local", Offset: 1<<20 - 10, Buf: dst}), kverr.InvalidParams, `"local"`)
	wantCode(t, do1(t, e, Request{Op: Read, Segment: "local", Bucket: 3, Buf: dst}), kverr.InvalidParams, "bucket")
	st := e.Stats()
	if st.LocalRequests != 2 || st.TCPRequests != 0 || st.LocalBytes != 8000 || st.Errors != 2 || st.ConnsDialed != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Zero-length requests succeed without moving anything, locally and
	// remotely, and leave the segment unpinned.
	if err := do1(t, e, Request{Op: Read, Segment: "local"}); err != nil {
		t.Fatal(err)
	}
	if err := do1(t, e, Request{Op: Write, Endpoint: "192.0.2.1:1", Segment: "remote", Buf: []byte{}}); err != nil {
		t.Fatal(err)
	}
	if err := e.UnregisterSegment("local"); err != nil {
		t.Fatal(err)
	}
}

func TestRefusalsKeepConnectionAndOthers(t *testing.T) {
	srv, _, addr := serverEngine(t, "seg", 1<<20)
	cli := newEngine(t, Config{ConnsPerPeer: 1})

	// Another goroutine keeps transferring on the same engine and connection.
	stop := make(chan struct{})
	var bg sync.WaitGroup
	var bgErr atomic.Value
	var bgOps atomic.Int64
	bg.Add(1)
	go func() {
		defer bg.Done()
		buf := make([]byte, 64<<10)
		want := make([]byte, len(buf))
		fillPattern(want, 4096)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := cli.Do(context.Background(), []Request{{Op: Read, Endpoint: addr, Segment: "seg", Offset: 4096, Buf: buf}})[0]; err != nil {
				bgErr.Store(err)
				return
			}
			if !bytes.Equal(buf, want) {
				bgErr.Store(errors.New("background read returned wrong bytes"))
				return
			}
			bgOps.Add(1)
		}
	}()

	buf := make([]byte, 100)
	cases := []struct {
		r    Request
		code kverr.Code
		msg  string
	}{
		{Request{Op: Read, Segment: "seg", Offset: 1<<20 - 99}, kverr.InvalidParams, `segment "seg"`},
		{Request{Op: Write, Segment: "seg", Offset: 1 << 20}, kverr.InvalidParams, "outside segment"},
		{Request{Op: Read, Segment: "seg", Offset: math.MaxUint64 - 200}, kverr.InvalidParams, "outside segment"},
		{Request{Op: Write, Segment: "seg", Offset: math.MaxUint64 - 50}, kverr.InvalidParams, "overflows"},
		{Request{Op: Read, Segment: "nope"}, kverr.SegmentNotFound, `"nope"`},
		{Request{Op: Write, Segment: "nope"}, kverr.SegmentNotFound, `"nope"`},
		{Request{Op: Read, Segment: "seg", Bucket: 1}, kverr.InvalidParams, "bucket"},
		{Request{Op: 9, Segment: "seg"}, kverr.InvalidParams, "op"},
		{Request{Op: Read, Segment: ""}, kverr.InvalidParams, "name"},
	}
	for i, c := range cases {
		c.r.Endpoint = addr
		c.r.Buf = buf
		errs := cli.Do(context.Background(), []Request{c.r, {Op: Read, Endpoint: addr, Segment: "seg", Buf: make([]byte, 10)}})
		wantCode(t, errs[0], c.code, c.msg)
		if errs[1] != nil {
			t.Fatalf("case %d: good request in the same batch failed: %v", i, errs[1])
		}
	}
	// Keep going until the background goroutine has interleaved a few reads.
	for bgOps.Load() < 20 && bgErr.Load() == nil {
		if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "seg", Offset: 1 << 20, Buf: buf}); !kverr.Is(err, kverr.InvalidParams) {
			t.Fatalf("refusal: %v", err)
		}
	}
	close(stop)
	bg.Wait()
	if err := bgErr.Load(); err != nil {
		t.Fatalf("background transfers were affected: %v", err)
	}
	if st := cli.Stats(); st.ConnsDialed != 1 || st.ClientConns != 1 {
		t.Fatalf("refusals cost connections: %+v", st)
	}
	if st := srv.Stats(); st.MalformedFrames != 0 || st.ServedErrors < 6 {
		t.Fatalf("server stats %+v", st)
	}
}

func TestConcurrentBatches(t *testing.T) {
	const workers, per, chunk = 8, 20, 48 << 10
	_, mem, addr := serverEngine(t, "c", workers*per*chunk)
	cli := newEngine(t, Config{ConnsPerPeer: 3, SliceSize: 16 << 10, MaxInflightBytes: 256 << 10})
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]Request, per)
			srcs := make([][]byte, per)
			for i := range per {
				srcs[i] = randBytes(uint64(w*1000+i), chunk)
				reqs[i] = Request{Op: Write, Endpoint: addr, Segment: "c", Offset: uint64((w*per + i) * chunk), Buf: srcs[i]}
			}
			for i, err := range cli.Submit(context.Background(), reqs).Wait() {
				if err != nil {
					errc <- fmt.Errorf("write %d/%d: %w", w, i, err)
					return
				}
			}
			for i := range reqs {
				reqs[i].Op, reqs[i].Buf = Read, make([]byte, chunk)
			}
			for i, err := range cli.Submit(context.Background(), reqs).Wait() {
				if err != nil {
					errc <- fmt.Errorf("read %d/%d: %w", w, i, err)
					return
				}
				if !bytes.Equal(reqs[i].Buf, srcs[i]) {
					errc <- fmt.Errorf("worker %d request %d: bytes differ", w, i)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for w := range workers {
		for i := range per {
			off := (w*per + i) * chunk
			if !bytes.Equal(mem[off:off+chunk], randBytes(uint64(w*1000+i), chunk)) {
				t.Fatalf("server memory of %d/%d differs", w, i)
			}
		}
	}
	if st := cli.Stats(); st.Requests != 2*workers*per || st.Errors != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCancelAndClose(t *testing.T) {
	_, _, addr := serverEngine(t, "s", 1<<20)
	cli := newEngine(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := cli.Do(ctx, []Request{{Op: Read, Endpoint: addr, Segment: "s", Buf: make([]byte, 10)}})[0]
	wantCode(t, err, kverr.TransferFail, "not started")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%v does not wrap context.Canceled", err)
	}
	// Nothing listens here.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()
	wantCode(t, do1(t, cli, Request{Op: Write, Endpoint: dead, Segment: "s", Buf: make([]byte, 10)}), kverr.TransferFail, "dial")
	wantCode(t, do1(t, cli, Request{Op: Write, Segment: "remote-without-endpoint", Buf: make([]byte, 10)}), kverr.InvalidParams, "endpoint")

	if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "s", Buf: make([]byte, 10)}); err != nil {
		t.Fatal(err)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cli.Close(); err == nil {
		t.Fatal("second Close succeeded")
	}
	wantCode(t, do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "s", Buf: make([]byte, 10)}), kverr.TransferFail, "closed")
	if err := cli.RegisterSegment("x", make([]byte, 1)); err == nil {
		t.Fatal("RegisterSegment after Close succeeded")
	}
}

func TestRegisterRules(t *testing.T) {
	e := newEngine(t, Config{})
	if err := e.RegisterSegment("a", make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, e.RegisterSegment("a", make([]byte, 10)), kverr.SegmentAlreadyExists, `"a"`)
	wantCode(t, e.RegisterSource("a", patternSource{}), kverr.SegmentAlreadyExists, `"a"`)
	wantCode(t, e.RegisterSegment("", make([]byte, 10)), kverr.InvalidParams, "")
	wantCode(t, e.RegisterSegment(string(make([]byte, 256)), make([]byte, 10)), kverr.InvalidParams, "")
	wantCode(t, e.RegisterSegment("empty", nil), kverr.InvalidParams, "")
	wantCode(t, e.RegisterSource("nil", nil), kverr.InvalidParams, "")
	wantCode(t, e.UnregisterSegment("zzz"), kverr.SegmentNotFound, "")
	if err := e.UnregisterSegment("a"); err != nil {
		t.Fatal(err)
	}
	if err := e.RegisterSegment("a", make([]byte, 10)); err != nil {
		t.Fatalf("re-register after unregister: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []Config{
		{ConnsPerPeer: -1}, {SliceSize: 100}, {SliceSize: MaxFrameLength + 1}, {MaxInflightBytes: -1},
		{SliceSize: 1 << 20, MaxInflightBytes: 1 << 10}, {IOTimeout: -1}, {PipelineDepth: -2}, {SocketBuffer: -1}, {SocketBuffer: 4096},
	}
	for _, c := range bad {
		if err := c.Validate(); !kverr.Is(err, kverr.InvalidParams) {
			t.Errorf("%+v: %v", c, err)
		}
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
}

func TestInflightBoundSmallerThanRequest(t *testing.T) {
	_, mem, addr := serverEngine(t, "s", 8<<20)
	cli := newEngine(t, Config{SliceSize: 64 << 10, MaxInflightBytes: 128 << 10, ConnsPerPeer: 2, PipelineDepth: 8})
	dst := make([]byte, 8<<20)
	reqs := []Request{{Op: Read, Endpoint: addr, Segment: "s", Buf: dst[:4<<20]}, {Op: Read, Endpoint: addr, Segment: "s", Offset: 4 << 20, Buf: dst[4<<20:]}}
	for _, err := range cli.Do(context.Background(), reqs) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(dst, mem) {
		t.Fatal("bytes differ")
	}
}

func TestMixedBatch(t *testing.T) {
	_, mem, addr := serverEngine(t, "remote", 1<<20)
	cli := newEngine(t, Config{SliceSize: 64 << 10})
	mine := make([]byte, 1<<20)
	if err := cli.RegisterSegment("mine", mine); err != nil {
		t.Fatal(err)
	}
	src := randBytes(77, 300<<10)
	dstL, dstR := make([]byte, 1000), make([]byte, 300<<10)
	errs := cli.Do(context.Background(), []Request{
		{Op: Write, Segment: "mine", Offset: 10, Buf: src[:1000]},
		{Op: Write, Endpoint: addr, Segment: "remote", Offset: 5, Buf: src},
		{Op: Read, Endpoint: addr, Segment: "remote", Offset: 1 << 20, Buf: dstL}, // out of bounds
		{Op: Read, Endpoint: addr, Segment: "mine", Offset: 10, Buf: dstL},        // local despite Endpoint
		{Op: Read, Endpoint: addr, Segment: "remote", Offset: 500 << 10, Buf: dstR},
	})
	for i, want := range []kverr.Code{kverr.OK, kverr.OK, kverr.InvalidParams, kverr.OK, kverr.OK} {
		if kverr.CodeOf(errs[i]) != want {
			t.Fatalf("request %d: %v, want %v", i, errs[i], want)
		}
	}
	if !bytes.Equal(dstL, src[:1000]) || !bytes.Equal(mem[5:5+len(src)], src) || !bytes.Equal(dstR, mem[500<<10:800<<10]) {
		t.Fatal("mixed batch moved the wrong bytes")
	}
	if st := cli.Stats(); st.LocalRequests != 2 || st.TCPRequests != 2 || st.Errors != 1 {
		t.Fatalf("stats %+v", st)
	}
}
