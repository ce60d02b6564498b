package appliance

import (
	"context"
	"sync"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/memcopy"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// Staged direct puts (transfer.PutStager). With its master in another
// process, a direct put costs the box two round trips to it (PutStart,
// then PutEnd once the bytes landed), each a wake-up of two processes.
// A put of at most stageMax bytes is staged instead: the engine reads
// its bytes and checks their CRC32C before anything is asked, and one
// PutStart with PutConfig.stage places and commits it. The commit record
// carries the stage token, and whoever applies that record on this box
// (the put's own goroutine from the answer, takeRecords, or the stream
// goroutine when it gets there first) copies the staged bytes into the
// extent first (applyDramRecords). The master hands the replica to
// readers only once this box acknowledged that record, so nobody reads
// the extent before the copy; the box answers its client once the copy
// is done, so an acknowledged put is in its extent and its directory.
//
// Every write into an extent so happens in the order of the master's
// records: the frees of the extent's earlier occupants (and the drain of
// their stale write grants' frames) come before the commit that copies.
//
// A PutStart whose answer was lost may still have committed: the bytes
// are then kept (cloned) until their record is applied, or another
// master's records are followed (whose directory never had the put), or
// keptLife passes; at most keptMax bytes are kept, past that puts take
// the unstaged path.

// stageMax is the largest put staged. Staging costs one copy of the value
// on this box (about 4 µs for 64 KiB, 60 µs for 1 MiB here) against a
// master round trip saved (100-400 µs on a 2-vCPU VM, most of it the
// wake-ups of the two processes).
const stageMax = 1 << 20

// keptMax bounds the bytes kept for staged puts whose outcome this box
// does not know (see above); keptLife how long they are kept.
const (
	keptMax  = 64 << 20
	keptLife = 2 * time.Minute
)

// stagedPut is one staged put's bytes until their commit record copies
// them in.
type stagedPut struct {
	token  uint64
	bytes  []byte
	landed chan struct{} // closed once copied (ok) or given up
	ok     bool          // set before landed closes: the bytes are in the extent
	kept   time.Time     // zero while the put's goroutine owns bytes; else when they were cloned
	taken  bool          // a commit record's application is copying them (it finishes the put)
}

// staging holds the staged puts of this box, by tenant and key (one at a
// time per key: a second put of a key staged here takes the unstaged
// path).
type staging struct {
	mu     sync.Mutex
	next   uint64                // guarded by mu: the last token handed out
	byKey  map[string]*stagedPut // guarded by mu
	keptN  uint64                // guarded by mu: bytes of kept entries
	copied uint64                // guarded by mu: puts landed by a commit record
}

func stagedKey(tenant string, key []byte) string {
	if tenant == "" {
		tenant = "default"
	}
	return tenant + "\x00" + string(key)
}

// add stages b for (tenant, key); false when that key is staged already.
func (s *staging) add(tenant, key string, b []byte) (*stagedPut, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey == nil {
		s.byKey = map[string]*stagedPut{}
	}
	s.expireLocked(time.Now())
	k := stagedKey(tenant, []byte(key))
	if s.byKey[k] != nil {
		return nil, false
	}
	s.next++
	sp := &stagedPut{token: s.next, bytes: b, landed: make(chan struct{})}
	s.byKey[k] = sp
	return sp, true
}

// room reports whether a put may be staged now (kept bytes under keptMax).
func (s *staging) room() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keptN < keptMax
}

// take marks and returns the staged put a commit record names (nil:
// none, or another token). It stays listed (an offload of the key waits
// for it) until finish.
func (s *staging) take(tenant string, key []byte, token uint64) *stagedPut {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp := s.byKey[stagedKey(tenant, key)]
	if sp == nil || sp.token != token || sp.taken {
		return nil
	}
	sp.taken = true
	return sp
}

// finish records a taken put's outcome, unlists it and wakes its waiters.
func (s *staging) finish(tenant string, key []byte, sp *stagedPut, ok bool) {
	s.mu.Lock()
	if ok {
		s.copied++
	}
	if k := stagedKey(tenant, key); s.byKey[k] == sp {
		delete(s.byKey, k)
	}
	if !sp.kept.IsZero() {
		s.keptN -= uint64(len(sp.bytes))
	}
	sp.ok = ok
	s.mu.Unlock()
	close(sp.landed)
}

