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

// directPutTimeout bounds each master call a direct put makes (PutStart
// may wait for space while offloads land: master PutSpaceWait).
const directPutTimeout = 10 * time.Second

// putHandler places direct puts for the engine (transfer.PutHandler).
type putHandler struct {
	a  *Appliance
	pm PutMaster
}

var _ transfer.PutHandler = (*putHandler)(nil)

func (h *putHandler) startReq(id transfer.PutIdentity, p *transfer.DirectPut, withID bool) *kvtierpb.PutStartRequest {
	r := &kvtierpb.PutStartRequest{Key: []byte(p.Key), Size: p.Size, Crc32C: p.CRC32C, HasChecksum: true,
		Config: &kvtierpb.PutConfig{ReplicaNum: 1, PreferredSegment: p.PreferredSegment, SoftPin: p.SoftPin, HardPin: p.HardPin,
			SoftPinTtlMs: uint64(p.SoftPinTTL.Milliseconds()), OnlyNode: h.a.cfg.Name}}
	if withID {
		r.ClientId, r.Tenant, r.PutTicket = id.Client, id.Tenant, id.Ticket
	}
	return r
}

// placement turns a PutStart answer into where the engine writes; its
// token is the commit record's place in the master's outbox.
func (h *putHandler) placement(key string, reps []*kvtierpb.Replica, outbox, seq uint64) transfer.PutPlacement {
	if len(reps) != 1 || reps[0].GetType() != kvtierpb.ReplicaType_MEMORY || reps[0].GetNode() != h.a.cfg.Name {
		return transfer.PutPlacement{Err: kverr.New(kverr.InternalError, key, "master placed a direct put elsewhere (%d replicas)", len(reps))}
	}
	return transfer.PutPlacement{Segment: reps[0].GetSegment(), Offset: reps[0].GetOffset(), Token: [2]uint64{outbox, seq}}
}

func (h *putHandler) StartPuts(ctx context.Context, id transfer.PutIdentity, puts []transfer.DirectPut) []transfer.PutPlacement {
	out := make([]transfer.PutPlacement, len(puts))
	ctx, cancel := context.WithTimeout(ctx, directPutTimeout)
	defer cancel()
	defer h.drainBefore(ctx, puts, out)
	if len(puts) == 1 {
		resp, err := h.pm.PutStart(ctx, h.startReq(id, &puts[0], true))
		if err != nil {
			out[0].Err = kverr.FromGRPC(err)
			return out
		}
		out[0] = h.placement(puts[0].Key, resp.GetReplicas(), resp.GetDramOutbox(), resp.GetDramSeq())
		return out
	}
	req := &kvtierpb.BatchPutStartRequest{ClientId: id.Client, Tenant: id.Tenant, PutTicket: id.Ticket,
		Items: make([]*kvtierpb.PutStartRequest, len(puts))}
	for i := range puts {
		req.Items[i] = h.startReq(id, &puts[i], false)
	}
	resp, err := h.pm.BatchPutStart(ctx, req)
	if err == nil && len(resp.GetResults()) != len(puts) {
		err = kverr.New(kverr.RPCFail, "", "master answered %d results for %d puts", len(resp.GetResults()), len(puts))
	}
	for i := range puts {
		switch {
		case err != nil:
			out[i].Err = kverr.FromGRPC(err)
		case resp.Results[i].GetCode() != kvtierpb.ErrorCode_OK:
			out[i].Err = kverr.New(kverr.Code(resp.Results[i].GetCode()), puts[i].Key, "%s", resp.Results[i].GetMessage())
		default:
			out[i] = h.placement(puts[i].Key, resp.Results[i].GetReplicas(), resp.Results[i].GetDramOutbox(), resp.Results[i].GetDramSeq())
		}
	}
	return out
}

// recheckMax is the largest frame whose bytes EndPuts checks again after
// the records up to its commits were applied (a put that small is still
// in the CPU's cache: it was read straight into its extent). For a larger
// frame a second pass would cost more than the wait (a large put is
// written with non-temporal stores, so it would be read from memory; a
// batch's second pass was 6 % of a standalone's CPU under 64 KiB x 16
// batch puts): StartPuts waits for the records before a byte is read
// (drainBefore) instead.
const recheckMax = 128 << 10

