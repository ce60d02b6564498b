package grant

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Revocations is a verifier's table of grants voided before their expiry:
// those for a MEMORY extent the master freed after signing them. It is fed
// from the master's DRAM directory records (an ordered stream per node, in
// which every free of a MEMORY replica is queued before its space returns
// to the allocator), so a grant stops working once its extent's free
// record is applied, which happens before any later put's bytes there are
// accepted:
//
//   - Revoke(segment, offset, seq, until): the replica at (segment,
//     offset) was freed by record seq; every grant for that extent placed
//     before it (Grant.Seq < seq) is void. until is the latest expiry of
//     any such grant: the entry is dropped after it.
//   - Applied(seq): every record up to seq has been applied.
//   - Check: a grant placed in the followed stream (Grant.Outbox) is
//     served only once the records up to its Seq are applied (so the free
//     of whatever occupied its extent before is known), waiting up to a
//     bound for them, and never if a later free voided it.
//
// A grant's Seq is the seq of the last free record queued for its segment
// when it was signed (under the lock that orders it against the replica's
// own free), so the free of its own replica always comes later and the
// free of its extent's previous occupant never does.
//
// A table that follows no stream (Follow never called: a node that takes
// no records, such as a GPU client's own segment) checks nothing: grants
// then live until their expiry, as before. A grant of another outbox (a
// master this node does not follow, or not yet) waits for the stream to
// switch to it and is refused if it does not.
//
// Entries are kept per (segment, offset): a grant names exactly one
// replica's extent, and the free names the same offset. At most max
// entries are kept; past that the oldest is dropped and every grant placed
// before it is void (floor): stricter, never laxer.
type Revocations struct {
	mu      sync.RWMutex
	outbox  uint64 // guarded by mu: the stream followed, 0: none
	applied uint64 // guarded by mu: every record up to it applied
	floor   uint64 // guarded by mu: grants placed before it are void
	segs    map[string]map[uint64]revoked
	fifo    []revEntry    // guarded by mu: insertion order, for dropping
	head    int           // guarded by mu: fifo[:head] are dropped
	changed chan struct{} // guarded by mu: closed and replaced when outbox or applied moves
	max     int

	// Frames in flight (Enter/Exit), by epoch: Drain flips the epoch and
	// waits for the frames of the old one, so a frame verified before a
	// revocation has finished moving bytes before the free is
	// acknowledged.
	epoch     atomic.Uint32
	inflight  [2]atomic.Int64
	drainMu   sync.Mutex
	drainLate bool // guarded by drainMu: the last Drain timed out

	pub Publisher // guarded by mu: told of every change (Publish), or nil
}

// A Publisher mirrors a table's changes where the table itself cannot be
// consulted: the transfer engine publishes them to peers that map its
// segments (shared memory reads bypass the data port, and with it Check).
// Its methods are called as each change is made, under the table's lock,
// so a change is published before Revoke, Follow or Clear returns (and so
// before the free is acknowledged to the master). They must not block nor
// call the table back.
type Publisher interface {
	// Followed: the table follows outbox now; every entry was forgotten
	// (a no-op when it followed outbox already).
	Followed(outbox uint64)
	// Revoked: grants for the extent at (segment, offset) placed before
	// seq are void.
	Revoked(segment string, offset, seq uint64)
	// Cleared: every entry was forgotten (the outbox followed is kept).
	Cleared()
}

type revoked struct {
	seq   uint64
	until int64
}

type revEntry struct {
	seg string
	off uint64
	revoked
}

// DefaultMaxRevocations bounds a table's entries (about 100 bytes each).
const DefaultMaxRevocations = 1 << 20

// NewRevocations returns an empty table keeping at most max entries
// (0: DefaultMaxRevocations).
func NewRevocations(max int) *Revocations {
	if max <= 0 {
		max = DefaultMaxRevocations
	}
	return &Revocations{segs: map[string]map[uint64]revoked{}, changed: make(chan struct{}), max: max}
}