// discard forgets sp, whose token no record carries (the master refused
// the put, or did not commit it). It returns once nobody copies from its
// bytes.
func (s *staging) discard(tenant, key string, sp *stagedPut) {
	s.mu.Lock()
	k := stagedKey(tenant, []byte(key))
	mine := s.byKey[k] == sp && !sp.taken
	if mine {
		delete(s.byKey, k)
	}
	s.mu.Unlock()
	if !mine {
		<-sp.landed // taken by a record's application: a copy, never long
	}
}

// keep hands sp's bytes over to the box (a copy of them), so the put's
// goroutine may reuse its buffer while the commit record may still come.
// It returns once nobody copies from the caller's bytes.
func (s *staging) keep(tenant, key string, sp *stagedPut) {
	s.mu.Lock()
	k := stagedKey(tenant, []byte(key))
	mine := s.byKey[k] == sp && !sp.taken
	if mine {
		sp.bytes = append([]byte(nil), sp.bytes...)
		sp.kept = time.Now()
		s.keptN += uint64(len(sp.bytes))
	}
	s.mu.Unlock()
	if !mine {
		<-sp.landed
	}
}

// forgetKept drops every kept entry: the records of another master are
// followed now, and it never had these puts.
func (s *staging) forgetKept() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, sp := range s.byKey {
		if !sp.kept.IsZero() && !sp.taken {
			s.dropLocked(k, sp)
		}
	}
}

// expireLocked drops kept entries older than keptLife.
func (s *staging) expireLocked(now time.Time) {
	if s.keptN == 0 {
		return
	}
	for k, sp := range s.byKey {
		if !sp.kept.IsZero() && !sp.taken && now.Sub(sp.kept) > keptLife {
			s.dropLocked(k, sp)
		}
	}
}

func (s *staging) dropLocked(k string, sp *stagedPut) {
	delete(s.byKey, k)
	s.keptN -= uint64(len(sp.bytes))
	close(sp.landed)
}

// awaitKey waits, at most d, until no put of (tenant, key) is staged
// here: before this box reads an object's bytes from its own memory
// (an offload), whose staged copy may not have landed yet.
func (s *staging) awaitKey(ctx context.Context, tenant string, key []byte, d time.Duration) {
	s.mu.Lock()
	sp := s.byKey[stagedKey(tenant, key)]
	s.mu.Unlock()
	if sp == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-sp.landed:
	case <-t.C:
	case <-ctx.Done():
	}
}

// StagedPutsLanded counts the staged direct puts whose bytes a commit
// record copied into their extents.
func (a *Appliance) StagedPutsLanded() uint64 {
	a.staged.mu.Lock()
	defer a.staged.mu.Unlock()
	return a.staged.copied
}

// landStaged copies a staged put's bytes into the extent its commit
// record names, if this box staged them (r.Stage): called for each commit
// record, in order, before the record is applied. It returns the put to
// finish once the record is in the directory (nil: none).
func (a *Appliance) landStaged(r *kvtierpb.DramRecord) *stagedPut {
	if r.Stage == 0 {
		return nil
	}
	sp := a.staged.take(r.Tenant, r.Key, r.Stage)
	if sp == nil {
		a.log.Warn("commit record of a staged put whose bytes this box does not hold: its extent is not written", "key", string(r.Key), "stage", r.Stage)
		return nil
	}
	mem := a.segmentBytes(r.Segment, r.Offset, r.Size)
	if mem == nil || uint64(len(sp.bytes)) != r.Size {
		a.log.Warn("commit record of a staged put outside this box's segments or of another size", "key", string(r.Key), "segment", r.Segment)
		a.staged.finish(r.Tenant, r.Key, sp, false)
		return nil
	}
	if len(mem) >= 256<<10 {
		memcopy.NonTemporal(mem, sp.bytes) // not read again here: keep the cache for what is
	} else {
		copy(mem, sp.bytes)
	}
	return sp
}

var _ transfer.PutStager = (*putHandler)(nil)

