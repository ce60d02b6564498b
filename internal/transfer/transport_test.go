package transfer

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// transportCase builds a client engine and a server engine holding segment
// "seg" (size bytes, pattern-filled) reached through one transport, and
// says how a request names it.
type transportCase struct {
	name string
	via  func(Stats) uint64 // the client's counter of that transport's requests
	// grants: the serving side checks data-plane grants on this path
	grants bool
	setup  func(t *testing.T, size int) (cli, srv *Engine, mem []byte, req func(Request) Request)
}

// transportCases is every transport this build has. A transport that
// cannot run here (RDMA without a device) is in the table and skips with
// the reason.
func transportCases() []transportCase {
	cs := []transportCase{
		{name: "local", via: func(s Stats) uint64 { return s.LocalRequests },
			setup: func(t *testing.T, size int) (*Engine, *Engine, []byte, func(Request) Request) {
				e := newEngine(t, Config{})
				mem := make([]byte, size)
				fillPattern(mem, 0)
				if err := e.RegisterSegment("seg", mem); err != nil {
					t.Fatal(err)
				}
				return e, e, mem, func(r Request) Request { return r }
			}},
		{name: "tcp", via: func(s Stats) uint64 { return s.TCPRequests }, grants: true,
			setup: func(t *testing.T, size int) (*Engine, *Engine, []byte, func(Request) Request) {
				srv, mem, addr := serverEngine(t, "seg", size)
				cli := newEngine(t, Config{DisableSharedMemory: true})
				return cli, srv, mem, func(r Request) Request { r.Endpoint = addr; return r }
			}},
		{name: "tls", via: func(s Stats) uint64 { return s.TCPRequests }, grants: true,
			setup: func(t *testing.T, size int) (*Engine, *Engine, []byte, func(Request) Request) {
				srvTLS, cliTLS := testTLS(t)
				srv := newEngine(t, Config{ServerTLS: srvTLS})
				mem := make([]byte, size)
				fillPattern(mem, 0)
				if err := srv.RegisterSegment("seg", mem); err != nil {
					t.Fatal(err)
				}
				a, err := srv.Listen("127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				ep := TLSEndpoint(a.String(), true)
				cli := newEngine(t, Config{ClientTLS: cliTLS, DisableSharedMemory: true})
				return cli, srv, mem, func(r Request) Request { r.Endpoint = ep; return r }
			}},
		{name: "shm", via: func(s Stats) uint64 { return s.SharedRequests },
			setup: func(t *testing.T, size int) (*Engine, *Engine, []byte, func(Request) Request) {
				srv, mem, addr := sharedServer(t, size)
				if err := srv.RegisterSegment("seg", mem); err != nil {
					t.Fatal(err)
				}
				cli := newEngine(t, Config{})
				// Discovery runs in the background: wait for the mapping.
				eventually(t, "shared mapping", func() error {
					_ = do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "seg", Buf: make([]byte, 1)})
					if cli.Stats().SharedRequests == 0 {
						return errors.New("not mapped yet")
					}
					return nil
				})
				return cli, srv, mem, func(r Request) Request { r.Endpoint = addr; return r }
			}},
		{name: "mem", via: func(s Stats) uint64 { return s.MemRequests }, grants: true,
			setup: func(t *testing.T, size int) (*Engine, *Engine, []byte, func(Request) Request) {
				n := NewMemNet()
				srv := newEngine(t, Config{MemNet: n})
				mem := make([]byte, size)
				fillPattern(mem, 0)
				if err := srv.RegisterSegment("seg", mem); err != nil {
					t.Fatal(err)
				}
				ep, err := n.Attach("box", srv)
				if err != nil {
					t.Fatal(err)
				}
				cli := newEngine(t, Config{MemNet: n})
				return cli, srv, mem, func(r Request) Request { r.Endpoint = ep; return r }
			}},
	}
	return append(append(cs, fakeRDMACase()), rdmaCases()...)
}

