package appliance

import (
	"context"
	"sync"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// Direct puts (internal/transfer doc.go, "Direct puts"): a client sends
// key, checksum and bytes to this box's data port in one frame; the box
// asks the master to place the put on its own segments (PutStart with
// only_node, carrying the client's put ticket), the engine reads the bytes
// straight into the extent and checks the CRC32C, and the box commits
// (PutEnd) or revokes, then answers. The client makes one round trip
// instead of three; the master still decides placement.

// PutMaster is the master's side of direct puts: the calls the box makes
// for its clients. kvtierpb.MasterServer has these methods, so a
// standalone passes its master's service in-process (no socket, no
// encoding); a box with a master of its own process reaches it through
// its client connection (masterPuts), coalescing concurrent calls.
type PutMaster interface {
	PutStart(context.Context, *kvtierpb.PutStartRequest) (*kvtierpb.PutStartResponse, error)
	PutEnd(context.Context, *kvtierpb.KeyRequest) (*kvtierpb.Empty, error)
	PutRevoke(context.Context, *kvtierpb.KeyRequest) (*kvtierpb.Empty, error)
	BatchPutStart(context.Context, *kvtierpb.BatchPutStartRequest) (*kvtierpb.BatchPutStartResponse, error)
	BatchPutEnd(context.Context, *kvtierpb.BatchKeysRequest) (*kvtierpb.BatchResponse, error)
	BatchPutRevoke(context.Context, *kvtierpb.BatchKeysRequest) (*kvtierpb.BatchResponse, error)
}

// directPutTimeout bounds each master call a direct put makes to a master
// in another process (PutStart may wait for space while offloads land:
// master PutSpaceWait).
const directPutTimeout = 10 * time.Second

// putHandler places direct puts for the engine (transfer.PutHandler).
type putHandler struct {
	a  *Appliance
	pm PutMaster
	// inproc: pm is the master of this process (Config.PutMaster), which
	// bounds its own waits (PutSpaceWait, DramSyncTimeout), so its calls
	// get no deadline of their own: two context.WithTimeout a put were
	// 4 % of a standalone's CPU under 64 KiB direct puts, 4 callers.
	inproc bool
}

// callCtx bounds the master calls of one StartPuts or EndPuts.
func (h *putHandler) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if h.inproc {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, directPutTimeout)
}

var _ transfer.PutHandler = (*putHandler)(nil)

func (h *putHandler) startReq(id transfer.PutIdentity, p *transfer.DirectPut, withID bool) *kvtierpb.PutStartRequest {
	r := &kvtierpb.PutStartRequest{Key: []byte(p.Key), Size: p.Size, Crc32C: p.CRC32C, HasChecksum: true,
		Config: &kvtierpb.PutConfig{ReplicaNum: 1, PreferredSegment: p.PreferredSegment, SoftPin: p.SoftPin, HardPin: p.HardPin,
			SoftPinTtlMs: uint64(p.SoftPinTTL.Milliseconds()), OnlyNode: h.a.cfg.Name,
			// The box takes the commit record itself (pullOwnRecords) when
			// its master is in this process and it confirms its commits
			// (EndPuts' self): no stream goroutine woken.
			HolderPulls: h.inproc && h.confirmsOwn(id) && h.a.rec.puller.Load() != nil,
			// A master in another process answers with the records up to
			// the commit, which the box applies at once (takeRecords)
			// instead of waiting for them on its stream.
			HolderTakes: !h.inproc && h.confirmsOwn(id)}}
	if withID {
		r.ClientId, r.Tenant, r.PutTicket = id.Client, id.Tenant, id.Ticket
	}
	return r
}

// placement turns a PutStart answer into where the engine writes; its
// token is the records' places in the master's outbox: the commit
// record's seq, and the last free of the segment before the placement
// (tokFreeSeq; tokDrained once this box applied the records up to it
// before the bytes were read).
func (h *putHandler) placement(key string, reps []*kvtierpb.Replica, outbox, seq, freeSeq uint64) transfer.PutPlacement {
	if len(reps) != 1 || reps[0].GetType() != kvtierpb.ReplicaType_MEMORY || reps[0].GetNode() != h.a.cfg.Name {
		return transfer.PutPlacement{Err: kverr.New(kverr.InternalError, key, "master placed a direct put elsewhere (%d replicas)", len(reps))}
	}
	return transfer.PutPlacement{Segment: reps[0].GetSegment(), Offset: reps[0].GetOffset(), Token: [3]uint64{outbox, seq, freeSeq}}
}

// A placement's Token: the outbox, the commit record's seq, and the free
// seq (dram_free_seq) until StartPuts waited for it, then tokDrained.
const (
	tokOutbox, tokSeq, tokFree = 0, 1, 2
	tokDrained                 = ^uint64(0)
)

