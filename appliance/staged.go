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
// A frame of at most stageMax bytes (one put, or a batch) is staged
// instead: the engine reads its bytes and checks each put's CRC32C
// before anything is asked, and one PutStart (BatchPutStart for a batch)
// with PutConfig.stage places and commits its puts. The commit record
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

// stageMax is the largest frame staged. Staging costs one copy of the value
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
		memcopy.NonTemporal(mem, sp.bytes) // a large value is not read again soon: leave the cache to what is
	} else {
		copy(mem, sp.bytes)
	}
	return sp
}

var _ transfer.PutStager = (*putHandler)(nil)

// StagesPuts (transfer.PutStager) stages the frames that save a master
// round trip: on a box whose master is in another process, that confirms
// its commits itself (a DRAM directory, a put ticket) and follows its
// master's records, a frame of at most stageMax bytes.
func (h *putHandler) StagesPuts(id transfer.PutIdentity, puts []transfer.DirectPut) bool {
	return !h.inproc && h.confirmsOwn(id) && frameBytes(puts) <= stageMax && h.a.dirSeen.following() && h.a.staged.room() &&
		h.a.servesAllDRAM()
}

// servesAllDRAM reports whether the data plane still serves every DRAM
// segment mounted. A staged put is committed before its bytes are copied,
// so a placement in a segment the data plane lost (a box in trouble)
// would leave a committed object whose bytes never land: such a box
// takes the two-call path, where that put fails and is revoked.
func (a *Appliance) servesAllDRAM() bool {
	for _, name := range a.dramNames {
		if _, ok := a.segment(name); !ok {
			return false
		}
	}
	return true
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

// PutStaged (transfer.PutStager) places and commits a frame's puts,
// whose bytes the engine read and checked (b, back to back), with one
// master call (see "Staged direct puts"), and answers once they are in
// their extents. A put whose key is staged here already (another frame
// putting it) takes the two-call path alone.
func (h *putHandler) PutStaged(ctx context.Context, id transfer.PutIdentity, puts []transfer.DirectPut, b []byte, errs []error) []error {
	bufs := make([][]byte, len(puts))
	sps := make([]*stagedPut, len(puts))
	var alone []int // staged here already
	var idx []int   // the puts asked for, in order
	for i := range puts {
		bufs[i], b = b[:puts[i].Size], b[puts[i].Size:]
		if errs[i] != nil {
			continue
		}
		sp, ok := h.a.staged.add(id.Tenant, puts[i].Key, bufs[i])
		if !ok {
			alone = append(alone, i)
			continue
		}
		sps[i] = sp
		idx = append(idx, i)
	}
	if len(idx) > 0 {
		h.startStaged(ctx, id, puts, bufs, sps, idx, errs)
	}
	for _, i := range alone {
		errs[i] = h.putUnstaged(ctx, id, &puts[i], bufs[i])
	}
	return errs
}

// startStaged makes the one master call for the staged puts idx (PutStart
// for one, BatchPutStart for more), then waits for the committed ones to
// land and ends the others as ordinary direct puts.
func (h *putHandler) startStaged(ctx context.Context, id transfer.PutIdentity, puts []transfer.DirectPut, bufs [][]byte, sps []*stagedPut, idx []int, errs []error) {
	type answer struct {
		reps              []*kvtierpb.Replica
		outbox, seq, free uint64
		records           []*kvtierpb.DramRecord
		committed         bool
	}
	answers := make([]answer, len(puts))
	cctx, cancel := h.callCtx(ctx)
	defer cancel()
	if len(idx) == 1 {
		i := idx[0]
		req := h.startReq(id, &puts[i], true)
		req.Config.Stage = sps[i].token
		resp, err := h.pm.PutStart(cctx, req)
		if err != nil {
			errs[i] = kverr.FromGRPC(err)
		} else {
			answers[i] = answer{resp.GetReplicas(), resp.GetDramOutbox(), resp.GetDramSeq(), resp.GetDramFreeSeq(), resp.GetDramRecords(), resp.GetCommitted()}
		}
	} else {
		req := &kvtierpb.BatchPutStartRequest{ClientId: id.Client, Tenant: id.Tenant, PutTicket: id.Ticket,
			Items: make([]*kvtierpb.PutStartRequest, len(idx))}
		for j, i := range idx {
			req.Items[j] = h.startReq(id, &puts[i], false)
			req.Items[j].Config.Stage = sps[i].token
		}
		resp, err := h.pm.BatchPutStart(cctx, req)
		ends := itemErrs(resp.GetResults(), err, len(idx), func(j int) string { return puts[idx[j]].Key })
		for j, i := range idx {
			if errs[i] = ends[j]; errs[i] == nil {
				r := resp.Results[j]
				answers[i] = answer{r.GetReplicas(), r.GetDramOutbox(), r.GetDramSeq(), r.GetDramFreeSeq(), r.GetDramRecords(), r.GetCommitted()}
			}
		}
	}
	// Records first (the answer may carry them for every put of it), then
	// the outcome of each put.
	var unstaged []int
	var places []transfer.PutPlacement
	for _, i := range idx {
		a := answers[i]
		switch {
		case errs[i] != nil && definite(errs[i]):
			h.a.staged.discard(id.Tenant, puts[i].Key, sps[i])
		case errs[i] != nil:
			h.a.staged.keep(id.Tenant, puts[i].Key, sps[i]) // the master may have committed it
		default:
			h.a.takeRecords(a.outbox, a.records)
			if !a.committed {
				// A master that does not stage (older), or a node it keeps
				// no records for: no record carries the token.
				h.a.staged.discard(id.Tenant, puts[i].Key, sps[i])
				unstaged = append(unstaged, i)
				places = append(places, h.placement(puts[i].Key, a.reps, a.outbox, a.seq, a.free))
			}
		}
	}
	if len(unstaged) > 0 {
		h.landUnstaged(ctx, id, puts, bufs, unstaged, places, errs)
	}
	t := time.NewTimer(dramSelfWait)
	defer t.Stop()
	for _, i := range idx {
		if errs[i] != nil || !answers[i].committed {
			continue
		}
		sp := sps[i]
		select {
		case <-sp.landed:
			if !sp.ok {
				errs[i] = kverr.New(kverr.InternalError, puts[i].Key, "staged put: its commit record names an extent this box cannot write")
			}
			continue
		case <-t.C:
		case <-ctx.Done():
		}
		h.a.staged.keep(id.Tenant, puts[i].Key, sp)
		errs[i] = kverr.New(kverr.UnavailableInCurrentStatus, puts[i].Key,
			"staged put committed, but this box has not applied its commit record within %v: its bytes land when it does", dramSelfWait)
	}
}

// putUnstaged is a direct put of bytes already read: PutStart, copy,
// PutEnd.
func (h *putHandler) putUnstaged(ctx context.Context, id transfer.PutIdentity, p *transfer.DirectPut, b []byte) error {
	puts := []transfer.DirectPut{*p}
	places := h.StartPuts(ctx, id, puts)
	if places[0].Err != nil {
		return places[0].Err
	}
	errs := []error{nil}
	h.landUnstaged(ctx, id, puts, [][]byte{b}, []int{0}, places, errs)
	return errs[0]
}

// landUnstaged copies the bytes of puts idx into their placements once
// the records before them are applied (drainBefore), then ends them
// (EndPuts), setting their errs.
func (h *putHandler) landUnstaged(ctx context.Context, id transfer.PutIdentity, puts []transfer.DirectPut, bufs [][]byte, idx []int, places []transfer.PutPlacement, errs []error) {
	sub := make([]transfer.DirectPut, len(idx))
	subErrs := make([]error, len(idx))
	for j, i := range idx {
		sub[j] = puts[i]
	}
	h.drainBefore(ctx, sub, places)
	for j, i := range idx {
		pl := places[j]
		if pl.Err != nil {
			subErrs[j] = pl.Err
			continue
		}
		mem := h.a.segmentBytes(pl.Segment, pl.Offset, puts[i].Size)
		if mem == nil {
			subErrs[j] = kverr.New(kverr.SegmentNotFound, puts[i].Key, "direct put: segment %q has no extent [%d,+%d) on this node", pl.Segment, pl.Offset, puts[i].Size)
			continue
		}
		copy(mem, bufs[i])
	}
	for j, err := range h.EndPuts(ctx, id, sub, places, subErrs) {
		errs[idx[j]] = err
	}
}
