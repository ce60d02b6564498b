package transfer

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// TestSharedMemoryRevokedGrants: a same-host client copying through a
// mapped segment is held to what the data port would decide: a grant the
// serving engine revoked (its extent freed after it was signed), of a key
// it no longer holds, expired, or missing where grants are enforced is
// not admitted, and the request goes over TCP, where it is refused;
// nothing is written. Grants it would serve still go through shared
// memory, also after its keys are replaced, it follows another master's
// records, or the segment is registered again.
func TestSharedMemoryRevokedGrants(t *testing.T) {
	srv, mem, addr := sharedServer(t, 4<<20)
	for name, at := range map[string]int{"seg": 0, "seg2": 1 << 20} {
		if err := srv.RegisterSegment(name, mem[at:at+1<<20]); err != nil {
			t.Fatal(err)
		}
	}
	k := grant.NewKey(3)
	srv.SetGrantKeys(k)
	var ring grant.Keyring
	ring.Set(k)
	cli := newEngine(t, Config{ConnsPerPeer: 1})
	exp := time.Now().Add(time.Minute)
	const outbox = 0xC0FFEE
	sign := func(seg string, off, seq uint64, op grant.Op) []byte {
		return ring.Sign(seg, 0, off, 4096, op, grant.Session{}, exp, grant.Mark{Outbox: outbox, Seq: seq})
	}
	buf := make([]byte, 4096)
	read := func(seg string, off uint64, tok []byte) error {
		return do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: seg, Offset: off, Buf: buf, Grant: tok})
	}
	eventually(t, "seg mapped", func() error {
		if err := read("seg", 0, sign("seg", 0, 3, grant.Read)); err != nil {
			t.Fatal(err)
		}
		if cli.Stats().SharedRequests == 0 {
			return fmt.Errorf("not shared yet")
		}
		return nil
	})
	viaShm := func(what string, f func() error, wantErr string) bool {
		t.Helper()
		return viaOrRefused(t, cli, "shared-memory", what, f, wantErr, func(s Stats) (uint64, uint64) { return s.SharedRequests, s.SharedNotAdmitted })
	}

	rev := srv.Revocations()
	stale := sign("seg", 0, 3, grant.Read)
	// Before the node follows records, grants are served as at the data port.
	if !viaShm("unfollowed", func() error { return read("seg", 0, stale) }, "") {
		t.Fatal("a grant was not admitted before the node followed any records")
	}
	rev.Follow(outbox)
	until := time.Now().Add(time.Minute).UnixNano()
	rev.Revoke("seg", 0, 7, until, time.Now().UnixNano())
	rev.Applied(7)
	if viaShm("revoked read", func() error { return read("seg", 0, stale) }, "revoked") {
		t.Fatal("a revoked grant read through shared memory")
	}
	before := bytes.Clone(mem[:8192])
	junk := bytes.Repeat([]byte{0xEE}, 4096)
	if viaShm("revoked write", func() error {
		return do1(t, cli, Request{Op: Write, Endpoint: addr, Segment: "seg", Buf: junk, Grant: sign("seg", 0, 3, grant.Write)})
	}, "revoked") {
		t.Fatal("a revoked grant wrote through shared memory")
	}
	if !bytes.Equal(mem[:8192], before) {
		t.Fatal("a revoked write changed the segment")
	}
	for _, c := range []struct {
		what string
		seg  string
		off  uint64
		tok  []byte
		ok   bool
		err  string
	}{
		{"the extent's next occupant", "seg", 0, sign("seg", 0, 7, grant.Read), true, ""},
		{"the next granule", "seg", 4096, sign("seg", 4096, 3, grant.Read), true, ""},
		{"another segment, same offset", "seg2", 0, sign("seg2", 0, 3, grant.Read), true, ""},
		{"no grant", "seg", 4096, nil, false, "missing"},
		{"unknown key", "seg", 4096, grant.Sign(grant.NewKey(9), "seg", 0, 4096, 4096, grant.Read, grant.Session{}, exp), false, "unknown_key"},
		{"expired", "seg", 4096, ring.Sign("seg", 0, 4096, 4096, grant.Read, grant.Session{}, time.Now().Add(-time.Second), grant.Mark{Outbox: outbox, Seq: 3}), false, "expired"},
	} {
		if got := viaShm(c.what, func() error { return read(c.seg, c.off, c.tok) }, c.err); got != c.ok {
			t.Fatalf("%s: through shared memory %v, want %v", c.what, got, c.ok)
		}
	}

	// Keys all replaced: the table is cleared (offset 0's next grant,
	// placed at seq 0 by a master that mounted the segment anew, is
	// served) and the old key's grants are not admitted.
	k2 := grant.NewKey(4)
	srv.SetGrantKeys(k2)
	var ring2 grant.Keyring
	ring2.Set(k2)
	fresh := ring2.Sign("seg", 0, 0, 4096, grant.Read, grant.Session{}, exp, grant.Mark{Outbox: outbox, Seq: 0})
	if !viaShm("new key", func() error { return read("seg", 0, fresh) }, "") {
		t.Fatal("a grant of the new key was not admitted")
	}
	if viaShm("old key", func() error { return read("seg", 4096, sign("seg", 4096, 3, grant.Read)) }, "unknown_key") {
		t.Fatal("a grant of a replaced key was admitted")
	}

	// Another master's records: entries reset, its grants admitted.
	rev.Revoke("seg", 8192, 9, until, time.Now().UnixNano())
	rev.Follow(outbox + 1)
	other := ring2.Sign("seg", 0, 8192, 4096, grant.Read, grant.Session{}, exp, grant.Mark{Outbox: outbox + 1, Seq: 0})
	if !viaShm("new master", func() error { return read("seg", 8192, other) }, "") {
		t.Fatal("a new master's grant was not admitted")
	}

	// A segment registered again keeps what was revoked under its name.
	rev.Revoke("seg2", 4096, 5, until, time.Now().UnixNano())
	rev.Applied(5)
	if err := srv.UnregisterSegment("seg2"); err != nil {
		t.Fatal(err)
	}
	if err := srv.RegisterSegment("seg2", mem[2<<20:3<<20]); err != nil {
		t.Fatal(err)
	}
	staleSeg2 := ring2.Sign("seg2", 0, 4096, 4096, grant.Read, grant.Session{}, exp, grant.Mark{Outbox: outbox + 1, Seq: 2})
	eventually(t, "seg2 mapped again", func() error {
		before := cli.Stats()
		err := read("seg2", 4096, staleSeg2)
		after := cli.Stats()
		switch {
		case after.SharedRequests > before.SharedRequests:
			t.Fatal("a grant revoked before the segment was registered again read through shared memory")
		case after.SharedNotAdmitted > before.SharedNotAdmitted:
			wantCode(t, err, kverr.PermissionDenied, "revoked")
			return nil
		}
		return fmt.Errorf("not mapped yet: %v", err)
	})
}

