package transfer

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// placer is a stand-in for the master behind a direct-put handler (the
// appliance and a real master are tested in package tests): it places
// puts one after the other in segment "seg", refuses keys it has
// committed (OBJECT_ALREADY_EXISTS) and puts past the segment's end
// (NO_AVAILABLE_HANDLE), and records what it committed and revoked.
type placer struct {
	mu        sync.Mutex
	next      uint64
	size      uint64
	committed map[string]PutPlacement
	revoked   []string
	ids       []PutIdentity
	places    map[string]PutPlacement
}

func (p *placer) StartPuts(_ context.Context, id PutIdentity, puts []DirectPut) []PutPlacement {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids = append(p.ids, id)
	out := make([]PutPlacement, len(puts))
	for i, q := range puts {
		switch {
		case p.committed[q.Key] != PutPlacement{}:
			out[i].Err = kverr.New(kverr.ObjectAlreadyExists, q.Key, "already stored")
		case p.next+q.Size > p.size:
			out[i].Err = kverr.New(kverr.NoAvailableHandle, q.Key, "no room here")
		default:
			out[i] = PutPlacement{Segment: "seg", Offset: p.next}
			p.places[q.Key] = out[i]
			p.next += q.Size
		}
	}
	return out
}

func (p *placer) EndPuts(_ context.Context, _ PutIdentity, puts []DirectPut, _ []PutPlacement, errs []error) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, q := range puts {
		pl, placed := p.places[q.Key]
		if !placed {
			continue
		}
		delete(p.places, q.Key)
		if errs[i] == nil {
			p.committed[q.Key] = pl
		} else {
			p.revoked = append(p.revoked, q.Key)
		}
	}
	return errs
}

func newPlacer(size uint64) *placer {
	return &placer{size: size, committed: map[string]PutPlacement{}, places: map[string]PutPlacement{}}
}

func directPuts(keys []string, vals [][]byte) []DirectPut {
	out := make([]DirectPut, len(keys))
	for i, k := range keys {
		out[i] = DirectPut{Key: k, Size: uint64(len(vals[i])), CRC32C: crc32c.Checksum(vals[i])}
	}
	return out
}