// StagesPut (transfer.PutStager) stages the puts that save a master
// round trip: a box whose master is in another process, that confirms
// its commits itself (a DRAM directory, a put ticket) and follows its
// master's records, for puts of at most stageMax bytes.
func (h *putHandler) StagesPut(id transfer.PutIdentity, p *transfer.DirectPut) bool {
	return !h.inproc && h.confirmsOwn(id) && p.Size <= stageMax && h.a.dirSeen.following() && h.a.staged.room()
}

// definite reports whether a master call's error means it did nothing
// (the master answered with a refusal), rather than that the answer was
// lost (the call may have been executed).
func definite(err error) bool {
	switch kverr.CodeOf(err) {
	case kverr.RPCFail, kverr.TransferFail, kverr.InternalError:
		return false
	}
	return true
}

// PutStaged (transfer.PutStager) places and commits put p, whose bytes b
// the engine read and checked, with one master call (see "Staged direct
// puts"), and answers once they are in their extent.
func (h *putHandler) PutStaged(ctx context.Context, id transfer.PutIdentity, p *transfer.DirectPut, b []byte) error {
	sp, ok := h.a.staged.add(id.Tenant, p.Key, b)
	if !ok {
		return h.putUnstaged(ctx, id, p, b) // another put of this key is staged here
	}
	req := h.startReq(id, p, true)
	req.Config.Stage = sp.token
	cctx, cancel := h.callCtx(ctx)
	defer cancel()
	resp, err := h.pm.PutStart(cctx, req)
	if err != nil {
		err = kverr.FromGRPC(err)
		if definite(err) {
			h.a.staged.discard(id.Tenant, p.Key, sp)
		} else {
			h.a.staged.keep(id.Tenant, p.Key, sp)
		}
		return err
	}
	if !resp.GetCommitted() {
		// A master that does not stage (older), or a node it keeps no
		// records for: no record carries the token. An ordinary direct
		// put from here on, its bytes copied rather than read.
		h.a.staged.discard(id.Tenant, p.Key, sp)
		place := h.placement(p.Key, resp.GetReplicas(), resp.GetDramOutbox(), resp.GetDramSeq(), resp.GetDramFreeSeq())
		h.a.takeRecords(resp.GetDramOutbox(), resp.GetDramRecords())
		return h.landUnstaged(ctx, id, p, b, place)
	}
	h.a.takeRecords(resp.GetDramOutbox(), resp.GetDramRecords())
	t := time.NewTimer(dramSelfWait)
	defer t.Stop()
	select {
	case <-sp.landed:
		if !sp.ok {
			return kverr.New(kverr.InternalError, p.Key, "staged put: its commit record names an extent this box cannot write")
		}
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	h.a.staged.keep(id.Tenant, p.Key, sp)
	return kverr.New(kverr.UnavailableInCurrentStatus, p.Key,
		"staged put committed, but this box has not applied its commit record within %v: its bytes land when it does", dramSelfWait)
}

// putUnstaged is a direct put of bytes already read: PutStart, copy,
// PutEnd.
func (h *putHandler) putUnstaged(ctx context.Context, id transfer.PutIdentity, p *transfer.DirectPut, b []byte) error {
	puts := []transfer.DirectPut{*p}
	places := h.StartPuts(ctx, id, puts)
	if places[0].Err != nil {
		return places[0].Err
	}
	return h.landUnstaged(ctx, id, p, b, places[0])
}

// landUnstaged copies b into place once the records before it are
// applied (drainBefore), then ends the put (EndPuts).
func (h *putHandler) landUnstaged(ctx context.Context, id transfer.PutIdentity, p *transfer.DirectPut, b []byte, place transfer.PutPlacement) error {
	puts := []transfer.DirectPut{*p}
	places := []transfer.PutPlacement{place}
	if place.Err != nil {
		return place.Err
	}
	h.drainBefore(ctx, puts, places)
	errs := []error{nil}
	if mem := h.a.segmentBytes(place.Segment, place.Offset, p.Size); mem == nil {
		errs[0] = kverr.New(kverr.SegmentNotFound, p.Key, "direct put: segment %q has no extent [%d,+%d) on this node", place.Segment, place.Offset, p.Size)
	} else {
		copy(mem, b)
	}
	return h.EndPuts(ctx, id, puts, places, errs)[0]
}
