package transfer

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// TestGrantsEnforced drives every refusal reason over real TCP (single and
// batch frames, a segment and an extent source) and checks that nothing
// was written and each refusal was counted.
func TestGrantsEnforced(t *testing.T) {
	srv, mem, addr := serverEngine(t, "seg", 64<<10)
	if err := srv.RegisterSource("box/ssd", patternSource{}); err != nil {
		t.Fatal(err)
	}
	var refused []string
	srv.cfg.OnGrantRefused = func(reason, detail string) { refused = append(refused, reason) } // served on one conn at a time here
	cli := newEngine(t, Config{ConnsPerPeer: 1, DisableSharedMemory: true})
	k1 := grant.NewKey(1)
	s := grant.SessionOf("client-a")
	exp := time.Now().Add(time.Minute)
	sign := func(seg string, bucket, off, n uint64, op grant.Op, exp time.Time) []byte {
		return grant.Sign(k1, seg, bucket, off, n, op, s, exp)
	}
	// Not enforced yet: frames without grants are served (open mode).
	buf := make([]byte, 4096)
	if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "seg", Buf: buf}); err != nil {
		t.Fatal(err)
	}
	srv.SetGrantKeys(k1)
	before := bytes.Clone(mem)
	junk := bytes.Repeat([]byte{0xEE}, 4096)
	cases := []struct {
		name   string
		req    Request
		reason string
	}{
		{"no grant", Request{Op: Write, Segment: "seg", Offset: 0, Buf: junk}, "missing"},
		{"read grant to write", Request{Op: Write, Segment: "seg", Offset: 0, Buf: junk, Grant: sign("seg", 0, 0, 4096, grant.Read, exp)}, "wrong_op"},
		{"neighbouring extent", Request{Op: Write, Segment: "seg", Offset: 4096, Buf: junk, Grant: sign("seg", 0, 0, 4096, grant.Write, exp)}, "out_of_extent"},
		{"overlapping extent", Request{Op: Write, Segment: "seg", Offset: 2048, Buf: junk, Grant: sign("seg", 0, 0, 4096, grant.Write, exp)}, "out_of_extent"},
		{"expired", Request{Op: Write, Segment: "seg", Offset: 0, Buf: junk, Grant: sign("seg", 0, 0, 4096, grant.Write, time.Now().Add(-time.Millisecond))}, "expired"},
		{"other segment", Request{Op: Write, Segment: "seg", Offset: 0, Buf: junk, Grant: sign("seg2", 0, 0, 4096, grant.Write, exp)}, "forged"},
		{"unknown key", Request{Op: Write, Segment: "seg", Offset: 0, Buf: junk, Grant: grant.Sign(grant.NewKey(2), "seg", 0, 0, 4096, grant.Write, s, exp)}, "unknown_key"},
		{"forged key", Request{Op: Write, Segment: "seg", Offset: 0, Buf: junk, Grant: grant.Sign(grant.Key{ID: 1}, "seg", 0, 0, 4096, grant.Write, s, exp)}, "forged"},
		{"source without grant", Request{Op: Read, Segment: "box/ssd", Bucket: 2, Buf: buf}, "missing"},
		{"source other bucket", Request{Op: Read, Segment: "box/ssd", Bucket: 3, Buf: buf, Grant: sign("box/ssd", 2, 0, 4096, grant.Read, exp)}, "out_of_extent"},
	}
	for _, c := range cases {
		c.req.Endpoint = addr
		wantCode(t, do1(t, cli, c.req), kverr.PermissionDenied, c.reason)
	}
	if !bytes.Equal(mem, before) {
		t.Fatal("a refused WRITE changed the segment")
	}
	st := srv.Stats()
	for reason, want := range map[string]uint64{"missing": 2, "wrong_op": 1, "out_of_extent": 3, "expired": 1, "forged": 2, "unknown_key": 1} {
		if st.GrantRefusals[reason] != want {
			t.Fatalf("refusals[%s] = %d, want %d (%v)", reason, st.GrantRefusals[reason], want, st.GrantRefusals)
		}
	}
	if len(refused) != len(cases) || st.GrantKeys != 1 {
		t.Fatalf("OnGrantRefused called %d times for %d refusals; keys %d", len(refused), len(cases), st.GrantKeys)
	}

	// Valid grants: a write sliced into frames (each slice carries the
	// grant of the whole extent), a read, an extent-source read.
	data := bytes.Repeat([]byte{0x5A}, 16<<10)
	small := newEngine(t, Config{SliceSize: 4096, DisableSharedMemory: true})
	if err := do1(t, small, Request{Op: Write, Endpoint: addr, Segment: "seg", Offset: 8192, Buf: data, Grant: sign("seg", 0, 8192, 16<<10, grant.Write, exp)}); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16<<10)
	if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "seg", Offset: 8192, Buf: got, Grant: sign("seg", 0, 8192, 16<<10, grant.Read, exp)}); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("granted read: %v", err)
	}
	if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "box/ssd", Bucket: 2, Buf: buf, Grant: sign("box/ssd", 2, 0, 4096, grant.Read, exp)}); err != nil {
		t.Fatal(err)
	}

	// Rotation: the previous key still verifies beside the new one.
	k2 := grant.NewKey(2)
	srv.SetGrantKeys(k2, k1)
	if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "seg", Buf: buf, Grant: sign("seg", 0, 0, 4096, grant.Read, exp)}); err != nil {
		t.Fatal(err)
	}
	// A grant of the wrong size is the caller's mistake, caught locally.
	wantCode(t, do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "seg", Buf: buf, Grant: []byte{1, 2}}), kverr.InvalidParams, "grant of 2 bytes")
}