// TestDirectPut: over real TCP, single and batch direct puts land
// bit-exact where the handler placed them; per-put results come back in
// order (already exists, no room, checksum mismatch revoked while the rest
// commit); with grant keys a frame needs a valid ticket of this node, and
// a forged, expired or other node's ticket is refused whole with the
// reason, writing nothing and asking the handler nothing.
func TestDirectPut(t *testing.T) {
	srv, mem, addr := serverEngine(t, "seg", 1<<20)
	clear(mem)
	cli := newEngine(t, Config{})
	ctx := context.Background()
	tk := grant.UnsignedTicket("box", "tenant-a", "client-1")
	vals := [][]byte{bytes.Repeat([]byte{1}, 300<<10), []byte("hello")}
	if _, err := cli.PutDirect(ctx, addr, tk, directPuts([]string{"a", "b"}, vals), vals); kverr.CodeOf(err) != kverr.UnavailableInCurrentStatus {
		t.Fatalf("no handler: %v", err)
	}
	pl := newPlacer(uint64(len(mem)))
	srv.SetPutHandler("box", pl)
	errs, err := cli.PutDirect(ctx, addr, tk, directPuts([]string{"a", "b"}, vals), vals)
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("put: %v %v", err, errs)
	}
	// A frame with a small value is written; one of large values only
	// goes by reference (splice.go).
	if n := cli.Stats().SplicedBytes; n != 0 {
		t.Fatalf("%d bytes of frames with a small value sent by reference", n)
	}
	big := bytes.Repeat([]byte{9, 8, 7}, 100<<10)
	errs, err = cli.PutDirect(ctx, addr, tk, directPuts([]string{"big"}, [][]byte{big}), [][]byte{big})
	if err != nil || errs[0] != nil {
		t.Fatalf("put big: %v %v", err, errs)
	}
	if n := cli.Stats().SplicedBytes; n != uint64(len(big)) {
		t.Fatalf("%d bytes sent by reference, want the large value's %d", n, len(big))
	}
	pl.mu.Lock()
	if c := pl.committed["big"]; !bytes.Equal(mem[c.Offset:c.Offset+uint64(len(big))], big) {
		t.Fatal("big: bytes differ")
	}
	pl.mu.Unlock()
	pl.mu.Lock() // orders the test's reads after the serving goroutine's writes (EndPuts holds it)
	defer pl.mu.Unlock()
	for i, k := range []string{"a", "b"} {
		c := pl.committed[k]
		if !bytes.Equal(mem[c.Offset:c.Offset+uint64(len(vals[i]))], vals[i]) {
			t.Fatalf("%s: bytes differ", k)
		}
	}
	if id := pl.ids[len(pl.ids)-1]; id.Tenant != "tenant-a" || id.Client != "client-1" || id.Ticket != nil {
		t.Fatalf("identity %+v", id)
	}
	// Partial failure: "a" exists, "c" has a wrong checksum, "d" fits, "e" does not.
	vals2 := [][]byte{vals[0], []byte("ccc"), []byte("dddd"), make([]byte, 900<<10)}
	puts := directPuts([]string{"a", "c", "d", "e"}, vals2)
	puts[1].CRC32C ^= 1
	pl.mu.Unlock()
	errs, err = cli.PutDirect(ctx, addr, tk, puts, vals2)
	pl.mu.Lock()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []kverr.Code{kverr.ObjectAlreadyExists, kverr.ChecksumMismatch, kverr.OK, kverr.NoAvailableHandle} {
		if kverr.CodeOf(errs[i]) != want {
			t.Fatalf("put %d: %v, want %v", i, errs[i], want)
		}
	}
	if _, ok := pl.committed["c"]; ok || len(pl.revoked) != 1 || pl.revoked[0] != "c" {
		t.Fatalf("committed %v revoked %v", pl.committed, pl.revoked)
	}
	if c := pl.committed["d"]; !bytes.Equal(mem[c.Offset:c.Offset+4], []byte("dddd")) {
		t.Fatal("d: bytes differ")
	}

	// Tickets enforced.
	k := grant.NewKey(7)
	srv.SetGrantKeys(k)
	now := time.Now()
	good := grant.SignTicket(k, "box", "tenant-a", "client-1", now.Add(time.Minute))
	before := bytes.Clone(mem)
	calls := len(pl.ids)
	pl.mu.Unlock()
	for name, bad := range map[string][]byte{
		"unknown_key": tk,
		"forged":      append(bytes.Clone(good[:len(good)-1]), good[len(good)-1]^1),
		"expired":     grant.SignTicket(k, "box", "tenant-a", "client-1", now.Add(-time.Second)),
		"other node":  grant.SignTicket(k, "other", "tenant-a", "client-1", now.Add(time.Minute)),
	} {
		_, err := cli.PutDirect(ctx, addr, bad, directPuts([]string{"x"}, vals[:1]), vals[:1])
		want := name
		if name == "other node" {
			want = "forged"
		}
		wantCode(t, err, kverr.PermissionDenied, want)
	}
	pl.mu.Lock()
	if !bytes.Equal(before, mem) || len(pl.ids) != calls {
		t.Fatal("a refused frame wrote bytes or reached the handler")
	}
	pl.mu.Unlock()
	if n := srv.Stats().GrantRefusals["forged"]; n != 2 {
		t.Fatalf("forged refusals counted %d", n)
	}
	errs, err = cli.PutDirect(ctx, addr, good, directPuts([]string{"x"}, vals[1:]), vals[1:])
	if err != nil || errs[0] != nil {
		t.Fatalf("valid ticket: %v %v", err, errs)
	}
	pl.mu.Lock()
	if id := pl.ids[len(pl.ids)-1]; !bytes.Equal(id.Ticket, good) || id.Client != "client-1" {
		t.Fatalf("identity with a ticket: %+v", id)
	}
	pl.mu.Unlock()
	// The connection pool: concurrent callers each get one.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				v := [][]byte{bytes.Repeat([]byte{byte(g)}, 100+i)}
				key := string(rune('A'+g)) + string(rune('a'+i))
				errs, err := cli.PutDirect(ctx, addr, good, directPuts([]string{key}, v), v)
				if err != nil || errs[0] != nil {
					t.Errorf("%s: %v %v", key, err, errs)
				}
			}
		})
	}
	wg.Wait()
	pl.mu.Lock() // the deferred Unlock
	// Bad input at the caller: nothing sent.
	if _, err := cli.PutDirect(ctx, addr, good, directPuts([]string{"y"}, vals[1:]), vals[:1]); kverr.CodeOf(err) != kverr.InvalidParams {
		t.Fatalf("size mismatch: %v", err)
	}
}