// TestFreeViewAdmits drives freeView.admits over a table mapped in this
// process: the sequence lock, another outbox, a slot shared by two
// extents, and more keys than the header holds.
func TestFreeViewAdmits(t *testing.T) {
	ft, err := newFreeTable("seg", 1<<20, []uint32{1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ft.retire(); ft.file.Close() }()
	v, err := mapFrees(int(ft.file.Fd()), "seg", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer v.unmap()
	now := time.Now()
	var ring grant.Keyring
	ring.Set(grant.NewKey(1))
	mark := func(off, outbox, seq uint64) []byte {
		return ring.Sign("seg", 0, off, 64, grant.Read, grant.Session{}, now.Add(time.Minute), grant.Mark{Outbox: outbox, Seq: seq})
	}
	at := now.UnixNano()
	if !v.admits(mark(0, 9, 1), at) {
		t.Fatal("a grant of an accepted key, no stream followed")
	}
	if v.admits(nil, at) {
		t.Fatal("no grant where grants are enforced")
	}
	ft.Followed(9)
	ft.Revoked("seg", 64, 5) // shares granule 0 with the extent at 0
	switch {
	case v.admits(mark(0, 9, 4), at):
		t.Fatal("an older grant in a slot a later free marked")
	case !v.admits(mark(0, 9, 5), at):
		t.Fatal("a grant placed after the slot's free")
	case v.admits(mark(0, 8, 9), at):
		t.Fatal("a grant of another outbox")
	case !v.admits(mark(0, 0, 0), at):
		t.Fatal("an unplaced grant (outbox 0) is not revoked early, as at the data port")
	case !v.admits(mark(1<<20-64, 9, 0), at):
		t.Fatal("the last granule")
	case v.admits(mark(0, 9, 5), now.Add(2*time.Minute).UnixNano()):
		t.Fatal("an expired grant")
	case v.admits(mark(0, 9, 5)[:40], at):
		t.Fatal("a malformed grant")
	}
	ft.hdr.gen.Add(1) // a change under way
	if v.admits(mark(0, 9, 5), at) {
		t.Fatal("admitted while the table was changing")
	}
	ft.hdr.gen.Add(1)
	// Five keys: the four the header holds are accepted; the fifth goes
	// over TCP, where the data port checks it.
	var ring5 grant.Keyring
	ring5.Set(grant.NewKey(5))
	if v.admits(ring5.Sign("seg", 0, 0, 64, grant.Read, grant.Session{}, now.Add(time.Minute), grant.Mark{}), at) {
		t.Fatal("a key the header does not hold")
	}
	ft.setKeys(nil)
	if !v.admits(nil, at) {
		t.Fatal("no grant where grants are not enforced")
	}
}

// TestEngineAdmits: the in-process verdict client.View asks for: without
// keys everything passes; with them a grant of a key not held, a missing
// or malformed one, and one a later free voided do not.
func TestEngineAdmits(t *testing.T) {
	e := newEngine(t, Config{})
	if !e.Admits("seg", nil) {
		t.Fatal("no keys: a missing grant not admitted")
	}
	k := grant.NewKey(1)
	e.SetGrantKeys(k)
	var ring grant.Keyring
	ring.Set(k)
	exp := time.Now().Add(time.Minute)
	tok := func(off, seq uint64) []byte {
		return ring.Sign("seg", 0, off, 64, grant.Read, grant.Session{}, exp, grant.Mark{Outbox: 5, Seq: seq})
	}
	rev := e.Revocations()
	rev.Follow(5)
	now := time.Now().UnixNano()
	rev.Revoke("seg", 0, 4, now+int64(time.Minute), now)
	for _, c := range []struct {
		what string
		tok  []byte
		want bool
	}{
		{"live", tok(64, 3), true},
		{"placed after the free", tok(0, 4), true},
		{"freed after it was signed", tok(0, 3), false},
		{"missing", nil, false},
		{"malformed", tok(64, 3)[:50], false},
		{"key not held", grant.Sign(grant.NewKey(2), "seg", 0, 64, 64, grant.Read, grant.Session{}, exp), false},
	} {
		if got := e.Admits("seg", c.tok); got != c.want {
			t.Errorf("%s: admitted %v, want %v", c.what, got, c.want)
		}
	}
}

// viaOrRefused runs f, one request of cli, and reports whether it went
// over the route whose requests count reads (true) or was not admitted
// there and went over TCP (false); wantErr is the data port's refusal
// ("" for none).
func viaOrRefused(t *testing.T, cli *Engine, route, what string, f func() error, wantErr string, count func(Stats) (via, refused uint64)) bool {
	t.Helper()
	via0, refused0 := count(cli.Stats())
	err := f()
	switch {
	case wantErr == "" && err != nil:
		t.Fatalf("%s: %v", what, err)
	case wantErr != "":
		wantCode(t, err, kverr.PermissionDenied, wantErr)
	}
	via1, refused1 := count(cli.Stats())
	via, refused := via1-via0, refused1-refused0
	if via+refused != 1 {
		t.Fatalf("%s: %d %s requests and %d not admitted, want one of them", what, via, route, refused)
	}
	return via == 1
}

// FuzzFreeHeader: a free table's header as bytes (what an RDMA READ of it
// brings) decodes without panicking whatever they are, only with the
// table's magic and granule; and over a live table, the RDMA reader's
// verdict (decodeFreeHeader, then freeSnap.admits reading the slot) is the
// mapping reader's (freeView.admits) for any token.
func FuzzFreeHeader(f *testing.F) {
	ft, err := newFreeTable("seg", 1<<20, []uint32{1})
	if err != nil {
		f.Fatal(err)
	}
	defer ft.retire()
	ft.Followed(9)
	ft.Revoked("seg", 64, 5)
	ft.Revoked("seg", 8192, 2)
	v := &freeView{}
	v.hdr, v.slots = freeLayout(ft.mem, ft.hdr.nslots.Load())
	live := bytes.Clone(ft.mem[:freeHeaderLen])
	var ring grant.Keyring
	ring.Set(grant.NewKey(1))
	exp := time.Now().Add(time.Hour)
	for _, off := range []uint64{0, 64, 8192, 1<<20 - 64} {
		for _, seq := range []uint64{0, 4, 5, 9} {
			f.Add(live, ring.Sign("seg", 0, off, 64, grant.Read, grant.Session{}, exp, grant.Mark{Outbox: 9, Seq: seq}))
		}
	}
	f.Add(make([]byte, freeHeaderLen), []byte(nil))
	at := time.Now().UnixNano()
	f.Fuzz(func(t *testing.T, hdr, tok []byte) {
		if snap, ok := decodeFreeHeader(hdr); ok {
			var h freeHeader
			if binary.NativeEndian.Uint64(hdr[unsafe.Offsetof(h.magic):]) != freeMagic || snap.gen != binary.NativeEndian.Uint64(hdr[freeGenOffset:]) {
				t.Fatalf("decoded a header without the magic, or gen misread: %+v", snap)
			}
			snap.admits(tok, at, func(i uint64) (uint64, bool) {
				if i >= snap.nslots {
					t.Fatalf("slot %d asked of %d", i, snap.nslots)
				}
				return i, true
			})
		}
		snap, ok := decodeFreeHeader(live)
		if !ok {
			t.Fatal("the live table's header did not decode")
		}
		remote, _ := snap.admits(tok, at, func(i uint64) (uint64, bool) { return ft.slots[i].Load(), true })
		if local := v.admits(tok, at); remote != local {
			t.Fatalf("token %x: RDMA reader admits %v, mapping reader %v", tok, remote, local)
		}
	})
}
