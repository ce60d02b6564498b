package transfer

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kvtier/kvtier/internal/grant"
)

// Free tables: a segment's revocations, published to the peers that map
// it and to those that read it with one-sided RDMA. See "Shared memory"
// and "RDMA" in the package documentation.
//
// The data port checks every frame's grant against the engine's
// grant.Revocations; a peer copying through a mapped segment never passes
// the data port, so a client holding a read lease (and its grant) would
// read a force-removed object's bytes until the space is reused. The
// serving engine therefore mirrors, in a small memfd per shared segment
// that peers map read-only, what Revocations knows: the record stream
// followed, the keys accepted and, per granule of the segment, the seq of
// the last free of an extent starting there. A peer's copy is checked
// against it (freeView.admits) the way the data port checks a frame, and a
// request it does not admit goes over TCP, where the data port decides.

const (
	freeMagic = 0x3145455246545648 // "HVTFREE1" in host byte order
	// freeShift is the granule the table keeps one slot for: 4 KiB, 8
	// bytes a granule (0.2 % of the segment). Extents starting in one
	// granule share its slot (objects under 4 KiB): a free of one makes
	// the others' older grants go over TCP, which checks them exactly.
	freeShift = 12
	// freeHeaderLen is the header's room; slots follow it.
	freeHeaderLen = 128
	// freeKeys is how many accepted key IDs the header holds (a keyring
	// holds the current key and the previous one).
	freeKeys = 4
)

// freeHeader is the table's header, in host byte order (peers run on the
// same host). magic, shift and nslots never change after creation. gen is
// a sequence lock over outbox, keys and the slots' reset: odd while they
// change, so a reader that sees it odd or moved does not trust what it
// read.
type freeHeader struct {
	magic  atomic.Uint64
	gen    atomic.Uint64
	outbox atomic.Uint64 // the record stream followed; 0: none (grants not checked here, as at the data port)
	shift  atomic.Uint64
	nslots atomic.Uint64
	nkeys  atomic.Uint64 // 0: grants not enforced
	keys   [freeKeys]atomic.Uint64
}

var _ [freeHeaderLen - unsafe.Sizeof(freeHeader{})]byte // the header fits its room

// freeGenOffset is gen's offset in the header (a remote reader reads it
// again on its own).
const freeGenOffset = unsafe.Offsetof(freeHeader{}.gen)

// decodeFreeHeader is the snapshot of a header read as bytes (an RDMA READ
// of the table), ok false unless it is a table this reader understands:
// the magic in its own byte order (a peer of the other order goes over
// TCP) and the granule it slots by.
func decodeFreeHeader(b []byte) (snap freeSnap, ok bool) {
	if len(b) < freeHeaderLen {
		return snap, false
	}
	word := func(off uintptr) uint64 { return binary.NativeEndian.Uint64(b[off:]) }
	var h freeHeader
	if word(unsafe.Offsetof(h.magic)) != freeMagic || word(unsafe.Offsetof(h.shift)) != freeShift {
		return snap, false
	}
	snap = freeSnap{gen: word(unsafe.Offsetof(h.gen)), outbox: word(unsafe.Offsetof(h.outbox)),
		nslots: word(unsafe.Offsetof(h.nslots)), nkeys: word(unsafe.Offsetof(h.nkeys))}
	for i := range snap.keys {
		snap.keys[i] = word(unsafe.Offsetof(h.keys) + uintptr(8*i))
	}
	return snap, true
}

// freeTable is the serving side's table of one segment, written
// under mu (by the publisher, called under the Revocations' lock, and by
// SetGrantKeys).
type freeTable struct {
	file *os.File // the memfd peers map; closed when the engine closes

	mu sync.Mutex
	// guarded by mu:
	mem   []byte // the mapping; nil once the segment is unregistered
	hdr   *freeHeader
	slots []atomic.Uint64
	dirty bool // some slot is not zero
}

func freeTableSize(segSize uint64) (nslots, size uint64) {
	nslots = (segSize + 1<<freeShift - 1) >> freeShift
	size = roundUp(freeHeaderLen+8*nslots, uint64(os.Getpagesize()))
	return nslots, size
}