// frameBytes sums the sizes of a frame's puts.
func frameBytes(puts []transfer.DirectPut) uint64 {
	var n uint64
	for i := range puts {
		n += puts[i].Size
	}
	return n
}

// drainBefore waits, for a frame larger than recheckMax, until
// this box applied the DRAM records up to the frame's commits (the frees
// of the extents' previous occupants among them: their stale grants'
// frames drained, grant.Revocations) before the engine reads the bytes.
func (h *putHandler) drainBefore(ctx context.Context, puts []transfer.DirectPut, places []transfer.PutPlacement) {
	if h.a.cfg.NoDramDirectory || h.a.cfg.NoGrantRevocation || !h.a.engine.GrantsEnforced() {
		return
	}
	if frameBytes(puts) <= recheckMax {
		return
	}
	var outbox, seq uint64
	for i := range puts {
		if places[i].Err == nil && places[i].Token[1] != 0 {
			outbox, seq = places[i].Token[0], max(seq, places[i].Token[1])
		}
	}
	if seq != 0 {
		h.a.dirSeen.wait(ctx, outbox, seq, dramSelfWait)
	}
}

func (h *putHandler) EndPuts(ctx context.Context, id transfer.PutIdentity, puts []transfer.DirectPut, places []transfer.PutPlacement, errs []error) []error {
	ctx, cancel := context.WithTimeout(ctx, directPutTimeout)
	defer cancel()
	// The commit records this box must have applied before it answers: it
	// confirms them itself (holder_applies), so PutEnd does not wait for
	// their acknowledgement to travel back to the master. Applying them
	// (and every record before them: the frees of the extents' previous
	// occupants) also drains the data-port frames of stale write grants
	// for these extents (grant.Revocations), after which the bytes are
	// checked once more: no such frame can have changed them since.
	var outbox, seq uint64
	self := !h.a.cfg.NoDramDirectory && len(id.Ticket) > 0
	placed := false
	for i := range puts {
		if places[i].Err != nil || errs[i] != nil {
			continue
		}
		placed = true
		t := places[i].Token
		if t[1] == 0 || (outbox != 0 && t[0] != outbox) {
			self = false
		}
		outbox, seq = t[0], max(seq, t[1])
	}
	if self && placed {
		if !h.a.dirSeen.follows(outbox) || !h.a.dirSeen.wait(ctx, outbox, seq, dramSelfWait) {
			self = false // not (yet) this master's records: PutEnd waits for them
		} else if !h.a.cfg.NoGrantRevocation && h.a.engine.GrantsEnforced() && frameBytes(puts) <= recheckMax {
			// (a larger frame waited before its bytes were read)
			for i := range puts {
				if places[i].Err != nil || errs[i] != nil {
					continue
				}
				mem := h.a.segmentBytes(places[i].Segment, places[i].Offset, puts[i].Size)
				if mem == nil || crc32c.Checksum(mem) != puts[i].CRC32C {
					errs[i] = kverr.New(kverr.ChecksumMismatch, puts[i].Key, "direct put: bytes changed after they arrived (a stale write grant's frame)")
				}
			}
		}
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
		if err == nil && len(resp.GetResults()) != len(commit) {
			err = kverr.New(kverr.RPCFail, "", "master answered %d results for %d puts", len(resp.GetResults()), len(commit))
		}
		for j, i := range commitIdx {
			switch {
			case err != nil:
				errs[i] = kverr.FromGRPC(err)
			case resp.Results[j].GetCode() != kvtierpb.ErrorCode_OK:
				errs[i] = kverr.New(kverr.Code(resp.Results[j].GetCode()), puts[i].Key, "%s", resp.Results[j].GetMessage())
			default:
				continue
			}
			revoke = append(revoke, commit[j])
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
// put's commit record on it, so a standalone's direct puts wait for two
// channel hand-overs instead of two HTTP/2 messages over loopback.
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

// follows reports whether the records of outbox are the ones applied.
func (d *dramSeen) follows(outbox uint64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.outbox == outbox
}

// wait waits until the records of outbox up to seq are applied (true), or
// another outbox is followed, max passes or ctx ends (false).
func (d *dramSeen) wait(ctx context.Context, outbox, seq uint64, max time.Duration) bool {
	var timer *time.Timer
	for {
		d.mu.Lock()
		if d.outbox != outbox {
			d.mu.Unlock()
			return false
		}
		if d.seq >= seq {
			d.mu.Unlock()
			return true
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