func (r *Revocations) signalLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Follow makes the table follow outbox's records (a new master's): the
// entries of another outbox are forgotten, as its seqs mean nothing here
// (the previous master's grants then wait for their outbox and are
// refused).
func (r *Revocations) Follow(outbox uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if outbox == r.outbox {
		return
	}
	r.outbox, r.applied, r.floor = outbox, 0, 0
	clear(r.segs)
	r.fifo, r.head = nil, 0
	r.signalLocked()
	if r.pub != nil {
		r.pub.Followed(outbox)
	}
}

// Clear forgets every entry (not the stream followed, nor what was
// applied): the verifier's keys were all replaced, so every grant an entry
// could void fails on its key, and entries would only refuse the grants
// of segments the master mounted anew (their seqs start again from the
// segment's first free).
func (r *Revocations) Clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.segs)
	r.fifo, r.head, r.floor = nil, 0, 0
	if r.pub != nil {
		r.pub.Cleared()
	}
}

// Publish makes p learn of every change from now on (nil: none).
func (r *Revocations) Publish(p Publisher) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pub = p
}

// Replay tells p the table's state for segment as it is now, under the
// table's lock (no change slips between it and the changes published
// after): the outbox followed, then each of the segment's entries.
func (r *Revocations) Replay(segment string, p Publisher) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p.Followed(r.outbox)
	for off, e := range r.segs[segment] {
		p.Revoked(segment, off, e.seq)
	}
}

// Revoke voids the grants for the extent at (segment, offset) placed
// before seq, until until (unix ns, the latest expiry of any of them);
// entries past their until are dropped (at now).
func (r *Revocations) Revoke(segment string, offset, seq uint64, until, now int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pub != nil {
		// Published even when every grant it voids has expired here: a
		// publisher's readers may not check expiry as closely.
		r.pub.Revoked(segment, offset, seq)
	}
	r.pruneLocked(now)
	if until <= now {
		return // every grant it could void has expired
	}
	m := r.segs[segment]
	if m == nil {
		m = map[uint64]revoked{}
		r.segs[segment] = m
	}
	e := revoked{seq, until}
	if old, ok := m[offset]; ok {
		e.seq, e.until = max(e.seq, old.seq), max(e.until, old.until)
	}
	m[offset] = e
	r.fifo = append(r.fifo, revEntry{segment, offset, e})
	for len(r.fifo)-r.head > r.max {
		r.floor = max(r.floor, r.dropLocked().seq)
	}
}

// dropLocked drops the oldest fifo entry (from the map too unless a later
// Revoke replaced it).
func (r *Revocations) dropLocked() revEntry {
	x := r.fifo[r.head]
	r.head++
	if m := r.segs[x.seg]; m != nil {
		if cur, ok := m[x.off]; ok && cur == x.revoked {
			delete(m, x.off)
			if len(m) == 0 {
				delete(r.segs, x.seg)
			}
		}
	}
	if r.head > 1024 && r.head*2 > len(r.fifo) { // compact
		r.fifo = append(r.fifo[:0], r.fifo[r.head:]...)
		r.head = 0
	}
	return x
}

func (r *Revocations) pruneLocked(now int64) {
	for r.head < len(r.fifo) && r.fifo[r.head].until <= now {
		r.dropLocked()
	}
}

// Applied records that every record up to seq of the followed outbox has
// been applied, waking the checks that wait for it.
func (r *Revocations) Applied(seq uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seq > r.applied {
		r.applied = seq
		r.signalLocked()
	}
}

// Len returns the number of entries held.
func (r *Revocations) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	n := 0
	for _, m := range r.segs {
		n += len(m)
	}
	return n
}

