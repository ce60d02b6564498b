package appliance

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// dramEntry is one committed object in a DRAM segment: what the directory
// remembers so that a new master can be rebuilt from it (about 100 bytes
// plus the key). crc is the client's checksum (hasCRC) or the one this
// appliance computed when the commit arrived; the bytes are checked against
// it before they are reported.
type dramEntry struct {
	off, size   uint64
	tenant, key string
	crc         uint32
	hasCRC      bool
	version     int64
}

func lessByOffset(a, b dramEntry) bool { return a.off < b.off }

// dramDir is the appliance's directory of the objects in its DRAM
// segments, kept from the master's commit and free records
// (TakeDramRecords). It is in memory only: an appliance restart loses the
// DRAM it describes anyway, and a master restart or failover is what it is
// for (the appliance outlives the master).
type dramDir struct {
	mu    sync.Mutex
	bySeg map[string]*btree.BTreeG[dramEntry] // guarded by mu: segment → entries by offset, never overlapping
}

func newDramDir() *dramDir { return &dramDir{bySeg: map[string]*btree.BTreeG[dramEntry]{}} }

// commit records e in seg, dropping every entry it overlaps: the space was
// freed and given to this put, so those bytes are gone.
func (d *dramDir) commit(seg string, e dramEntry) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.bySeg[seg]
	if t == nil {
		t = btree.NewG(16, lessByOffset)
		d.bySeg[seg] = t
	}
	var drop []dramEntry
	t.DescendLessOrEqual(dramEntry{off: e.off}, func(x dramEntry) bool {
		if x.off+x.size > e.off {
			drop = append(drop, x)
		}
		return false
	})
	t.AscendRange(dramEntry{off: e.off + 1}, dramEntry{off: e.off + e.size}, func(x dramEntry) bool {
		drop = append(drop, x)
		return true
	})
	for _, x := range drop {
		t.Delete(x)
	}
	t.ReplaceOrInsert(e)
}

// free drops the entry at (seg, off), if any.
func (d *dramDir) free(seg string, off uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if t := d.bySeg[seg]; t != nil {
		t.Delete(dramEntry{off: off})
	}
}

// clear forgets every entry.
func (d *dramDir) clear() {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.bySeg)
}

// len counts the entries.
func (d *dramDir) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, t := range d.bySeg {
		n += t.Len()
	}
	return n
}

// snapshot returns every entry with its segment.
func (d *dramDir) snapshot() map[string][]dramEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string][]dramEntry, len(d.bySeg))
	for seg, t := range d.bySeg {
		es := make([]dramEntry, 0, t.Len())
		t.Ascend(func(x dramEntry) bool { es = append(es, x); return true })
		out[seg] = es
	}
	return out
}

// DramDirectoryLen is the number of objects the DRAM directory holds.
func (a *Appliance) DramDirectoryLen() int { return a.dir.len() }

// takeDramRecords keeps the DRAM directory: over one stream per master
// (TakeDramRecords, both ways) it receives commit and free records,
// applies them and acknowledges each batch at once, which is what lets a
// PutEnd (commit) or a Remove (free) answer. A new master (another outbox)
// has nothing of the old one to acknowledge; a broken stream is opened
// again after takeBackoff.
func (a *Appliance) takeDramRecords(ctx context.Context) {
	for ctx.Err() == nil {
		err := a.dramStream(ctx)
		if ctx.Err() != nil {
			return
		}
		if status.Code(err) == codes.Unimplemented {
			a.log.Warn("master does not hand out DRAM directory records (older master): DRAM objects are lost if it restarts")
			return
		}
		a.log.Debug("dram records stream ended", "err", kverr.FromGRPC(err))
		select {
		case <-ctx.Done():
		case <-time.After(takeBackoff):
		}
	}
}

// recState is how far this appliance applied its master's DRAM records.
// Two may apply them: the stream goroutine (dramStream), and in a
// standalone a direct put taking its own commit record from the master
// of its process (pullOwnRecords: no stream goroutine woken, nothing to
// wait for). Both apply under mu, in seq order, each record once: a
// record applied by one comes again to the other, and is skipped.
type recState struct {
	mu sync.Mutex
	// guarded by mu:
	outbox, applied uint64
	ack             kvtierpb.TakeDramRecordsRequest // pullOwnRecords' acknowledgement, reused
	// puller is the in-process stream once it has started (nil otherwise).
	puller atomic.Pointer[recordsPuller]
	pulled atomic.Uint64 // records applied by pullOwnRecords
	taken  atomic.Uint64 // records applied by takeRecords
}