// TestGrantsBatchFrames: a batch whose grants are all valid travels as batch
// frames; one bad grant refuses its frame, the client resends the extents
// one frame each, and only the bad request fails.
func TestGrantsBatchFrames(t *testing.T) {
	srv, mem, addr := serverEngine(t, "seg", 1<<20)
	k := grant.NewKey(7)
	srv.SetGrantKeys(k)
	cli := newEngine(t, Config{ConnsPerPeer: 2, DisableSharedMemory: true})
	exp := time.Now().Add(time.Minute)
	const n, size = 32, 4096
	reqs := make([]Request, n)
	for i := range reqs {
		b := bytes.Repeat([]byte{byte(i + 1)}, size)
		off := uint64(i * size)
		reqs[i] = Request{Op: Write, Endpoint: addr, Segment: "seg", Offset: off, Buf: b,
			Grant: grant.Sign(k, "seg", 0, off, size, grant.Write, grant.Session{}, exp)}
	}
	framesBefore := srv.Stats().ServedFrames
	for i, err := range cli.Do(context.Background(), reqs) {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if f := srv.Stats().ServedFrames - framesBefore; f >= n {
		t.Fatalf("%d frames for %d requests: batch frames not used", f, n)
	}
	for i := range n {
		if mem[i*size] != byte(i+1) {
			t.Fatalf("extent %d not written", i)
		}
	}
	before := bytes.Clone(mem)
	// The race detector sees no order through TCP: installing the key again
	// (an atomic store the server loads per frame) orders the clone before
	// the server's writes, and Stats (atomic loads) orders them before the
	// checks.
	srv.SetGrantKeys(k)
	for i := range reqs {
		reqs[i].Buf = bytes.Repeat([]byte{0xEE}, size)
	}
	reqs[5].Grant = grant.Sign(k, "seg", 0, 6*size, size, grant.Write, grant.Session{}, exp) // neighbour's extent
	reqs[9].Grant = nil
	errs := cli.Do(context.Background(), reqs)
	for i, err := range errs {
		switch i {
		case 5, 9:
			wantCode(t, err, kverr.PermissionDenied, "")
		default:
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
	}
	srv.Stats()
	for i := range n {
		want := byte(0xEE)
		if i == 5 || i == 9 {
			want = before[i*size]
		}
		if !bytes.Equal(mem[i*size:(i+1)*size], bytes.Repeat([]byte{want}, size)) {
			t.Fatalf("extent %d: %#x, want %#x", i, mem[i*size], want)
		}
	}
	// Batch READs with grants.
	for i := range reqs {
		reqs[i].Op, reqs[i].Buf = Read, make([]byte, size)
		reqs[i].Grant = grant.Sign(k, "seg", 0, uint64(i*size), size, grant.Read, grant.Session{}, exp)
	}
	for i, err := range cli.Do(context.Background(), reqs) {
		if err != nil || !bytes.Equal(reqs[i].Buf, mem[i*size:(i+1)*size]) {
			t.Fatalf("read %d: %v", i, err)
		}
	}
}

// TestGrantsOldFrameRefused: a hand-made version-1 frame (no grant) to an
// enforcing server is answered PERMISSION_DENIED, its payload discarded,
// and the connection stays in step.
func TestGrantsOldFrameRefused(t *testing.T) {
	srv, mem, addr := serverEngine(t, "seg", 4096)
	srv.SetGrantKeys(grant.NewKey(1))
	before := bytes.Clone(mem)
	c := rawConn(t, addr)
	w := append(frame(Write, 1, "seg", 0, 0, 8), "AAAAAAAA"...)
	if _, err := c.Write(append(w, frame(Read, 2, "seg", 0, 0, 8)...)); err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 2; id++ {
		h, msg, _ := readResponse(t, c)
		if h.id != id || kverr.Code(h.status) != kverr.PermissionDenied {
			t.Fatalf("frame %d: status %d %q", id, h.status, msg)
		}
	}
	if !bytes.Equal(mem, before) {
		t.Fatal("refused WRITE changed the segment")
	}
}

// BenchmarkGrantTCP: READ and WRITE over loopback TCP to a server engine
// enforcing grants beside one that does not (the open configuration), both
// in this process, interleaved request by request (alternating which goes
// first) so both see the same machine load. Reports grants-MB/s, open-MB/s
// and x-open (grants / open).
//
//	go test -run '^$' -bench GrantTCP -count 3 ./internal/transfer/
func BenchmarkGrantTCP(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		for _, op := range []Op{Read, Write} {
			b.Run(fmt.Sprintf("%s/%dKiB", op, size>>10), func(b *testing.B) {
				enf, _, addrG := serverEngine(b, "seg", 16<<20)
				_, _, addrO := serverEngine(b, "seg", 16<<20)
				k := grant.NewKey(1)
				enf.SetGrantKeys(k)
				gop := grant.Read
				if op == Write {
					gop = grant.Write
				}
				tok := grant.Sign(k, "seg", 0, 0, uint64(size), gop, grant.Session{}, time.Now().Add(time.Hour))
				cli := newEngine(b, Config{DisableSharedMemory: true})
				buf := make([]byte, size)
				one := func(addr string, tok []byte) time.Duration {
					t0 := time.Now()
					if err := do1(b, cli, Request{Op: op, Endpoint: addr, Segment: "seg", Buf: buf, Grant: tok}); err != nil {
						b.Fatal(err)
					}
					return time.Since(t0)
				}
				var tg, to []time.Duration
				i := 0
				for b.Loop() {
					if i%2 == 0 {
						tg = append(tg, one(addrG, tok))
						to = append(to, one(addrO, nil))
					} else {
						to = append(to, one(addrO, nil))
						tg = append(tg, one(addrG, tok))
					}
					i++
				}
				// Medians: on a shared machine a few descheduled
				// operations would dominate sums.
				mg, mo := medianDur(tg), medianDur(to)
				b.ReportMetric(float64(size)/1e6/mg.Seconds(), "grants-MB/s")
				b.ReportMetric(float64(size)/1e6/mo.Seconds(), "open-MB/s")
				b.ReportMetric(mo.Seconds()/mg.Seconds(), "x-open")
			})
		}
	}
}

// medianDur is the median of d (sorted in place).
func medianDur(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// grantFrame is frame with a grant (version 2).
func grantFrame(op Op, id uint64, name string, off, length uint64, tok []byte) []byte {
	b := make([]byte, requestHeaderLen+len(name))
	putRequestHeader(b, reqHeader{op: op, nameLen: len(name), id: id, offset: off, length: length, grant: true})
	copy(b[requestHeaderLen:], name)
	return append(b, tok...)
}

// FuzzServeGranted is FuzzServe against an engine enforcing grants: any
// input is answered or closes the connection, and nothing is written
// unless a valid grant allowed it (no valid grant exists for the second
// half of the segment, so it must stay untouched).
func FuzzServeGranted(f *testing.F) {
	k := grant.NewKey(3)
	exp := time.Now().Add(time.Hour)
	ok := grant.Sign(k, "seg", 0, 0, 32, grant.Write, grant.Session{}, exp)
	f.Add(append(grantFrame(Write, 1, "seg", 0, 4, ok), 1, 2, 3, 4))
	f.Add(append(grantFrame(Write, 1, "seg", 40, 4, ok), 1, 2, 3, 4))
	f.Add(append(frame(Write, 1, "seg", 0, 40, 4), 1, 2, 3, 4))
	f.Add(grantFrame(Read, 1, "seg", 0, 4, ok))
	f.Add(grantFrame(opShm, 1, "shm", 0, 0, nil))
	f.Add(batchFrame(opBatchWrite, 1, []string{"seg"}, []batchExtent{{0, 0, 4}, {0, 40, 4}}, []byte("12345678")))
	e, err := New(Config{IOTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	defer e.Close()
	e.SetGrantKeys(k)
	seg := make([]byte, 64)
	if err := e.RegisterSegment("seg", seg); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for i := range seg[32:] {
			seg[32+i] = 0xA5
		}
		serveInput(e, in)
		for i, v := range seg[32:] {
			if v != 0xA5 {
				t.Fatalf("byte %d of the ungranted half was written", 32+i)
			}
		}
	})
}

// TestGrantsRevoked: over real TCP, a write grant whose extent the master
// freed after signing it (a free record applied to the engine's
// revocation table) is refused as "revoked", single and batch frames,
// with nothing written; a grant for the extent's next occupant, placed
// after the free, is served; one placed after records not yet applied
// waits for them.
func TestGrantsRevoked(t *testing.T) {
	srv, _, addr := serverEngine(t, "seg", 64<<10)
	k := grant.NewKey(3)
	srv.SetGrantKeys(k)
	var ring grant.Keyring
	ring.Set(k)
	cli := newEngine(t, Config{ConnsPerPeer: 1, DisableSharedMemory: true})
	exp := time.Now().Add(time.Minute)
	const outbox = 0xC0FFEE
	sign := func(off uint64, seq uint64) []byte {
		return ring.Sign("seg", 0, off, 4096, grant.Write, grant.Session{}, exp, grant.Mark{Outbox: outbox, Seq: seq})
	}
	stale := sign(0, 3)     // signed after record 3, before the free
	staleB := sign(4096, 3) // a second extent, freed too (batch frame)
	rev := srv.Revocations()
	// Before the node follows a records stream, placed grants are served
	// as before (a node without a DRAM directory).
	if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "seg", Buf: make([]byte, 4096),
		Grant: ring.Sign("seg", 0, 0, 4096, grant.Read, grant.Session{}, exp, grant.Mark{Outbox: outbox, Seq: 3})}); err != nil {
		t.Fatal(err)
	}
	rev.Follow(outbox)
	until := time.Now().Add(time.Minute).UnixNano()
	rev.Revoke("seg", 0, 7, until, time.Now().UnixNano())
	rev.Revoke("seg", 4096, 8, until, time.Now().UnixNano())
	rev.Applied(8)
	// The segment is compared through the data port (a read grant of an
	// unplaced extent), not its memory: the server writes that memory
	// concurrently with this goroutine, which only TCP orders.
	snapshot := func() []byte {
		b := make([]byte, 8192)
		if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "seg", Buf: b,
			Grant: ring.Sign("seg", 0, 0, 8192, grant.Read, grant.Session{}, exp, grant.Mark{})}); err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := snapshot()
	junk := bytes.Repeat([]byte{0xEE}, 4096)
	wantCode(t, do1(t, cli, Request{Op: Write, Endpoint: addr, Segment: "seg", Buf: junk, Grant: stale}), kverr.PermissionDenied, "revoked")
	errs := cli.Do(context.Background(), []Request{
		{Op: Write, Endpoint: addr, Segment: "seg", Offset: 0, Buf: junk, Grant: stale},
		{Op: Write, Endpoint: addr, Segment: "seg", Offset: 4096, Buf: junk, Grant: staleB},
	})
	for _, err := range errs {
		wantCode(t, err, kverr.PermissionDenied, "revoked")
	}
	if !bytes.Equal(snapshot(), before) {
		t.Fatal("a revoked grant wrote")
	}
	// One per refused frame: the single write, the batch frame, then each
	// request resent alone.
	if got := srv.Stats().GrantRefusals["revoked"]; got < 3 {
		t.Fatalf("revoked refusals %d, want at least 3", got)
	}
	// The extent's next occupant: its grant is placed after the free.
	if err := do1(t, cli, Request{Op: Write, Endpoint: addr, Segment: "seg", Buf: junk, Grant: sign(0, 8)}); err != nil {
		t.Fatal(err)
	}
	// A grant placed after a record not applied yet waits for it.
	done := make(chan error, 1)
	go func() {
		done <- do1(t, cli, Request{Op: Write, Endpoint: addr, Segment: "seg", Offset: 8192, Buf: junk, Grant: sign(8192, 9)})
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("served before its records were applied: %v", err)
	default:
	}
	rev.Applied(9)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A rotation keeps the table; keys all replaced (the master made this
	// node new ones) clear it: every grant it could void fails on its key.
	k2 := grant.NewKey(4)
	srv.SetGrantKeys(k2, k)
	if rev.Len() != 2 {
		t.Fatalf("rotation changed the table: %s", rev)
	}
	srv.SetGrantKeys(grant.NewKey(5))
	if rev.Len() != 0 {
		t.Fatalf("new keys kept the table: %s", rev)
	}
	wantCode(t, do1(t, cli, Request{Op: Write, Endpoint: addr, Segment: "seg", Buf: junk, Grant: stale}), kverr.PermissionDenied, "unknown_key")
}

