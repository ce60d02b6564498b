package transfer

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/kverr"
)

// batchServer is a listening engine with segments "a" and "b" of size bytes
// each (pattern-filled) and an extent source "ssd0".
func batchServer(t *testing.T, size int) (*Engine, []byte, []byte, string) {
	t.Helper()
	e := newEngine(t, Config{})
	a, b := make([]byte, size), make([]byte, size)
	fillPattern(a, 0)
	fillPattern(b, 1<<20)
	for name, mem := range map[string][]byte{"a": a, "b": b} {
		if err := e.RegisterSegment(name, mem); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.RegisterSource("ssd0", patternSource{}); err != nil {
		t.Fatal(err)
	}
	addr, err := e.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return e, a, b, addr.String()
}

// Many small requests of one Submit travel in a few frames, land where they
// should, come back in order with per-request checksums.
func TestBatchFramesRoundTrip(t *testing.T) {
	srv, a, b, addr := batchServer(t, 4<<20)
	cli := newEngine(t, Config{})
	const n = 300
	reqs := make([]Request, n)
	srcs := make([][]byte, n)
	off := map[string]uint64{}
	for i := range n {
		seg := []string{"a", "b"}[i%2]
		n := 1 + (i*977)%(20<<10) // small ones share chunk reads, 16 KiB+ are read alone
		if i%50 == 7 {
			n = 200 << 10 // read through the chunk buffer in pieces
		}
		srcs[i] = randBytes(uint64(i), n)
		reqs[i] = Request{Op: Write, Endpoint: addr, Segment: seg, Offset: off[seg], Buf: srcs[i]}
		off[seg] += uint64(len(srcs[i])) + 3
	}
	frames0 := srv.Stats().ServedFrames
	for i, err := range cli.Do(context.Background(), reqs) {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if f := srv.Stats().ServedFrames - frames0; f > DefaultConnsPerPeer {
		t.Fatalf("%d writes took %d frames, want at most %d", n, f, DefaultConnsPerPeer)
	}
	for i, r := range reqs {
		mem := map[string][]byte{"a": a, "b": b}[r.Segment]
		if !bytes.Equal(mem[r.Offset:r.Offset+uint64(len(r.Buf))], srcs[i]) {
			t.Fatalf("write %d did not land in %s at %d", i, r.Segment, r.Offset)
		}
	}
	sums := make([]uint32, n)
	for i := range reqs {
		reqs[i].Op, reqs[i].Buf = Read, make([]byte, len(srcs[i]))
		if i%3 != 0 {
			reqs[i].Sum = &sums[i]
		}
	}
	frames0 = srv.Stats().ServedFrames
	for i, err := range cli.Do(context.Background(), reqs) {
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if !bytes.Equal(reqs[i].Buf, srcs[i]) {
			t.Fatalf("read %d: bytes differ", i)
		}
		if reqs[i].Sum != nil && sums[i] != crc32c.Checksum(srcs[i]) {
			t.Fatalf("read %d: sum %08x, want %08x", i, sums[i], crc32c.Checksum(srcs[i]))
		}
	}
	if f := srv.Stats().ServedFrames - frames0; f > DefaultConnsPerPeer {
		t.Fatalf("%d reads took %d frames", n, f)
	}
	if st := cli.Stats(); st.TCPRequests != 2*n || st.Errors != 0 {
		t.Fatalf("client stats %+v", st)
	}
}

// A batch with bad requests in it: each bad one fails with its own error,
// nothing of it is written, every good one succeeds.
func TestBatchPartialFailure(t *testing.T) {
	srv, a, _, addr := batchServer(t, 64<<10)
	// Not a clone of a: the race detector does not see the ordering a TCP
	// round trip gives, so reading a before the server writes it is reported.
	before := make([]byte, len(a))
	fillPattern(before, 0)
	cli := newEngine(t, Config{})
	val := bytes.Repeat([]byte{0xEE}, 1000)
	reqs := []Request{
		{Op: Write, Endpoint: addr, Segment: "a", Offset: 0, Buf: val},
		{Op: Write, Endpoint: addr, Segment: "a", Offset: 64<<10 - 10, Buf: val}, // past the end
		{Op: Write, Endpoint: addr, Segment: "nope", Offset: 0, Buf: val},
		{Op: Write, Endpoint: addr, Segment: "a", Offset: 2000, Buf: val},
		{Op: Write, Endpoint: addr, Segment: "ssd0", Offset: 0, Buf: val}, // read-only
	}
	errs := cli.Do(context.Background(), reqs)
	if errs[0] != nil || errs[3] != nil {
		t.Fatalf("good writes failed: %v, %v", errs[0], errs[3])
	}
	wantCode(t, errs[1], kverr.InvalidParams, "outside segment")
	wantCode(t, errs[2], kverr.SegmentNotFound, "nope")
	wantCode(t, errs[4], kverr.InvalidParams, "read-only")
	if !bytes.Equal(a[0:1000], val) || !bytes.Equal(a[2000:3000], val) {
		t.Fatal("good writes did not land")
	}
	if !bytes.Equal(a[64<<10-10:], before[64<<10-10:]) || !bytes.Equal(a[1000:2000], before[1000:2000]) || !bytes.Equal(a[3000:64<<10-10], before[3000:64<<10-10]) {
		t.Fatal("a refused write changed memory")
	}
	// The same for reads, with checksums.
	var s0, s1 uint32
	rd := []Request{
		{Op: Read, Endpoint: addr, Segment: "a", Offset: 0, Buf: make([]byte, 1000), Sum: &s0},
		{Op: Read, Endpoint: addr, Segment: "a", Offset: 1 << 30, Buf: make([]byte, 10), Sum: &s1},
		{Op: Read, Endpoint: addr, Segment: "a", Offset: 2000, Buf: make([]byte, 1000)},
	}
	errs = cli.Do(context.Background(), rd)
	if errs[0] != nil || errs[2] != nil || !bytes.Equal(rd[0].Buf, val) || !bytes.Equal(rd[2].Buf, val) || s0 != crc32c.Checksum(val) {
		t.Fatalf("good reads: %v %v", errs[0], errs[2])
	}
	wantCode(t, errs[1], kverr.InvalidParams, "outside segment")
	if s1 != 0 {
		t.Fatal("a failed read's Sum was written")
	}
	if st := srv.Stats(); st.MalformedFrames != 0 {
		t.Fatalf("refusals counted as malformed: %+v", st)
	}
}

// batchFrame encodes a batch request by hand: extents (name index, offset,
// length) over names, then payload.
func batchFrame(op Op, id uint64, names []string, exts []batchExtent, payload []byte) []byte {
	var total uint64
	for _, x := range exts {
		total += x.length
	}
	b := make([]byte, requestHeaderLen)
	putRequestHeader(b, reqHeader{op: op, nameLen: len(names), id: id, bucket: uint64(len(exts)), offset: uint64(batchDescLen(names, len(exts))), length: total})
	b = appendBatchDesc(b, names, exts)
	return append(b, payload...)
}

// The server validates every extent of a batch frame before touching
// memory: a bad one gets an error frame naming it, and the connection stays
// usable; counts outside the caps close the connection.
func TestBatchFrameValidation(t *testing.T) {
	srv, a, _, addr := batchServer(t, 4096)
	before := make([]byte, len(a)) // a's content, not read from a (see above)
	fillPattern(before, 0)
	c := rawConn(t, addr)
	pay := bytes.Repeat([]byte{9}, 200)
	cases := []struct {
		names []string
		exts  []batchExtent
		code  kverr.Code
		msg   string
	}{
		{[]string{"a"}, []batchExtent{{0, 0, 100}, {0, 4000, 100}}, kverr.InvalidParams, "batch extent 1 of 2"},
		{[]string{"a", "zz"}, []batchExtent{{0, 0, 100}, {1, 0, 100}}, kverr.SegmentNotFound, `"zz"`},
		{[]string{"ssd0"}, []batchExtent{{0, 0, 100}, {0, 100, 100}}, kverr.InvalidParams, "extent source"},
		{[]string{"a"}, []batchExtent{{0, 0, 100}, {1, 0, 100}}, kverr.InvalidParams, "name index 1"},
		{[]string{"a", "b"}, []batchExtent{{0, 0, 100}, {0, 100, 100}}, kverr.InvalidParams, "used by no extent"},
		{[]string{"a"}, []batchExtent{{0, ^uint64(0) - 50, 100}, {0, 0, 100}}, kverr.InvalidParams, "overflows"},
	}
	for i, tc := range cases {
		c.Write(batchFrame(opBatchWrite, uint64(i+1), tc.names, tc.exts, pay))
		h, msg, _ := readResponse(t, c)
		if h.id != uint64(i+1) || kverr.Code(h.status) != tc.code || !bytes.Contains([]byte(msg), []byte(tc.msg)) {
			t.Fatalf("case %d: status %d id %d %q, want %v mentioning %q", i, h.status, h.id, msg, tc.code, tc.msg)
		}
		if !bytes.Equal(a, before) {
			t.Fatalf("case %d: a refused batch changed memory", i)
		}
	}
	// Lengths that do not add up to the header's total.
	f := batchFrame(opBatchWrite, 50, []string{"a"}, []batchExtent{{0, 0, 100}, {0, 100, 100}}, pay)
	binary.BigEndian.PutUint64(f[32:], 201) // one byte more than the extents
	c.Write(append(f, 0))
	if h, msg, _ := readResponse(t, c); kverr.Code(h.status) != kverr.InvalidParams || !bytes.Contains([]byte(msg), []byte("sum to 200")) {
		t.Fatalf("sum mismatch: %d %q", h.status, msg)
	}
	// After every refusal the stream is in step: a good batch works.
	c.Write(batchFrame(opBatchWrite, 60, []string{"a"}, []batchExtent{{0, 0, 100}, {0, 1000, 100}}, pay))
	if h, msg, _ := readResponse(t, c); h.status != 0 || h.id != 60 {
		t.Fatalf("good batch after refusals: %d %q", h.status, msg)
	}
	if !bytes.Equal(a[0:100], pay[:100]) || !bytes.Equal(a[1000:1100], pay[100:]) {
		t.Fatal("good batch did not land")
	}
	c.Write(batchFrame(opBatchRead, 61, []string{"a"}, []batchExtent{{0, 1000, 50}, {0, 0, 30}}, nil))
	if h, _, p := readResponse(t, c); h.status != 0 || !bytes.Equal(p, append(bytes.Clone(a[1000:1050]), a[0:30]...)) {
		t.Fatalf("batch read: status %d, %d bytes", h.status, len(p))
	}
	if st := srv.Stats(); st.MalformedFrames != 0 {
		t.Fatalf("refusals closed connections: %+v", st)
	}
	// Counts outside the caps close the connection.
	for i, h := range []reqHeader{
		{op: opBatchWrite, nameLen: 1, bucket: 0, offset: 17, length: 1},                                             // no extents
		{op: opBatchWrite, nameLen: 1, bucket: MaxBatchExtents + 1, offset: 17 * (MaxBatchExtents + 1), length: 1e6}, // too many
		{op: opBatchRead, nameLen: 1, bucket: 2, offset: 1 << 20, length: 2},                                         // descriptor too long
		{op: opBatchRead, nameLen: 1, bucket: 2, offset: 34, length: MaxFrameLength + 1},                             // payload too long
		{op: opBatchRead, nameLen: 3, bucket: 2, offset: 40, length: 2},                                              // more names than extents
	} {
		c := rawConn(t, addr)
		b := make([]byte, requestHeaderLen)
		putRequestHeader(b, h)
		c.Write(b)
		expectClosed(t, c)
		if m := srv.Stats().MalformedFrames; m != uint64(i+1) {
			t.Fatalf("header %d: malformed count %d", i, m)
		}
	}
}

// A peer from before batch frames closes the connection on one; the client
// then sends that batch's requests one frame each, and every request
// succeeds.
func TestBatchToOldPeer(t *testing.T) {
	srv, a, _, addr := batchServer(t, 1<<20)
	srv.predatesBatch.Store(true)
	cli := newEngine(t, Config{})
	for round := range 2 {
		// Each round its own region: the race detector does not see the
		// ordering a TCP round trip gives, so a round rewriting what the
		// test read before would be reported.
		reqs := make([]Request, 40)
		for i := range reqs {
			reqs[i] = Request{Op: Write, Endpoint: addr, Segment: "a", Offset: uint64((round*40 + i) * 4096), Buf: randBytes(uint64(i), 4096)}
		}
		for i, err := range cli.Do(context.Background(), reqs) {
			if err != nil {
				t.Fatalf("round %d write %d: %v", round, i, err)
			}
			if off := reqs[i].Offset; !bytes.Equal(a[off:off+4096], reqs[i].Buf) {
				t.Fatalf("round %d write %d did not land", round, i)
			}
		}
	}
	st := srv.Stats()
	if st.MalformedFrames == 0 || st.MalformedFrames > 2*DefaultConnsPerPeer { // each frame and its one retry
		t.Fatalf("old peer saw %d batch frames; want the first call's only", st.MalformedFrames)
	}
}

// A pooled connection gone stale under a batch: the batch frame is retried
// once on a fresh connection.
func TestBatchStaleConnectionRetried(t *testing.T) {
	srv1, _, _, addr := batchServer(t, 1<<20)
	cli := newEngine(t, Config{ConnsPerPeer: 1})
	reqs := func() []Request {
		r := make([]Request, 8)
		for i := range r {
			r[i] = Request{Op: Read, Endpoint: addr, Segment: "a", Offset: uint64(i * 100), Buf: make([]byte, 100)}
		}
		return r
	}
	for _, err := range cli.Do(context.Background(), reqs()) {
		if err != nil {
			t.Fatal(err)
		}
	}
	srv1.Close()
	srv2 := newEngine(t, Config{})
	mem2 := bytes.Repeat([]byte{7}, 4096)
	if err := srv2.RegisterSegment("a", mem2); err != nil {
		t.Fatal(err)
	}
	if _, err := srv2.Listen(addr); err != nil {
		t.Skipf("cannot rebind %s for the restarted server: %v", addr, err)
	}
	rs := reqs()
	for i, err := range cli.Do(context.Background(), rs) {
		if err != nil {
			t.Fatalf("request %d on a stale connection: %v", i, err)
		}
		if !bytes.Equal(rs[i].Buf, mem2[:100]) {
			t.Fatal("read did not come from the restarted server")
		}
	}
	if f := srv2.Stats().ServedFrames; f != 1 {
		t.Fatalf("restarted server served %d frames, want the one batch", f)
	}
}

// Many callers submitting batches at once (run with -race).
func TestConcurrentBatchFrames(t *testing.T) {
	_, a, _, addr := batchServer(t, 8<<20)
	cli := newEngine(t, Config{ConnsPerPeer: 2, PipelineDepth: 2})
	const workers, per, size = 8, 64, 4096
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for round := range 5 {
				reqs := make([]Request, per)
				for i := range reqs {
					off := uint64((w*per + i) * size)
					reqs[i] = Request{Op: Write, Endpoint: addr, Segment: "a", Offset: off, Buf: randBytes(uint64(w<<20+round<<10+i), size)}
				}
				for i, err := range cli.Do(context.Background(), reqs) {
					if err != nil {
						errc <- fmt.Errorf("worker %d write %d: %w", w, i, err)
						return
					}
				}
				sums := make([]uint32, per)
				rd := make([]Request, per)
				for i := range rd {
					rd[i] = reqs[i]
					rd[i].Op, rd[i].Buf, rd[i].Sum = Read, make([]byte, size), &sums[i]
				}
				for i, err := range cli.Do(context.Background(), rd) {
					if err == nil && (!bytes.Equal(rd[i].Buf, reqs[i].Buf) || sums[i] != crc32c.Checksum(reqs[i].Buf)) {
						err = errors.New("bytes or sum differ")
					}
					if err != nil {
						errc <- fmt.Errorf("worker %d read %d: %w", w, i, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	_ = a
}

// A closed client fails a batch whose frames cannot start, every request.
func TestBatchOnClosedEngine(t *testing.T) {
	_, _, _, addr := batchServer(t, 1<<20)
	cli, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	cli.Close()
	reqs := []Request{{Op: Read, Endpoint: addr, Segment: "a", Buf: make([]byte, 10)}, {Op: Read, Endpoint: addr, Segment: "a", Buf: make([]byte, 10)}}
	for _, err := range cli.Do(context.Background(), reqs) {
		wantCode(t, err, kverr.TransferFail, "closed")
	}
}

// FuzzBatchDesc feeds arbitrary batch headers and descriptor sections to
// the decoder: it must never panic, and whatever it accepts must satisfy
// every rule the server relies on and re-encode to the same bytes.
func FuzzBatchDesc(f *testing.F) {
	good := batchFrame(opBatchWrite, 1, []string{"a", "seg-b"}, []batchExtent{{0, 0, 100}, {1, 1 << 40, 5}, {0, 7, 1}}, nil)
	f.Add(good)
	f.Add(batchFrame(opBatchRead, 2, []string{"x"}, []batchExtent{{0, 0, 1}, {0, 0, 1}}, nil))
	f.Add(good[:requestHeaderLen+3])
	bad := bytes.Clone(good)
	bad[len(bad)-16] = 9 // name index out of the table
	f.Add(bad)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseRequestHeader(b)
		if err != nil || !h.op.isBatch() {
			return
		}
		if h.bucket < 1 || h.bucket > MaxBatchExtents || h.nameLen < 1 || h.length > MaxFrameLength || h.offset > maxBatchDescLen {
			t.Fatalf("accepted batch header %+v", h)
		}
		desc := b[requestHeaderLen:]
		if uint64(len(desc)) > h.offset {
			desc = desc[:h.offset]
		}
		names, exts, err := parseBatchDesc(desc, h, nil, nil)
		if err != nil {
			return
		}
		var total uint64
		strs := make([]string, len(names))
		for i, n := range names {
			if len(n) < 1 || len(n) > MaxNameLen {
				t.Fatalf("name %d of %d bytes accepted", i, len(n))
			}
			strs[i] = string(n)
		}
		for i, x := range exts {
			if x.name >= len(names) || x.length < 1 || x.length > MaxFrameLength || x.offset > ^uint64(0)-x.length {
				t.Fatalf("extent %d %+v accepted", i, x)
			}
			total += x.length
		}
		if uint64(len(exts)) != h.bucket || total != h.length {
			t.Fatalf("%d extents of %d bytes accepted for header %+v", len(exts), total, h)
		}
		if out := appendBatchDesc(nil, strs, exts); !bytes.Equal(out, desc) {
			t.Fatal("descriptor does not round-trip")
		}
	})
}

// Batches past the frame caps: more extents than one frame carries, and
// more distinct segments than one name table holds.
func TestBatchFrameCaps(t *testing.T) {
	srv := newEngine(t, Config{})
	const nseg = 300
	mems := make([][]byte, nseg)
	for i := range mems {
		mems[i] = make([]byte, 8192)
		if err := srv.RegisterSegment(fmt.Sprintf("s%03d", i), mems[i]); err != nil {
			t.Fatal(err)
		}
	}
	la, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := la.String()
	cli := newEngine(t, Config{})
	var reqs []Request
	for i := range 2500 { // 2500 extents: three frames at least
		seg := i % nseg
		reqs = append(reqs, Request{Op: Write, Endpoint: addr, Segment: fmt.Sprintf("s%03d", seg), Offset: uint64(i / nseg * 100), Buf: randBytes(uint64(i), 100)})
	}
	for i, err := range cli.Do(context.Background(), reqs) {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	for i, r := range reqs {
		if got := mems[i%nseg][r.Offset : r.Offset+100]; !bytes.Equal(got, r.Buf) {
			t.Fatalf("write %d did not land", i)
		}
	}
	if f := srv.Stats().ServedFrames; f < 3 || f > 20 {
		t.Fatalf("2500 extents over 300 segments took %d frames", f)
	}
	if m := srv.Stats().MalformedFrames; m != 0 {
		t.Fatalf("%d malformed frames", m)
	}
}