// DramRecordsPulled counts the DRAM records direct puts applied
// themselves (pullOwnRecords) rather than through the stream goroutine.
func (a *Appliance) DramRecordsPulled() uint64 { return a.rec.pulled.Load() }

// DramRecordsTaken counts the DRAM records direct puts applied from their
// PutStart answers (takeRecords), with a master in another process.
func (a *Appliance) DramRecordsTaken() uint64 { return a.rec.taken.Load() }

// recordsPuller is the in-process records stream of a standalone
// (master.DramRecordsConn): records can be taken from it without waiting.
type recordsPuller interface {
	DramRecordsStream
	TryRecv(after uint64) (*kvtierpb.TakeDramRecordsResponse, bool)
	Wake()
}

// dramStream runs one TakeDramRecords stream until it breaks.
func (a *Appliance) dramStream(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stream DramRecordsStream
	var err error
	if open := a.cfg.DramRecords; open != nil { // in-process (a standalone)
		stream, err = open(sctx)
	} else {
		stream, err = a.client.Master().TakeDramRecords(sctx)
	}
	if err != nil {
		return err
	}
	req := &kvtierpb.TakeDramRecordsRequest{ClientId: a.cfg.Name} // reused: Send has marshalled it when it returns
	send := func() error {
		a.rec.mu.Lock()
		req.Outbox, req.AckThrough = a.rec.outbox, a.rec.applied
		a.rec.mu.Unlock()
		return stream.Send(req)
	}
	if err := send(); err != nil {
		return err
	}
	if p, ok := stream.(recordsPuller); ok && !a.cfg.NoDramDirectory {
		a.rec.puller.Store(&p)
		defer a.rec.puller.Store(nil)
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		a.rec.mu.Lock()
		if resp.Outbox != a.rec.outbox {
			if a.rec.outbox != 0 {
				// Another master (restarted or newly elected): beat now
				// rather than up to an interval later, so it learns of
				// this appliance and its DRAM objects at once.
				go a.client.Heartbeat(ctx)
			}
			a.rec.outbox, a.rec.applied = resp.Outbox, 0
			a.staged.forgetKept() // the new master never had them
		}
		// Grants are revoked in this master's seqs from now on (a no-op
		// for the outbox followed already).
		if !a.cfg.NoGrantRevocation {
			a.engine.Revocations().Follow(resp.Outbox)
		}
		if resp.Reset_ {
			a.log.Warn("master dropped DRAM directory records this appliance missed: directory cleared")
			a.dir.clear()
		}
		rs := resp.Records
		for len(rs) > 0 && rs[0].Seq <= a.rec.applied {
			rs = rs[1:] // applied already by a direct put (pullOwnRecords)
		}
		if len(rs) > 0 {
			a.applyDramRecords(rs)
			a.rec.applied = rs[len(rs)-1].Seq
		}
		// (from the first answer on: the outbox followed)
		a.dirSeen.applied(a.rec.outbox, a.rec.applied)
		a.rec.mu.Unlock()
		if len(resp.Records) > 0 {
			if err := send(); err != nil {
				return err
			}
		}
	}
}

// wakeRecords wakes the in-process stream (when there is one) for quiet
// commit records a direct put will not take itself.
func (a *Appliance) wakeRecords() {
	if pp := a.rec.puller.Load(); pp != nil {
		(*pp).Wake()
	}
}

// pullOwnRecords applies, in the caller's goroutine, the records of outbox
// up to seq (a direct put's own commit record and those before it),
// taking them from the in-process stream of a standalone without waiting
// (recordsPuller.TryRecv); true once they are applied. It leaves the
// records to the stream goroutine (and wakes it: a quiet commit record,
// PutConfig.HolderPulls, woke nothing) when they include a free, whose
// revocation drains data-port frames (applyDramRecords), when another
// goroutine is applying records, or when the master has none this way.
func (a *Appliance) pullOwnRecords(outbox, seq uint64) bool {
	pp := a.rec.puller.Load()
	if pp == nil {
		return false
	}
	p := *pp
	if !a.rec.mu.TryLock() {
		// The stream goroutine, or another direct put, is applying
		// records. Another put's may end before this put's record (its
		// TryRecv came before this record was queued), and a quiet
		// record wakes nothing: without this the stream goroutine could
		// sleep on until its next poll, a second later
		// (TestPullOwnRecordsBusyWakes).
		p.Wake()
		return false
	}
	defer a.rec.mu.Unlock()
	if a.rec.outbox != outbox {
		p.Wake()
		return false
	}
	if a.rec.applied >= seq {
		return true
	}
	resp, ok := p.TryRecv(a.rec.applied)
	if !ok || resp.Outbox != outbox || len(resp.Records) == 0 || resp.Records[len(resp.Records)-1].Seq < seq {
		p.Wake()
		return false
	}
	for _, r := range resp.Records {
		if r.Free {
			p.Wake()
			return false
		}
	}
	a.applyDramRecords(resp.Records)
	a.rec.pulled.Add(uint64(len(resp.Records)))
	a.rec.applied = resp.Records[len(resp.Records)-1].Seq
	a.dirSeen.applied(outbox, a.rec.applied)
	a.rec.ack.ClientId, a.rec.ack.Outbox, a.rec.ack.AckThrough = a.cfg.Name, outbox, a.rec.applied
	if err := p.Send(&a.rec.ack); err != nil {
		a.log.Debug("acknowledging own dram records", "err", err)
	}
	return true
}