func putFrame(id uint64, ticket []byte, puts []DirectPut, payload []byte) []byte {
	d := appendPutDescs(nil, puts)
	var total uint64
	for _, p := range puts {
		total += p.Size
	}
	b := make([]byte, requestHeaderLen)
	putRequestHeader(b, reqHeader{op: opPut, nameLen: len(ticket), id: id, bucket: uint64(len(puts)), offset: uint64(len(d)), length: total})
	b = append(b, ticket...)
	b = append(b, d...)
	return append(b, payload...)
}

// FuzzPutFrame feeds arbitrary bytes to a data port taking direct puts
// with tickets enforced: any input is answered or closes the connection,
// never panics, and nothing is written without a valid ticket.
func FuzzPutFrame(f *testing.F) { fuzzPutFrames(f, false) }

// FuzzStagedPutFrame is FuzzPutFrame with a staging handler: nothing is
// handed over or written without a valid ticket either.
func FuzzStagedPutFrame(f *testing.F) { fuzzPutFrames(f, true) }

func fuzzPutFrames(f *testing.F, staged bool) {
	k := grant.NewKey(3)
	ok := grant.SignTicket(k, "box", "t", "c", time.Now().Add(time.Hour))
	f.Add(putFrame(1, ok, []DirectPut{{Key: "k", Size: 4, CRC32C: crc32c.Checksum([]byte("abcd"))}}, []byte("abcd")))
	f.Add(putFrame(1, grant.UnsignedTicket("box", "t", "c"), []DirectPut{{Key: "k", Size: 4}}, []byte("abcd")))
	f.Add(putFrame(1, ok, []DirectPut{{Key: "k", Size: 2}, {Key: "j", Size: 2, PreferredSegment: "seg"}}, []byte("abcd")))
	e, err := New(Config{IOTimeout: time.Second})
	if err != nil {
		f.Fatal(err)
	}
	defer e.Close()
	seg := make([]byte, 64)
	if err := e.RegisterSegment("seg", seg); err != nil {
		f.Fatal(err)
	}
	e.SetGrantKeys(k)
	st := &stager{placer: newPlacer(64), max: 32, mem: seg, handed: map[string][]byte{}}
	if staged {
		e.SetPutHandler("box", st)
	} else {
		e.SetPutHandler("box", st.placer)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		valid := bytes.Contains(in, ok)
		clear(seg)
		st.placer.mu.Lock()
		st.next, st.committed = 0, map[string]PutPlacement{}
		st.placer.mu.Unlock()
		st.mu.Lock()
		clear(st.handed)
		st.mu.Unlock()
		serveInput(e, in)
		st.mu.Lock()
		n := len(st.handed)
		st.mu.Unlock()
		if !valid && (n > 0 || !bytes.Equal(seg, make([]byte, 64))) {
			t.Fatal("bytes handed over or written without a valid ticket")
		}
	})
}

// FuzzPutDescs: whatever parsePutDescs accepts re-encodes to the same
// bytes, and its sizes sum to the total.
func FuzzPutDescs(f *testing.F) {
	f.Add(appendPutDescs(nil, []DirectPut{{Key: "k", Size: 4, SoftPin: true, SoftPinTTL: time.Second, PreferredSegment: "s"}}), uint16(1), uint64(4))
	f.Fuzz(func(t *testing.T, d []byte, k uint16, total uint64) {
		puts, err := parsePutDescs(d, int(k%64), total, nil)
		if err != nil {
			return
		}
		if !bytes.Equal(appendPutDescs(nil, puts), d) {
			t.Fatal("does not re-encode")
		}
		var sum uint64
		for _, p := range puts {
			sum += p.Size
		}
		if sum != total {
			t.Fatalf("sizes sum to %d, not %d", sum, total)
		}
	})
}