var _ transfer.LocalPlacer = (*putHandler)(nil)

// PlacesLocally (transfer.LocalPlacer): the master is this process's.
func (h *putHandler) PlacesLocally() bool { return h.inproc }

func (h *putHandler) StartPuts(ctx context.Context, id transfer.PutIdentity, puts []transfer.DirectPut) []transfer.PutPlacement {
	out := make([]transfer.PutPlacement, len(puts))
	ctx, cancel := h.callCtx(ctx)
	defer cancel()
	defer h.drainBefore(ctx, puts, out)
	if len(puts) == 1 {
		resp, err := h.pm.PutStart(ctx, h.startReq(id, &puts[0], true))
		if err != nil {
			out[0].Err = kverr.FromGRPC(err)
			return out
		}
		out[0] = h.placement(puts[0].Key, resp.GetReplicas(), resp.GetDramOutbox(), resp.GetDramSeq(), resp.GetDramFreeSeq())
		h.a.takeRecords(resp.GetDramOutbox(), resp.GetDramRecords())
		return out
	}
	req := &kvtierpb.BatchPutStartRequest{ClientId: id.Client, Tenant: id.Tenant, PutTicket: id.Ticket,
		Items: make([]*kvtierpb.PutStartRequest, len(puts))}
	for i := range puts {
		req.Items[i] = h.startReq(id, &puts[i], false)
	}
	resp, err := h.pm.BatchPutStart(ctx, req)
	errs := itemErrs(resp.GetResults(), err, len(puts), func(i int) string { return puts[i].Key })
	for i := range puts {
		if out[i].Err = errs[i]; out[i].Err == nil {
			r := resp.Results[i]
			out[i] = h.placement(puts[i].Key, r.GetReplicas(), r.GetDramOutbox(), r.GetDramSeq(), r.GetDramFreeSeq())
			h.a.takeRecords(r.GetDramOutbox(), r.GetDramRecords())
		}
	}
	return out
}

// recheckMax is the largest frame whose bytes EndPuts checks again after
// the records up to its commits were applied, when the master did not
// say where the extents' last frees are (dram_free_seq 0: a master that
// predates it, or a segment never freed): a put that small is still in
// the CPU's cache (it was read straight into its extent). A larger frame
// waits for the records up to its commits before a byte is read instead
// (a large put is written with non-temporal stores, so a second pass
// would read it from memory).
const recheckMax = 128 << 10

// frameBytes sums the sizes of a frame's puts.
func frameBytes(puts []transfer.DirectPut) uint64 {
	var n uint64
	for i := range puts {
		n += puts[i].Size
	}
	return n
}

// drainBefore waits, before the engine reads a frame's bytes, until this
// box applied the DRAM records that free the extents' earlier occupants
// (their stale write grants voided and those grants' frames drained,
// grant.Revocations), so no such frame can change the bytes after they
// land. With the master's dram_free_seq that is the records up to the
// last free of each segment before the placement, almost always applied
// long ago: the placements are marked tokDrained and EndPuts checks
// nothing again. Without it (an older master, a segment never freed), a
// frame larger than recheckMax waits for the records up to its own
// commits, and a smaller one is checked again by EndPuts.
func (h *putHandler) drainBefore(ctx context.Context, puts []transfer.DirectPut, places []transfer.PutPlacement) {
	if h.a.cfg.NoDramDirectory || h.a.cfg.NoGrantRevocation || !h.a.engine.GrantsEnforced() {
		return
	}
	var outbox, seq, free uint64
	marked := true
	for i := range puts {
		t := places[i].Token
		if places[i].Err != nil || t[tokSeq] == 0 {
			continue
		}
		if t[tokFree] == 0 || (outbox != 0 && t[tokOutbox] != outbox) {
			marked = false
		}
		outbox, seq, free = t[tokOutbox], max(seq, t[tokSeq]), max(free, t[tokFree])
	}
	switch {
	case seq == 0:
	case marked:
		if h.a.awaitRecords(ctx, outbox, free) {
			for i := range places {
				if places[i].Err == nil && places[i].Token[tokSeq] != 0 {
					places[i].Token[tokFree] = tokDrained
				}
			}
		}
	case frameBytes(puts) > recheckMax:
		h.a.awaitRecords(ctx, outbox, seq)
	}
}

// confirmsOwn reports whether this box confirms the commit records of
// puts by id itself (holder_applies): it keeps a DRAM directory and the
// master checks the client's ticket.
func (h *putHandler) confirmsOwn(id transfer.PutIdentity) bool {
	return !h.a.cfg.NoDramDirectory && len(id.Ticket) > 0
}