// Check refuses (Revoked) g, verified for segment, if a free applied
// since it was signed voids it. A grant placed after records not yet
// applied (or in an outbox not yet followed) waits for them up to wait,
// then is refused.
//
// held, if not nil, is the caller's Enter: a frame waiting here has not
// been allowed yet, so it exits while it waits (a Drain that the records
// it waits for are behind does not wait for it) and enters again, *held
// updated, before it is checked again.
func (r *Revocations) Check(g *Grant, segment string, wait time.Duration, held *uint32) error {
	if g.Outbox == 0 {
		return nil
	}
	if ok, err := r.check(g, segment); ok {
		return err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		r.mu.RLock()
		ch, outbox, applied := r.changed, r.outbox, r.applied
		r.mu.RUnlock()
		if ok, err := r.check(g, segment); ok {
			return err
		}
		if held != nil {
			r.Exit(*held)
		}
		expired := false
		select {
		case <-ch:
		case <-timer.C:
			expired = true
		}
		if held != nil {
			*held = r.Enter()
		}
		if !expired {
			continue
		}
		if ok, err := r.check(g, segment); ok {
			return err
		}
		if g.Outbox != outbox {
			return refuse(Revoked, "grant placed in outbox %x of a master this node does not follow (it follows %x)", g.Outbox, outbox)
		}
		return refuse(Revoked, "grant needs the master's records up to %d, this node applied %d within %v", g.Seq, applied, wait)
	}
}

// Voids reports whether Check would refuse g now for its revocation
// state, without waiting for records not yet applied: a grant those
// records could void is not void yet (the free of its own extent comes
// after them), and one of an outbox not followed is. For a reader of the
// node's memory in the node's own process (a view read in place), which
// passes no data port.
func (r *Revocations) Voids(g *Grant, segment string) bool {
	if g.Outbox == 0 {
		return false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	switch {
	case r.outbox == 0:
		return false
	case g.Outbox != r.outbox:
		return true
	case g.Seq < r.floor:
		return true
	}
	e, found := r.segs[segment][g.Offset]
	return found && e.seq > g.Seq
}

// check is Check without waiting: ok false when g's records are not
// applied yet (or its outbox not followed).
func (r *Revocations) check(g *Grant, segment string) (ok bool, err error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.outbox == 0 {
		return true, nil // this node follows no records: grants live until their expiry
	}
	if g.Outbox != r.outbox || g.Seq > r.applied {
		return false, nil
	}
	if m := r.segs[segment]; m != nil {
		if e, found := m[g.Offset]; found && e.seq > g.Seq {
			return true, refuse(Revoked, "extent %d of segment %q freed by the master (record %d) after the grant was signed (record %d)",
				g.Offset, segment, e.seq, g.Seq)
		}
	}
	if g.Seq < r.floor {
		return true, refuse(Revoked, "grant signed at record %d, before record %d (revocations that old are no longer kept)", g.Seq, r.floor)
	}
	return true, nil
}

// Enter counts a data-port frame in flight, before its grant is checked;
// Exit(the value returned) when it has moved its bytes.
func (r *Revocations) Enter() uint32 {
	e := r.epoch.Load() & 1
	r.inflight[e].Add(1)
	return e
}

// Exit ends a frame counted by Enter.
func (r *Revocations) Exit(e uint32) { r.inflight[e&1].Add(-1) }

// Drain waits until every frame that entered before it was called has
// exited, up to timeout (false: some had not). Called after Revoke and
// before the free is acknowledged: a frame whose grant was checked before
// the revocation (it entered before) cannot still be writing into, or
// reading from, the space when the master gives it to another put. A
// frame entering after Drain started is checked against the revocation.
func (r *Revocations) Drain(timeout time.Duration) bool {
	r.drainMu.Lock()
	defer r.drainMu.Unlock()
	old := r.epoch.Add(1) - 1
	// Frames of the epoch before old were drained by the previous call.
	// If it timed out, some may still run, counted with the frames that
	// enter from now on: wait for those too (bounded by timeout).
	busy := func() bool {
		return r.inflight[old&1].Load() > 0 || (r.drainLate && r.inflight[(old+1)&1].Load() > 0)
	}
	deadline := time.Now().Add(timeout)
	for d := 20 * time.Microsecond; busy(); d = min(2*d, time.Millisecond) {
		if time.Now().After(deadline) {
			r.drainLate = true
			return false
		}
		time.Sleep(d)
	}
	r.drainLate = false
	return true
}

// String describes the table (for logs).
func (r *Revocations) String() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return fmt.Sprintf("outbox %x applied %d floor %d entries %d", r.outbox, r.applied, r.floor, len(r.fifo)-r.head)
}