// TestTransportContract runs one contract over every transport: writes and
// reads of several sizes land in and come from the server's memory, Sum is
// the bytes' CRC32C (written or read, batched or not), an extent outside the segment is INVALID_PARAMS, an
// unknown segment SEGMENT_NOT_FOUND, and (where the serving side checks
// them) a missing grant PERMISSION_DENIED and a valid one served; the
// transport's own counter shows it carried the requests.
func TestTransportContract(t *testing.T) {
	const size = 8<<20 + 4096
	for _, tc := range transportCases() {
		t.Run(tc.name, func(t *testing.T) {
			cli, srv, mem, at := tc.setup(t, size)
			before := tc.via(cli.Stats())
			for i, n := range []int{1, 4096, 65537, 1<<20 + 3, 3<<20 + 1} {
				off := uint64(size - n - i)
				src := randBytes(uint64(n)+7, n)
				wsum := uint32(0xdeadbeef)
				if err := do1(t, cli, at(Request{Op: Write, Segment: "seg", Offset: off, Buf: src, Sum: &wsum})); err != nil {
					t.Fatalf("write %d: %v", n, err)
				}
				if !bytes.Equal(mem[off:off+uint64(n)], src) {
					t.Fatalf("write %d: server memory differs", n)
				}
				if want := crc32c.Checksum(src); wsum != want {
					t.Fatalf("write %d: Sum %#x, want %#x", n, wsum, want)
				}
				dst := make([]byte, n)
				var sum uint32
				if err := do1(t, cli, at(Request{Op: Read, Segment: "seg", Offset: off, Buf: dst, Sum: &sum})); err != nil {
					t.Fatalf("read %d: %v", n, err)
				}
				if !bytes.Equal(dst, src) {
					t.Fatalf("read %d: bytes differ", n)
				}
				if want := crc32c.Checksum(src); sum != want {
					t.Fatalf("read %d: Sum %#x, want %#x", n, sum, want)
				}
			}
			// A batch of many small requests in one Submit (batch frames
			// over TCP), each its own result.
			reqs := make([]Request, 64)
			sums := make([]uint32, len(reqs))
			for i := range reqs {
				reqs[i] = at(Request{Op: Write, Segment: "seg", Offset: uint64(i * 4096), Buf: randBytes(uint64(i), 4096)})
				if i%2 == 0 {
					reqs[i].Sum = &sums[i]
				}
			}
			for i, err := range cli.Do(context.Background(), reqs) {
				if err != nil || !bytes.Equal(mem[i*4096:(i+1)*4096], reqs[i].Buf) {
					t.Fatalf("batch write %d: %v", i, err)
				}
				if want := crc32c.Checksum(reqs[i].Buf); i%2 == 0 && sums[i] != want {
					t.Fatalf("batch write %d: Sum %#x, want %#x", i, sums[i], want)
				}
			}
			if got := tc.via(cli.Stats()) - before; got < 5+64 {
				t.Fatalf("%s carried %d requests, want >= %d (stats %+v)", tc.name, got, 5+64, cli.Stats())
			}
			wantCode(t, do1(t, cli, at(Request{Op: Read, Segment: "seg", Offset: size - 10, Buf: make([]byte, 11)})), kverr.InvalidParams, "seg")
			if tc.name != "local" { // locally, an unknown segment without an endpoint is INVALID_PARAMS
				wantCode(t, do1(t, cli, at(Request{Op: Read, Segment: "nope", Buf: make([]byte, 11)})), kverr.SegmentNotFound, "nope")
			}
			if !tc.grants {
				return
			}
			k := grant.NewKey(1)
			srv.SetGrantKeys(k)
			wantCode(t, do1(t, cli, at(Request{Op: Write, Segment: "seg", Buf: make([]byte, 64)})), kverr.PermissionDenied, "missing")
			tok := grant.Sign(k, "seg", 0, 0, 64, grant.Write, grant.Session{}, time.Now().Add(time.Hour))
			if err := do1(t, cli, at(Request{Op: Write, Segment: "seg", Buf: make([]byte, 64), Grant: tok})); err != nil {
				t.Fatalf("granted write: %v", err)
			}
			if srv.Stats().GrantRefusals["missing"] == 0 {
				t.Fatal("refusal not counted")
			}
		})
	}
}