func (h *putHandler) EndPuts(ctx context.Context, id transfer.PutIdentity, puts []transfer.DirectPut, places []transfer.PutPlacement, errs []error) []error {
	ctx, cancel := h.callCtx(ctx)
	defer cancel()
	// The commit records this box must have applied before it answers: it
	// confirms them itself (holder_applies), so PutEnd does not wait for
	// their acknowledgement to travel back to the master. Applying them
	// (and every record before them: the frees of the extents' previous
	// occupants) also drains the data-port frames of stale write grants
	// for these extents (grant.Revocations); the bytes of a put whose
	// frees were not applied before they were read (drainBefore) are
	// checked once more then: no such frame can have changed them since.
	var outbox, seq uint64
	self := h.confirmsOwn(id)
	placed := false
	for i := range puts {
		if places[i].Err != nil || errs[i] != nil {
			continue
		}
		placed = true
		t := places[i].Token
		if t[tokSeq] == 0 || (outbox != 0 && t[tokOutbox] != outbox) {
			self = false
		}
		outbox, seq = t[tokOutbox], max(seq, t[tokSeq])
	}
	if self && placed {
		ok := h.a.dirSeen.follows(outbox) && h.a.awaitRecords(ctx, outbox, seq)
		if !ok {
			self = false // not (yet) this master's records: PutEnd waits for them
		} else if !h.a.cfg.NoGrantRevocation && h.a.engine.GrantsEnforced() && frameBytes(puts) <= recheckMax {
			// (a larger frame waited before its bytes were read; a put
			// whose extents' frees were applied before needs no check)
			for i := range puts {
				if places[i].Err != nil || errs[i] != nil || places[i].Token[tokFree] == tokDrained {
					continue
				}
				mem := h.a.segmentBytes(places[i].Segment, places[i].Offset, puts[i].Size)
				if mem == nil || crc32c.Checksum(mem) != puts[i].CRC32C {
					errs[i] = kverr.New(kverr.ChecksumMismatch, puts[i].Key, "direct put: bytes changed after they arrived (a stale write grant's frame)")
				}
			}
		}
	}
	if !self && h.inproc {
		h.a.wakeRecords() // PutEnd waits for the acknowledgement of a quiet record
	}
	var commit, revoke [][]byte
	var commitIdx []int
	for i := range puts {
		if places[i].Err != nil {
			continue // not placed: nothing to end
		}
		if errs[i] == nil {
			commit = append(commit, []byte(puts[i].Key))
			commitIdx = append(commitIdx, i)
		} else {
			revoke = append(revoke, []byte(puts[i].Key))
		}
	}
	if len(commit) == 1 && len(puts) == 1 {
		if _, err := h.pm.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: id.Client, Tenant: id.Tenant, Key: commit[0], PutTicket: id.Ticket, HolderApplies: self}); err != nil {
			errs[0] = kverr.FromGRPC(err)
			revoke = commit
		}
	} else if len(commit) > 0 {
		resp, err := h.pm.BatchPutEnd(ctx, &kvtierpb.BatchKeysRequest{ClientId: id.Client, Tenant: id.Tenant, Keys: commit, PutTicket: id.Ticket, HolderApplies: self})
		ends := itemErrs(resp.GetResults(), err, len(commit), func(j int) string { return puts[commitIdx[j]].Key })
		for j, i := range commitIdx {
			if ends[j] != nil {
				errs[i] = ends[j]
				revoke = append(revoke, commit[j])
			}
		}
	}
	if len(revoke) > 0 {
		// A fresh context: the frame's may be why it failed.
		rctx, cancel := context.WithTimeout(context.Background(), directPutTimeout)
		defer cancel()
		var err error
		if len(revoke) == 1 {
			_, err = h.pm.PutRevoke(rctx, &kvtierpb.KeyRequest{ClientId: id.Client, Tenant: id.Tenant, Key: revoke[0], PutTicket: id.Ticket})
		} else {
			_, err = h.pm.BatchPutRevoke(rctx, &kvtierpb.BatchKeysRequest{ClientId: id.Client, Tenant: id.Tenant, Keys: revoke, PutTicket: id.Ticket})
		}
		if err != nil {
			h.a.log.Warn("direct put revoke failed; the master reclaims after its timeout", "keys", len(revoke), "err", kverr.FromGRPC(err))
		}
	}
	return errs
}

// masterPuts is PutMaster over the box's own client connection to a
// master in another process.
type masterPuts struct{ c kvtierpb.MasterClient }