// newFreeTable makes the table of a segment of segSize bytes, following
// no stream and enforcing keyIDs.
func newFreeTable(name string, segSize uint64, keyIDs []uint32) (*freeTable, error) {
	nslots, size := freeTableSize(segSize)
	fd, err := unix.MemfdCreate("kvtier-frees-"+name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("free table of segment %q: memfd: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), "kvtier-frees-"+name)
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("free table of segment %q: %w", name, err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("free table of segment %q: mmap: %w", name, err)
	}
	t := &freeTable{file: f, mem: mem}
	t.hdr, t.slots = freeLayout(mem, nslots)
	t.hdr.shift.Store(freeShift)
	t.hdr.nslots.Store(nslots)
	t.setKeysLocked(keyIDs)
	t.hdr.magic.Store(freeMagic) // last: a peer checks it
	return t, nil
}

func freeLayout(mem []byte, nslots uint64) (*freeHeader, []atomic.Uint64) {
	return (*freeHeader)(unsafe.Pointer(&mem[0])),
		unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(&mem[freeHeaderLen])), nslots)
}

// Followed, Revoked and Cleared make freeTable a grant.Publisher of one
// segment (Revocations.Replay when it is registered).
func (t *freeTable) Followed(outbox uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mem == nil || t.hdr.outbox.Load() == outbox {
		return
	}
	t.hdr.gen.Add(1)
	t.resetLocked()
	t.hdr.outbox.Store(outbox)
	t.hdr.gen.Add(1)
}

func (t *freeTable) Revoked(_ string, offset, seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mem == nil {
		return
	}
	if i := offset >> freeShift; i < uint64(len(t.slots)) && t.slots[i].Load() < seq {
		t.slots[i].Store(seq)
		t.dirty = true
	}
}

func (t *freeTable) Cleared() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mem == nil || !t.dirty {
		return
	}
	t.hdr.gen.Add(1)
	t.resetLocked()
	t.hdr.gen.Add(1)
}

func (t *freeTable) resetLocked() {
	if t.dirty {
		for i := range t.slots {
			t.slots[i].Store(0)
		}
		t.dirty = false
	}
}

func (t *freeTable) setKeys(ids []uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mem == nil {
		return
	}
	t.hdr.gen.Add(1)
	t.setKeysLocked(ids)
	t.hdr.gen.Add(1)
}

func (t *freeTable) setKeysLocked(ids []uint32) {
	// A keyring holds the current key and the previous one; past
	// freeKeys, the oldest are left out (their grants go over TCP).
	ids = ids[:min(len(ids), freeKeys)]
	for i, id := range ids {
		t.hdr.keys[i].Store(uint64(id))
	}
	t.hdr.nkeys.Store(uint64(len(ids)))
}

// retire unmaps the serving side's view (the segment was unregistered;
// peers keep theirs until they hear GONE; an RDMA region of it was
// deregistered first). The file stays open until the
// engine closes: a SEGMENT message still queued for a peer may carry it.
func (t *freeTable) retire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mem != nil {
		_ = unix.Munmap(t.mem)
		t.mem, t.hdr, t.slots = nil, nil, nil
	}
}

// freeTables is the serving side's set of tables by segment, and the
// grant.Publisher the engine's Revocations tell (shmTransport holds it).
type freeTables struct {
	mu sync.RWMutex
	// guarded by mu:
	live  map[string]*freeTable
	files []*os.File // every table's, closed with the engine
}

func (ts *freeTables) add(name string, t *freeTable) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.live == nil {
		ts.live = map[string]*freeTable{}
	}
	ts.live[name] = t
	ts.files = append(ts.files, t.file)
}

// remove stops publishing to name's table; its owner retires it once no
// peer's NIC can read it (UnregisterSegment).
func (ts *freeTables) remove(name string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.live, name)
}

func (ts *freeTables) each(f func(*freeTable)) {
	ts.mu.RLock()
	defer ts.mu.RUnlock()
	for _, t := range ts.live {
		f(t)
	}
}

func (ts *freeTables) Followed(outbox uint64) { ts.each(func(t *freeTable) { t.Followed(outbox) }) }
func (ts *freeTables) Cleared()               { ts.each(func(t *freeTable) { t.Cleared() }) }

func (ts *freeTables) Revoked(segment string, offset, seq uint64) {
	ts.mu.RLock()
	t := ts.live[segment]
	ts.mu.RUnlock()
	if t != nil {
		t.Revoked(segment, offset, seq)
	}
}

func (ts *freeTables) setKeys(ids []uint32) { ts.each(func(t *freeTable) { t.setKeys(ids) }) }