// takeRecords applies records a direct put's PutStart answer carried
// (PutConfig.holder_takes: those of outbox not yet acknowledged, up to the
// put's commit record, none a free), in the caller's goroutine, so the put
// need not wait for its stream goroutine to bring them. The stream brings
// them too (skipped then) and acknowledges them. It leaves them to the
// stream when another goroutine is applying records, or when outbox is not
// the one this box follows (a master that restarted or was replaced).
func (a *Appliance) takeRecords(outbox uint64, rs []*kvtierpb.DramRecord) {
	if len(rs) == 0 || !a.rec.mu.TryLock() {
		return
	}
	defer a.rec.mu.Unlock()
	if a.rec.outbox != outbox || outbox == 0 {
		return
	}
	for len(rs) > 0 && rs[0].Seq <= a.rec.applied {
		rs = rs[1:]
	}
	if len(rs) == 0 {
		return
	}
	for i, r := range rs {
		if r.Free || (i > 0 && r.Seq <= rs[i-1].Seq) {
			return // not what the master sends: leave it to the stream
		}
	}
	a.applyDramRecords(rs)
	a.rec.taken.Add(uint64(len(rs)))
	a.rec.applied = rs[len(rs)-1].Seq
	a.dirSeen.applied(outbox, a.rec.applied)
}

// applyDramRecords applies records in order; a free also revokes the
// freed replica's data-plane grants in the transfer engine
// (grant.Revocations), before the acknowledgement that lets the master
// give the space to another put, and the engine learns that every record
// up to the last is applied (grants placed after them are served from
// then on). A commit without the
// client's checksum gets one computed here (the bytes are final: such a
// commit is queued at PutEnd, after the client wrote them), so the report
// can prove them intact. A commit with the client's checksum may arrive
// before its bytes (it is queued at PutStart); nothing reads them until
// the report checks them.
func (a *Appliance) applyDramRecords(rs []*kvtierpb.DramRecord) {
	var rev *grant.Revocations
	now := time.Now().UnixNano()
	if !a.cfg.NoGrantRevocation {
		rev = a.engine.Revocations()
	}
	freed := false
	drained := true // no free applied since the last drain
	if rev != nil && len(rs) > 0 {
		defer func() {
			// Frames whose grant was checked before these revocations
			// finish before the frees are acknowledged (and before grants
			// placed after them are served); a frame still running after
			// RevocationWait is not waited for.
			if freed && !rev.Drain(transfer.RevocationWait) {
				a.log.Warn("data-port frames checked before a revocation still running; acknowledging the free anyway", "wait", transfer.RevocationWait)
			}
			rev.Applied(rs[len(rs)-1].Seq)
		}()
	}
	for _, r := range rs {
		if r.Free {
			a.dir.free(r.Segment, r.Offset)
			if rev != nil {
				rev.Revoke(r.Segment, r.Offset, r.Seq, r.GrantsExpire, now)
				freed, drained = true, false
			}
			continue
		}
		if r.Stage != 0 && !drained {
			// A staged put's bytes go in now: no frame of a grant this
			// batch's frees voided may still be moving bytes then.
			if !rev.Drain(transfer.RevocationWait) {
				a.log.Warn("data-port frames checked before a revocation still running; landing a staged put anyway", "wait", transfer.RevocationWait)
			}
			drained = true
		}
		landed := a.landStaged(r)
		e := dramEntry{off: r.Offset, size: r.Size, tenant: r.Tenant, key: string(r.Key), crc: r.Crc32C,
			hasCRC: r.HasChecksum, version: r.Version}
		if !e.hasCRC {
			mem := a.segmentBytes(r.Segment, r.Offset, r.Size)
			if mem == nil {
				a.log.Warn("dram record outside this appliance's segments", "segment", r.Segment, "offset", r.Offset, "size", r.Size)
				continue
			}
			e.crc = crc32c.Checksum(mem)
		}
		a.dir.commit(r.Segment, e)
		if landed != nil {
			a.staged.finish(r.Tenant, r.Key, landed, true)
		}
	}
}