// TestDirectPutConnectionDrops: a frame whose connection closes in the
// middle of its payload has every placed put revoked (EndPuts sees an
// error for each), none committed.
func TestDirectPutConnectionDrops(t *testing.T) {
	srv, _, addr := serverEngine(t, "seg", 1<<20)
	pl := newPlacer(1 << 20)
	srv.SetPutHandler("box", pl)
	vals := [][]byte{bytes.Repeat([]byte{1}, 1000), bytes.Repeat([]byte{2}, 300<<10)}
	frame := putFrame(1, grant.UnsignedTicket("box", "t", "c"), directPuts([]string{"a", "b"}, vals), append(vals[0], vals[1]...))
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(frame[:len(frame)-100<<10]); err != nil { // all but the last 100 KiB
		t.Fatal(err)
	}
	nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		pl.mu.Lock()
		revoked, committed := len(pl.revoked), len(pl.committed)
		pl.mu.Unlock()
		if revoked == 2 {
			if committed != 0 {
				t.Fatalf("%d puts committed from a broken frame", committed)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("revoked %d, committed %d: want both revoked", revoked, committed)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slowPlacer is placer taking delay to place (a master under load): a
// large frame's bytes are all in the socket when it answers.
type slowPlacer struct {
	*placer
	delay time.Duration
}

func (p slowPlacer) StartPuts(ctx context.Context, id PutIdentity, puts []DirectPut) []PutPlacement {
	time.Sleep(p.delay)
	return p.placer.StartPuts(ctx, id, puts)
}

// TestDirectPutLargeFrame: a frame of several large puts placed slowly
// (its bytes all waiting in the socket) lands each placed put bit-exact
// and checked: a wrong checksum in the middle is found and revoked, a
// put the placement refuses has its bytes skipped, the frame's other
// puts commit, and the connection stays in step for the next frame.
func TestDirectPutLargeFrame(t *testing.T) {
	srv, mem, addr := serverEngine(t, "seg", 4<<20)
	clear(mem)
	pl := newPlacer(4 << 20)
	pl.committed["dup"] = PutPlacement{Segment: "seg", Offset: 1} // "already stored"
	srv.SetPutHandler("box", slowPlacer{pl, 50 * time.Millisecond})
	cli := newEngine(t, Config{})
	tk := grant.UnsignedTicket("box", "t", "c")
	val := func(n int, b byte) []byte {
		v := make([]byte, n)
		for i := range v {
			v[i] = b + byte(i%251)
		}
		return v
	}
	// "dup" refused, "bad" with a wrong checksum, "tail" small, last.
	keys := []string{"first", "dup", "bad", "across", "big", "tail"}
	vals := [][]byte{val(700<<10, 1), val(200<<10, 2), val(100<<10, 3), val(300<<10, 4), val(1500<<10, 5), val(7, 6)}
	puts := directPuts(keys, vals)
	puts[2].CRC32C ^= 0x100
	errs, err := cli.PutDirect(context.Background(), addr, tk, puts, vals)
	if err != nil {
		t.Fatal(err)
	}
	if n := cli.Stats().SplicedBytes; n != 0 {
		t.Fatalf("%d bytes of a frame above spliceMax sent by reference", n)
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for i, want := range []kverr.Code{kverr.OK, kverr.ObjectAlreadyExists, kverr.ChecksumMismatch, kverr.OK, kverr.OK, kverr.OK} {
		if kverr.CodeOf(errs[i]) != want {
			t.Fatalf("%s: %v, want %v", keys[i], errs[i], want)
		}
		if want != kverr.OK {
			continue
		}
		c := pl.committed[keys[i]]
		if !bytes.Equal(mem[c.Offset:c.Offset+uint64(len(vals[i]))], vals[i]) {
			t.Fatalf("%s: bytes differ", keys[i])
		}
	}
	if len(pl.revoked) != 1 || pl.revoked[0] != "bad" {
		t.Fatalf("revoked %v", pl.revoked)
	}
	// The same connection serves the next frame in step.
	pl.mu.Unlock()
	errs, err = cli.PutDirect(context.Background(), addr, tk, directPuts([]string{"next"}, vals[5:]), vals[5:])
	pl.mu.Lock()
	if err != nil || errs[0] != nil {
		t.Fatalf("next frame: %v %v", err, errs)
	}
}

// stager is a stand-in for a staging handler (the appliance's, tested
// with a real master in package tests): it stages frames of at most max
// bytes, placing them with its placer and copying the bytes it is handed
// into segment memory, and records what it was handed.
type stager struct {
	*placer
	max    uint64
	mem    []byte
	mu     sync.Mutex
	handed map[string][]byte // key → bytes handed to PutStaged
	failed []string          // keys handed with an error already set
}

func (s *stager) StagesPuts(_ PutIdentity, puts []DirectPut) bool { return frameBytesOf(puts) <= s.max }

func (s *stager) PutStaged(ctx context.Context, id PutIdentity, puts []DirectPut, b []byte, errs []error) []error {
	places := s.StartPuts(ctx, id, puts)
	s.mu.Lock()
	for i := range puts {
		v := b[:puts[i].Size]
		b = b[puts[i].Size:]
		if errs[i] != nil {
			s.failed = append(s.failed, puts[i].Key)
			continue
		}
		s.handed[puts[i].Key] = append([]byte(nil), v...)
		if places[i].Err != nil {
			errs[i] = places[i].Err
			continue
		}
		copy(s.mem[places[i].Offset:], v)
	}
	s.mu.Unlock()
	return s.EndPuts(ctx, id, puts, places, errs)
}

// TestStagedPutFrames: a frame its handler stages is read whole and each
// put's checksum checked before the handler is asked; a put whose bytes
// do not match is answered CHECKSUM_MISMATCH and handed over marked
// failed; a frame the handler does not stage takes the ordinary path.
func TestStagedPutFrames(t *testing.T) {
	srv, mem, addr := serverEngine(t, "seg", 1<<20)
	clear(mem)
	cli := newEngine(t, Config{})
	ctx := context.Background()
	tk := grant.UnsignedTicket("box", "tenant-a", "client-1")
	st := &stager{placer: newPlacer(uint64(len(mem))), max: 64 << 10, mem: mem, handed: map[string][]byte{}}
	srv.SetPutHandler("box", st)
	vals := [][]byte{bytes.Repeat([]byte{1, 2}, 3000), []byte("not what it says"), bytes.Repeat([]byte{7}, 9000)}
	puts := directPuts([]string{"a", "bad", "c"}, vals)
	puts[1].CRC32C ^= 1
	errs, err := cli.PutDirect(ctx, addr, tk, puts, vals)
	if err != nil || errs[0] != nil || errs[2] != nil || kverr.CodeOf(errs[1]) != kverr.ChecksumMismatch {
		t.Fatalf("staged frame: %v %v, want a and c stored, bad CHECKSUM_MISMATCH", err, errs)
	}
	st.mu.Lock()
	if !bytes.Equal(st.handed["a"], vals[0]) || !bytes.Equal(st.handed["c"], vals[2]) || fmt.Sprint(st.failed) != "[bad]" {
		t.Fatalf("handed %d keys, failed %v", len(st.handed), st.failed)
	}
	st.mu.Unlock()
	st.placer.mu.Lock()
	for i, k := range []string{"a", "c"} {
		c := st.committed[k]
		if v := vals[i*2]; !bytes.Equal(mem[c.Offset:c.Offset+uint64(len(v))], v) {
			t.Fatalf("%s: bytes differ", k)
		}
	}
	if _, ok := st.committed["bad"]; ok {
		t.Fatal("a put whose bytes did not match was committed")
	}
	st.placer.mu.Unlock()
	if n := srv.Stats().ServedStagedPuts; n != 2 {
		t.Fatalf("%d staged puts served, want 2", n)
	}
	// Over the handler's bound: the ordinary path (placed, read into the
	// extent, ended), nothing handed over.
	big := bytes.Repeat([]byte{3}, 100<<10)
	errs, err = cli.PutDirect(ctx, addr, tk, directPuts([]string{"big"}, [][]byte{big}), [][]byte{big})
	if err != nil || errs[0] != nil {
		t.Fatalf("unstaged frame: %v %v", err, errs)
	}
	st.mu.Lock()
	_, handed := st.handed["big"]
	st.mu.Unlock()
	if handed || srv.Stats().ServedStagedPuts != 2 {
		t.Fatal("a frame over the bound was staged")
	}
	st.placer.mu.Lock()
	defer st.placer.mu.Unlock()
	if c := st.committed["big"]; !bytes.Equal(mem[c.Offset:c.Offset+uint64(len(big))], big) {
		t.Fatal("big: bytes differ")
	}
}