// TestTransportConcurrent moves bytes from several goroutines at once over
// every transport (run with -race).
func TestTransportConcurrent(t *testing.T) {
	const size = 4 << 20
	for _, tc := range transportCases() {
		t.Run(tc.name, func(t *testing.T) {
			cli, _, mem, at := tc.setup(t, size)
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					off := uint64(g) * (size / 8)
					for i := range 20 {
						src := randBytes(uint64(g*100+i), 32<<10)
						if err := cli.Do(context.Background(), []Request{at(Request{Op: Write, Segment: "seg", Offset: off, Buf: src})})[0]; err != nil {
							errs <- err
							return
						}
						dst := make([]byte, len(src))
						if err := cli.Do(context.Background(), []Request{at(Request{Op: Read, Segment: "seg", Offset: off, Buf: dst})})[0]; err != nil {
							errs <- err
							return
						}
						if !bytes.Equal(dst, src) {
							errs <- errors.New("read back other bytes")
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			_ = mem
		})
	}
}

// faultTransport is a fake route (named as such: a broken RDMA or shared
// memory path cannot be caused on this machine) that fails every request
// it gets with err, placed before the real routes.
type faultTransport struct {
	err   error
	calls int
}

func (f *faultTransport) Name() string             { return "fault" }
func (f *faultTransport) reaches(r *reqState) bool { return true }
func (f *faultTransport) submit(ctx context.Context, rs []*reqState) {
	for _, r := range rs {
		f.calls++
		r.sliceDone(f.err)
	}
}

// TestFallback: a request failed by a route with a connection-level
// TRANSFER_FAIL is carried by the next route (TCP here); a refusal, or a
// failure marked final, is not retried elsewhere.
func TestFallback(t *testing.T) {
	_, mem, addr := serverEngine(t, "seg", 1<<20)
	for _, c := range []struct {
		name     string
		err      error
		fallback bool
	}{
		{"connection failure", kverr.New(kverr.TransferFail, "", "fault: peer unreachable"), true},
		{"refusal", kverr.New(kverr.InvalidParams, "", "fault: refused"), false},
		{"grant refusal", kverr.New(kverr.PermissionDenied, "", "fault: grant refused"), false},
		{"final", errors.Join(kverr.New(kverr.TransferFail, "", "fault: peer died during the copy"), errFinal), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cli := newEngine(t, Config{DisableSharedMemory: true})
			f := &faultTransport{err: c.err}
			cli.routes = append([]Transport{f}, cli.routes...)
			src := randBytes(3, 5000)
			var reqs []Request
			for i := range 3 {
				reqs = append(reqs, Request{Op: Write, Endpoint: addr, Segment: "seg", Offset: uint64(i * 8192), Buf: src})
			}
			errs := cli.Do(context.Background(), reqs)
			st := cli.Stats()
			if f.calls != 3 {
				t.Fatalf("fault route got %d requests, want 3", f.calls)
			}
			for i, err := range errs {
				if c.fallback {
					if err != nil || !bytes.Equal(mem[i*8192:i*8192+5000], src) {
						t.Fatalf("request %d after fallback: %v", i, err)
					}
				} else if kverr.CodeOf(err) != kverr.CodeOf(c.err) {
					t.Fatalf("request %d: %v, want the route's own error %v", i, err, c.err)
				}
			}
			if want := map[bool]uint64{true: 3, false: 0}[c.fallback]; st.Fallbacks != want || st.TCPRequests != want {
				t.Fatalf("fallbacks %d, TCP requests %d, want %d", st.Fallbacks, st.TCPRequests, want)
			}
		})
	}
}

// TestNoRoute: an endpoint no transport reaches (an in-memory one without
// the network) fails with TRANSFER_FAIL naming it.
func TestNoRoute(t *testing.T) {
	cli := newEngine(t, Config{})
	wantCode(t, do1(t, cli, Request{Op: Read, Endpoint: "mem://x", Segment: "seg", Buf: make([]byte, 1)}), kverr.TransferFail, "mem://x")
	n := NewMemNet()
	srv := newEngine(t, Config{MemNet: n})
	if err := srv.RegisterSegment("seg", make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	ep, _ := n.Attach("a", srv)
	cli2 := newEngine(t, Config{MemNet: n})
	n.Partition("a", true)
	wantCode(t, do1(t, cli2, Request{Op: Read, Endpoint: ep, Segment: "seg", Buf: make([]byte, 1)}), kverr.TransferFail, "unreachable")
	n.Partition("a", false)
	if err := do1(t, cli2, Request{Op: Read, Endpoint: ep, Segment: "seg", Buf: make([]byte, 1)}); err != nil {
		t.Fatal(err)
	}
}

// TestRegistry: one record of segments, what the appliance and the client
// look up instead of keeping their own.
func TestRegistry(t *testing.T) {
	e := newEngine(t, Config{})
	a, b := make([]byte, 100), make([]byte, 200)
	for name, m := range map[string][]byte{"b": b, "a": a} {
		if err := e.RegisterSegment(name, m); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.Segments(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("Segments %v", got)
	}
	if m, ok := e.Segment("b"); !ok || len(m) != 200 {
		t.Fatalf("Segment(b) = %d bytes, %v", len(m), ok)
	}
	wantCode(t, e.RegisterSegment("a", a), kverr.SegmentAlreadyExists, "a")
	if err := e.UnregisterSegment("a"); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Segment("a"); ok {
		t.Fatal("unregistered segment still found")
	}
	if (e.Offer("b") != SegmentOffer{}) && e.RDMAAddr() == "" {
		t.Fatalf("offer %+v without RDMA", e.Offer("b"))
	}
}