func (m masterPuts) PutStart(ctx context.Context, r *kvtierpb.PutStartRequest) (*kvtierpb.PutStartResponse, error) {
	return m.c.PutStart(ctx, r)
}
func (m masterPuts) PutEnd(ctx context.Context, r *kvtierpb.KeyRequest) (*kvtierpb.Empty, error) {
	return m.c.PutEnd(ctx, r)
}
func (m masterPuts) PutRevoke(ctx context.Context, r *kvtierpb.KeyRequest) (*kvtierpb.Empty, error) {
	return m.c.PutRevoke(ctx, r)
}
func (m masterPuts) BatchPutStart(ctx context.Context, r *kvtierpb.BatchPutStartRequest) (*kvtierpb.BatchPutStartResponse, error) {
	return m.c.BatchPutStart(ctx, r)
}
func (m masterPuts) BatchPutEnd(ctx context.Context, r *kvtierpb.BatchKeysRequest) (*kvtierpb.BatchResponse, error) {
	return m.c.BatchPutEnd(ctx, r)
}
func (m masterPuts) BatchPutRevoke(ctx context.Context, r *kvtierpb.BatchKeysRequest) (*kvtierpb.BatchResponse, error) {
	return m.c.BatchPutRevoke(ctx, r)
}

// DramRecordsStream is the appliance's side of a TakeDramRecords stream
// (dramdir.go): the gRPC client stream, or an in-process one
// (Config.DramRecords). PutEnd waits for the holder's acknowledgement of a
// put's commit record on it, so a standalone's direct puts wait for the
// appliance's stream goroutine only instead of two HTTP/2 messages over
// loopback. An answer of Recv may be reused by the next Recv (the
// in-process stream does): dramStream copies what it keeps.
type DramRecordsStream interface {
	Send(*kvtierpb.TakeDramRecordsRequest) error
	Recv() (*kvtierpb.TakeDramRecordsResponse, error)
}

// dramSelfWait bounds how long a direct put waits for its own commit
// record (the master's default DramSyncTimeout).
const dramSelfWait = 2 * time.Second

// dramSeen is how far this box applied the master's DRAM directory
// records: the outbox followed and the last seq applied (dramdir.go), for
// direct puts, which answer their client only once their commit record is
// in the directory.
// awaitRecords waits until this box applied the records of outbox up to
// seq (dramSeen.wait), applying them itself where it can (pullOwnRecords).
func (a *Appliance) awaitRecords(ctx context.Context, outbox, seq uint64) bool {
	return a.pullOwnRecords(outbox, seq) || a.dirSeen.wait(ctx, outbox, seq, dramSelfWait)
}

type dramSeen struct {
	mu sync.Mutex
	// guarded by mu:
	outbox, seq uint64
	moved       chan struct{} // closed (and replaced) when seq or outbox moves
}

// applied records that every record of outbox up to seq is applied.
func (d *dramSeen) applied(outbox, seq uint64) {
	d.mu.Lock()
	d.outbox, d.seq = outbox, seq
	if d.moved != nil {
		close(d.moved)
		d.moved = nil
	}
	d.mu.Unlock()
}

// following reports whether this box follows a master's records at all.
func (d *dramSeen) following() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.outbox != 0
}

// follows reports whether the records of outbox are the ones applied.
func (d *dramSeen) follows(outbox uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.outbox == outbox
}

// followsAnother reports whether the records applied are those of a
// master other than outbox's (false while none are followed).
func (d *dramSeen) followsAnother(outbox uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.outbox != 0 && d.outbox != outbox
}

// awaitFollow waits until the records of outbox are the ones applied
// (true), or max passes or ctx ends (false).
func (d *dramSeen) awaitFollow(ctx context.Context, outbox uint64, max time.Duration) bool {
	return d.until(ctx, max, func(o, _ uint64) (done, ok bool) { return o == outbox, true })
}

// wait waits until the records of outbox up to seq are applied (true), or
// another outbox is followed, max passes or ctx ends (false).
func (d *dramSeen) wait(ctx context.Context, outbox, seq uint64, max time.Duration) bool {
	return d.until(ctx, max, func(o, s uint64) (done, ok bool) {
		if o != outbox {
			return true, false
		}
		return s >= seq, true
	})
}

// until waits until cond, called under mu with the outbox and seq
// applied, says done (then it returns cond's ok), or max passes or ctx
// ends (false).
func (d *dramSeen) until(ctx context.Context, max time.Duration, cond func(outbox, seq uint64) (done, ok bool)) bool {
	var timer *time.Timer
	for {
		d.mu.Lock()
		if done, ok := cond(d.outbox, d.seq); done {
			d.mu.Unlock()
			return ok
		}
		if d.moved == nil {
			d.moved = make(chan struct{})
		}
		ch := d.moved
		d.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(max)
			defer timer.Stop()
		}
		select {
		case <-ch:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