// segmentBytes returns [off, off+n) of segment seg (nil when out of range).
func (a *Appliance) segmentBytes(seg string, off, n uint64) []byte {
	mem, _ := a.segment(seg)
	if off+n < off || off+n > uint64(len(mem)) {
		return nil
	}
	return mem[off : off+n]
}

// reportFollowWait bounds how long a directory report waits for the
// records stream to follow the master (reportDram).
const reportFollowWait = 5 * time.Second

// reportDram sends the DRAM directory to a master that did not know this
// appliance, so it rebuilds those objects (RegisterDramObjects). Each
// entry's bytes are checked against its checksum first: an entry whose
// bytes changed (a put in flight at the old master's death wrote over an
// object whose free record never arrived), or whose bytes never all
// landed (a put with the client's checksum is recorded at its PutStart,
// before the client writes: master/doc.go, "When the commit record
// travels"), is dropped, never reported.
// Entries the master refuses are dropped too. The last chunk says the
// report is complete, which lets the master allocate in these segments;
// it waits (up to reportFollowWait) until the records stream follows the
// master's outbox (from the heartbeat's answer; 0: an older master, no
// wait): the grants of puts placed here are placed in that stream, and
// the data port refuses a grant of a stream it does not follow once
// transfer.RevocationWait passes. After a failover a heartbeat can reach
// the new leader seconds before the stream does (the stream reconnects on
// its own schedule: a 500 ms backoff, then its gRPC connection's): in
// CI a put placed at once was refused PERMISSION_DENIED that way.
func (a *Appliance) reportDram(ctx context.Context, forget bool, outbox uint64) error {
	if forget {
		a.log.Warn("master had declared this appliance gone: DRAM directory cleared")
		a.dir.clear()
	}
	const chunk = 4096
	var req *kvtierpb.RegisterDramObjectsRequest
	var bad, refused, restored int
	send := func(last bool) error {
		req.Last = last
		resp, err := a.client.Master().RegisterDramObjects(ctx, req)
		if err != nil {
			return kverr.FromGRPC(err)
		}
		for i, r := range resp.Results {
			if r.Code == kvtierpb.ErrorCode_OK {
				restored++
				continue
			}
			refused++
			o := req.Objects[i]
			a.dir.free(o.Segment, o.Offset)
			a.log.Debug("dram object not restored", "key", string(o.Key), "code", r.Code, "msg", r.Message)
		}
		req = nil
		return nil
	}
	for seg, es := range a.dir.snapshot() {
		for _, e := range es {
			mem := a.segmentBytes(seg, e.off, e.size)
			if mem == nil || crc32c.Checksum(mem) != e.crc {
				bad++
				a.dir.free(seg, e.off)
				continue
			}
			if req == nil {
				req = &kvtierpb.RegisterDramObjectsRequest{ClientId: a.cfg.Name, Incarnation: a.incarnation}
			}
			req.Objects = append(req.Objects, &kvtierpb.DramObject{Tenant: e.tenant, Key: []byte(e.key), Segment: seg,
				Offset: e.off, Size: e.size, Crc32C: e.crc, HasChecksum: e.hasCRC, Version: e.version})
			if len(req.Objects) == chunk {
				if err := send(false); err != nil {
					return err
				}
			}
		}
	}
	if req == nil {
		req = &kvtierpb.RegisterDramObjectsRequest{ClientId: a.cfg.Name, Incarnation: a.incarnation}
	}
	// A box that follows no master's records yet (its first start) admits
	// every grant; one following another master's (a failover, a master
	// restart) would refuse this one's until its stream gets there.
	if outbox != 0 && a.dirSeen.followsAnother(outbox) && !a.dirSeen.awaitFollow(ctx, outbox, reportFollowWait) {
		a.log.Warn("DRAM directory reported before this appliance follows the master's records: puts placed here at once may be refused until the records stream reaches the master",
			"outbox", fmt.Sprintf("%x", outbox), "waited", reportFollowWait)
	}
	if err := send(true); err != nil {
		return err
	}
	a.log.Info("dram directory reported", "restored", restored, "refused", refused, "changed_bytes", bad)
	return nil
}