// TestUnsignedGrantsRevokedWhenOpen: a node without keys (the open
// configuration) serves every request, but an unsigned grant (what a
// master without grants hands out for a MEMORY replica) whose extent was
// freed after it was placed is refused "revoked", over TCP, in a batch
// frame and through shared memory; in-place readers are told the same
// (Admits).
func TestUnsignedGrantsRevokedWhenOpen(t *testing.T) {
	srv, mem, addr := sharedServer(t, 2<<20)
	if err := srv.RegisterSegment("seg", mem[:1<<20]); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Minute)
	const outbox = 0xABC
	unsigned := func(off, seq uint64) []byte {
		return grant.Unsigned(0, off, 4096, grant.Read, grant.Session{}, exp, grant.Mark{Outbox: outbox, Seq: seq})
	}
	rev := srv.Revocations()
	rev.Follow(outbox)
	now := time.Now().UnixNano()
	rev.Revoke("seg", 0, 5, now+int64(time.Minute), now)
	rev.Applied(5)
	buf := make([]byte, 4096)
	for _, shm := range []bool{false, true} {
		cli := newEngine(t, Config{DisableSharedMemory: !shm})
		read := func(off uint64, tok []byte) error {
			return do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "seg", Offset: off, Buf: buf, Grant: tok})
		}
		if shm {
			eventually(t, "seg mapped", func() error {
				if err := read(4096, nil); err != nil {
					t.Fatal(err)
				}
				if cli.Stats().SharedRequests == 0 {
					return fmt.Errorf("not shared yet")
				}
				return nil
			})
		}
		wantCode(t, read(0, unsigned(0, 4)), kverr.PermissionDenied, "revoked")
		for what, tok := range map[string][]byte{
			"no grant":                 nil,
			"placed after the free":    unsigned(0, 5),
			"another extent":           unsigned(4096, 4),
			"signed, not checked here": grant.Sign(grant.NewKey(1), "seg", 0, 0, 4096, grant.Read, grant.Session{}, exp),
		} {
			off := uint64(0)
			if what == "another extent" {
				off = 4096
			}
			if err := read(off, tok); err != nil {
				t.Fatalf("shm %v, %s: %v", shm, what, err)
			}
		}
		errs := cli.Do(context.Background(), []Request{
			{Op: Read, Endpoint: addr, Segment: "seg", Offset: 4096, Buf: make([]byte, 4096), Grant: unsigned(4096, 4)},
			{Op: Read, Endpoint: addr, Segment: "seg", Offset: 0, Buf: make([]byte, 4096), Grant: unsigned(0, 4)},
		})
		if errs[0] != nil {
			t.Fatalf("shm %v, batch: a live extent: %v", shm, errs[0])
		}
		wantCode(t, errs[1], kverr.PermissionDenied, "revoked")
	}
	if srv.Admits("seg", unsigned(0, 4)) || !srv.Admits("seg", unsigned(0, 5)) || !srv.Admits("seg", nil) {
		t.Fatal("Admits: an open node's verdicts on unsigned grants")
	}
}