// closeFiles closes every table's memfd (the engine is closed: nothing
// sends them any more).
func (ts *freeTables) closeFiles() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.live {
		t.retire()
	}
	for _, f := range ts.files {
		f.Close()
	}
	ts.live, ts.files = nil, nil
}

var _ grant.Publisher = (*freeTables)(nil)
var _ grant.Publisher = (*freeTable)(nil)

// freeView is a peer's read-only mapping of a segment's free table.
type freeView struct {
	mapping []byte
	hdr     *freeHeader
	slots   []atomic.Uint64
}

// mapFrees maps the free table in fd, checked against the segment's size.
func mapFrees(fd int, name string, segSize uint64) (*freeView, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("free table of shared segment %q: stat: %w", name, err)
	}
	nslots, size := freeTableSize(segSize)
	if uint64(st.Size) != size {
		return nil, fmt.Errorf("%w: free table of shared segment %q: %d bytes, want %d for %d segment bytes", errMalformed, name, st.Size, size, segSize)
	}
	mapping, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("free table of shared segment %q: mmap: %w", name, err)
	}
	v := &freeView{mapping: mapping}
	v.hdr, v.slots = freeLayout(mapping, nslots)
	if v.hdr.magic.Load() != freeMagic || v.hdr.shift.Load() != freeShift || v.hdr.nslots.Load() != nslots {
		_ = unix.Munmap(mapping)
		return nil, fmt.Errorf("%w: free table of shared segment %q: bad header (magic %#x, shift %d, %d slots)", errMalformed, name,
			v.hdr.magic.Load(), v.hdr.shift.Load(), v.hdr.nslots.Load())
	}
	return v, nil
}

func (v *freeView) unmap() { _ = unix.Munmap(v.mapping) }

// admits reports whether the data port would serve a request carrying
// tok now, as far as the serving engine published: the key is one it
// accepts, the grant has not expired, and no free of its extent was
// applied after the grant was placed (the free of a removed object is
// published before the box acknowledges it, and a removal returns only
// after that). Grant-less requests pass only where grants are not
// enforced. Anything it cannot tell (a malformed token, a reset or key
// change under way, another record stream) is not admitted: the request
// goes over TCP, where the data port decides. A READ is checked after its
// copy (a free published meanwhile voids what it read), a WRITE before.
func (v *freeView) admits(tok []byte, now int64) bool {
	h := v.hdr
	snap := freeSnap{gen: h.gen.Load(), outbox: h.outbox.Load(), nslots: uint64(len(v.slots)), nkeys: h.nkeys.Load()}
	for i := range snap.keys {
		snap.keys[i] = h.keys[i].Load()
	}
	ok, _ := snap.admits(tok, now, func(i uint64) (uint64, bool) { return v.slots[i].Load(), true })
	// The fields were loaded one by one: only an unmoved gen makes them
	// one state.
	return ok && h.gen.Load() == snap.gen
}

// freeSnap is a copy of a free table's header as a reader saw it: through
// a mapping (freeView) or by an RDMA READ of the table's memory region
// (rdmaTransport.admitted).
type freeSnap struct {
	gen, outbox, nslots, nkeys uint64
	keys                       [freeKeys]uint64
}

// admits is the verdict of freeView.admits over the header snap, reading
// the grant's slot with slot (ok false: it could not be read) only where
// a free could void the grant. slotRead tells the caller that a slot was
// read after the header: it must then check that gen did not move.
func (snap *freeSnap) admits(tok []byte, now int64, slot func(i uint64) (uint64, bool)) (ok, slotRead bool) {
	if snap.gen&1 != 0 {
		return false, false
	}
	if tok == nil {
		return snap.nkeys == 0, false
	}
	g, err := grant.Decode(tok)
	if err != nil || g.Expiry <= now || g.Bucket != 0 {
		return false, false
	}
	if snap.nkeys > 0 {
		known := false
		for i := range min(snap.nkeys, freeKeys) {
			known = known || snap.keys[i] == uint64(g.KeyID)
		}
		if !known {
			return false, false
		}
	}
	if snap.outbox != 0 && g.Outbox != 0 {
		if g.Outbox != snap.outbox {
			return false, false
		}
		if i := g.Offset >> freeShift; i < snap.nslots {
			seq, read := slot(i)
			return read && seq <= g.Seq, true
		}
	}
	return true, false
}
