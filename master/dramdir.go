package master

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// DramRecord is one change to an appliance's DRAM directory (doc.go,
// "Rebuild"): a put committed at (Segment, Offset), or the replica there
// freed.
type DramRecord struct {
	Seq         uint64
	Free        bool
	Tenant, Key string
	Segment     string
	Offset      uint64
	Size        uint64
	CRC32C      uint32
	HasChecksum bool
	Version     int64 // the put's PutStart time (unix ns) at the master that placed it: the same for every replica of one put
	// GrantsExpire (a free) is the latest expiry of any data-plane grant
	// signed for the freed replica: the appliance voids them until then.
	GrantsExpire int64
	// Stage (a commit) is the node's token for the staged bytes of the
	// put (PutConfig.Stage; 0: none): it copies them in before it applies
	// the record.
	Stage uint64
}

// DramObject is one committed object an appliance reports from its DRAM
// directory (RegisterDramObjects).
type DramObject struct {
	Tenant, Key string
	Segment     string
	Offset      uint64
	Size        uint64
	CRC32C      uint32
	HasChecksum bool
	Version     int64
}

// MaxTakeDramRecords bounds the records one TakeDramRecords answer carries.
const MaxTakeDramRecords = 4096

// dramQueueCap bounds the records queued for one appliance. An appliance
// that stopped asking past it has its queue dropped and is told to clear
// its directory (reset) when it asks again: its directory can no longer be
// trusted, and a stale one could bring removed keys back.
const dramQueueCap = 1 << 20

// dramOutbox holds, per appliance, the directory records it has not yet
// acknowledged. Records are queued only for appliances that ask for them
// (TakeDramRecords), so GPU nodes' segments cost nothing.
type dramOutbox struct {
	id uint64 // random per master start: acknowledgements name it

	mu     sync.Mutex
	next   uint64               // guarded by mu: last seq handed out
	byNode map[string]*nodeDram // guarded by mu
}

type nodeDram struct {
	pending []DramRecord  // in seq order, not yet acknowledged
	acked   uint64        // highest acknowledged seq
	lost    uint64        // records up to this seq were dropped (the queue overflowed): never acknowledged
	seen    int64         // when the node last took or acknowledged records (master clock, ns)
	ready   chan struct{} // closed (and replaced) when a record is added while armed
	armed   bool          // a stream waits on ready (else adding a record allocates nothing)
	ackc    chan struct{} // closed (and replaced) on every acknowledgement
	reset   bool          // the queue overflowed: tell the node to clear its directory
}

func (q *dramOutbox) init() {
	var b [8]byte
	_, _ = rand.Read(b[:])
	q.id = binary.LittleEndian.Uint64(b[:]) | 1
	q.byNode = map[string]*nodeDram{}
}

// addLocked queues r for node if the node takes records; it returns the
// seq to wait for (0: none). q.mu must be held.
// quiet: the node takes this record itself (PutConfig.HolderPulls), so
// its waiting streams are not woken for it.
func (q *dramOutbox) addLocked(node string, r DramRecord, quiet bool) uint64 {
	n := q.byNode[node]
	if n == nil {
		return 0
	}
	if len(n.pending) >= dramQueueCap {
		n.pending, n.reset, n.lost = nil, true, q.next
	}
	q.next++
	r.Seq = q.next
	n.pending = append(n.pending, r)
	if n.armed && !quiet {
		close(n.ready)
		n.ready, n.armed = make(chan struct{}), false
	}
	return r.Seq
}

// ensure starts keeping records for node.
func (q *dramOutbox) ensure(node string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.byNode[node] == nil {
		q.byNode[node] = &nodeDram{ready: make(chan struct{}), ackc: make(chan struct{})}
	}
}

// forget drops node's queue (it was declared gone: its directory is
// cleared when it comes back, see HeartbeatReply.ForgetDram).
func (q *dramOutbox) forget(node string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := q.byNode[node]; n != nil {
		delete(q.byNode, node)
		close(n.ackc) // nobody waits for a gone node
	}
}

// dramWait is one acknowledgement a caller waits for.
type dramWait struct {
	node string
	seq  uint64
}

// settledLocked reports whether node n applied every record of its queue
// up to seq (late: some were dropped, they never will be). Seqs are
// global across nodes, so a node's own records up to seq are settled once
// none of them is pending. q.mu must be held.
func (n *nodeDram) settledLocked(seq uint64) (done, late bool) {
	if seq <= n.lost {
		return false, true
	}
	return n.acked >= seq || len(n.pending) == 0 || n.pending[0].Seq > seq, false
}

// settled returns the index of the first wait not settled (len(ws): all
// are).
func (q *dramOutbox) settled(ws []dramWait) int {
	if len(ws) == 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, w := range ws {
		if n := q.byNode[w.node]; n != nil {
			if done, _ := n.settledLocked(w.seq); !done {
				return i
			}
		}
	}
	return len(ws)
}

// waitAcked waits until every wait is settled (settledLocked), up to
// timeout or ctx; it returns the nodes that did not acknowledge. The
// common case, every record applied already (a put's commit record was
// queued at PutStart and travelled while the client wrote), takes one
// lock and no timer.
func (q *dramOutbox) waitAcked(ctx context.Context, ws []dramWait, timeout time.Duration) []string {
	i := q.settled(ws)
	if i == len(ws) {
		return nil
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var late []string
	for _, w := range ws[i:] {
		for {
			q.mu.Lock()
			n := q.byNode[w.node]
			var done, lost bool
			if n == nil {
				done = true
			} else {
				done, lost = n.settledLocked(w.seq)
			}
			if done || lost {
				q.mu.Unlock()
				if lost {
					late = append(late, w.node)
				}
				break
			}
			ch := n.ackc
			q.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-timer.C:
			case <-ctx.Done():
			}
			late = append(late, w.node)
			// Past the deadline: collect the other late nodes without waiting.
			timer.Reset(0)
			break
		}
	}
	return late
}

// queueCommitLocked queues a commit record of (t, key) for the owner of
// each MEMORY replica of o and returns the highest seq queued (0: no
// owner keeps a directory). Called with the key's shard locked (lock
// order: shard, then outbox). PutStart calls it for a put with the
// client's checksum (the record travels while the client writes, and the
// appliance's report proves the bytes landed, see doc.go "Rebuild");
// PutEnd for one without.
func (m *Master) queueCommitLocked(t, key string, o *object, quiet bool, stage uint64) uint64 {
	var last uint64
	m.dram.mu.Lock()
	defer m.dram.mu.Unlock()
	for i := range o.replicas {
		r := &o.replicas[i]
		if r.typ != Memory || r.seg == nil {
			continue
		}
		seq := m.dram.addLocked(r.seg.owner.id, DramRecord{Tenant: t, Key: key, Segment: r.seg.spec.Name,
			Offset: r.offset, Size: o.size, CRC32C: o.crc, HasChecksum: o.flags&flagHasCRC != 0, Version: o.started, Stage: stage}, quiet)
		last = max(last, seq)
	}
	return last
}

// dramWaitsLocked names what to wait for so that every owner of a MEMORY
// replica of o applied its records up to seq.
func dramWaitsLocked(o *object, seq uint64) []dramWait {
	if seq == 0 {
		return nil
	}
	var ws []dramWait
	for i := range o.replicas {
		r := &o.replicas[i]
		if r.typ == Memory && r.seg != nil {
			ws = append(ws, dramWait{r.seg.owner.id, seq})
		}
	}
	return ws
}

// queueFreeLocked queues a free record for a MEMORY replica about to be
// released. It is queued before the space returns to the allocator, so
// the owner applies it before the commit of any later put there. It
// returns the record's seq (0: the owner keeps no directory).
//
// The record also revokes the replica's data-plane grants at the owner
// (internal/grant, Revocations): every grant signed for it carries the
// seq of the last free queued for its segment before (segment.freeSeq,
// read with the replica's shard locked, as this is called), so this
// record's seq is higher and voids them, while the grants of the next
// put placed there carry this seq or a later one. The grants voided
// expire at the latest after the longest lifetime a grant is signed for
// (a put's deadline, a read lease, an offload task).
func (m *Master) queueFreeLocked(r *replica) uint64 {
	if r.typ != Memory || r.seg == nil {
		return 0
	}
	life := max(m.cfg.PutDiscardTimeout, m.cfg.LeaseTTL, m.cfg.OffloadTimeout)
	m.dram.mu.Lock()
	defer m.dram.mu.Unlock()
	seq := m.dram.addLocked(r.seg.owner.id, DramRecord{Free: true, Segment: r.seg.spec.Name, Offset: r.offset,
		Size: r.length, GrantsExpire: m.now().Add(life).UnixNano()}, false)
	if seq != 0 {
		r.seg.freeSeq.Store(seq) // under dram.mu: never goes back
	}
	return seq
}

// dramBarrier waits until every appliance taking records acknowledged all
// queued so far (a removal's frees), at most RemoveSyncTimeout. The error
// names the appliances that did not.
func (m *Master) dramBarrier(ctx context.Context, key string) error {
	if m.cfg.RemoveSyncTimeout < 0 {
		return nil
	}
	m.dram.mu.Lock()
	var ws []dramWait
	for node, n := range m.dram.byNode {
		if len(n.pending) > 0 {
			ws = append(ws, dramWait{node, n.pending[len(n.pending)-1].Seq})
		}
	}
	m.dram.mu.Unlock()
	late := m.dram.waitAcked(ctx, ws, m.cfg.RemoveSyncTimeout)
	if len(late) == 0 {
		return nil
	}
	slices.Sort(late)
	m.ctr.add(cRemovalsUnconfirmed, 1)
	return kverr.New(kverr.UnavailableInCurrentStatus, key,
		"removed from the master, but appliance %s has not confirmed dropping its DRAM directory entry within %v "+
			"(queued; until it does, a master restart could bring the object back)", strings.Join(late, ", "), m.cfg.RemoveSyncTimeout)
}

// dramTakerSilence: a node that has neither taken nor acknowledged
// records for this long has no stream open (a stream asks at least every
// second), so a revoke does not wait for it.
const dramTakerSilence = 3 * time.Second

// awaitFrees waits, like awaitCommits, for the holders to drop a revoked
// put's entries, but not for holders with no stream open: a revoke often
// follows a write that failed because its holder died, and the client
// should not wait DramSyncTimeout to learn that its put failed. A holder
// that comes back without its DRAM had nothing to bring back; one
// reconnecting takes the frees first.
func (m *Master) awaitFrees(ctx context.Context, ws []dramWait) {
	if len(ws) == 0 {
		return
	}
	since := m.now().UnixNano() - int64(dramTakerSilence)
	m.dram.mu.Lock()
	live := ws[:0:0]
	for _, w := range ws {
		if n := m.dram.byNode[w.node]; n != nil && n.seen >= since {
			live = append(live, w)
		}
	}
	m.dram.mu.Unlock()
	m.awaitCommits(ctx, live)
}

// awaitCommits waits for the holders' acknowledgement of a put's commit
// records (or a revoke's frees), at most DramSyncTimeout. A holder that
// does not answer in time does not fail the call (the put is complete, the
// revoke done); the object may then not survive a master restart (or a
// revoked one come back), which a counter records.
func (m *Master) awaitCommits(ctx context.Context, ws []dramWait) {
	if m.cfg.DramSyncTimeout < 0 {
		return // the operator chose latency over surviving a master loss
	}
	if m.dram.settled(ws) == len(ws) {
		return
	}
	m.ctr.add(cDramCommitWaits, 1)
	if late := m.dram.waitAcked(ctx, ws, m.cfg.DramSyncTimeout); len(late) > 0 {
		m.ctr.add(cDramCommitsUnconfirmed, 1)
	}
}

// TakeDramRecords acknowledges the records client applied (those of
// outbox up to ackThrough), then returns the records it has still to
// apply, waiting up to wait for one; reset asks it to clear its directory
// first. It is AckDramRecords then NextDramRecords from the first record
// not acknowledged.
func (m *Master) TakeDramRecords(ctx context.Context, client string, outbox, ackThrough uint64, wait time.Duration) (uint64, bool, []DramRecord, error) {
	if err := m.AckDramRecords(client, outbox, ackThrough); err != nil {
		return 0, false, nil, err
	}
	return m.NextDramRecords(ctx, client, 0, wait)
}

// AckDramRecords records that client applied every record of outbox up to
// ackThrough (an acknowledgement naming another outbox, a previous
// master's, is ignored). The first call of a client starts its queue.
func (m *Master) AckDramRecords(client string, outbox, ackThrough uint64) error {
	if client == "" {
		return kverr.New(kverr.InvalidParams, "", "dram records: empty client id")
	}
	q := &m.dram
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.byNode[client]
	if n == nil {
		n = &nodeDram{ready: make(chan struct{}), ackc: make(chan struct{})}
		q.byNode[client] = n
	}
	n.seen = m.now().UnixNano()
	if outbox == q.id && ackThrough > n.acked {
		i := 0
		for i < len(n.pending) && n.pending[i].Seq <= ackThrough {
			i++
		}
		n.pending = slices.Delete(n.pending, 0, i)
		n.acked = ackThrough
		close(n.ackc)
		n.ackc = make(chan struct{})
	}
	return nil
}

// NextDramRecords returns this master's outbox and client's records with a
// seq above after (those a stream has not sent yet), waiting up to wait
// for one; reset asks the client to clear its directory first.
func (m *Master) NextDramRecords(ctx context.Context, client string, after uint64, wait time.Duration) (uint64, bool, []DramRecord, error) {
	if wait < 0 || wait > MaxTakeOffloadWait {
		return 0, false, nil, kverr.New(kverr.InvalidParams, "", "dram records: wait %v not in [0, %v]", wait, MaxTakeOffloadWait)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	return m.nextDramRecords(ctx, client, after, wait, &timer)
}

// nextDramRecords is NextDramRecords with the caller's timer (made only
// when there is something to wait for, then reused by a stream for every
// wait).
func (m *Master) nextDramRecords(ctx context.Context, client string, after uint64, wait time.Duration, tp **time.Timer) (uint64, bool, []DramRecord, error) {
	q := &m.dram
	armed := false // the timer runs for this call
	for {
		q.mu.Lock()
		n := q.byNode[client]
		if n == nil {
			// Forgotten (gone, restarted) until its next heartbeat or
			// acknowledgement: wait out the poll rather than answer at
			// once, or a stream that is still open would spin on it.
			q.mu.Unlock()
			if wait > 0 {
				if !armed {
					if *tp == nil {
						*tp = time.NewTimer(wait)
					} else {
						(*tp).Reset(wait)
					}
				}
				select {
				case <-(*tp).C:
				case <-ctx.Done():
				}
			}
			return q.id, false, nil, nil
		}
		n.seen = m.now().UnixNano()
		reset := n.reset
		n.reset = false
		i, _ := slices.BinarySearchFunc(n.pending, after+1, func(r DramRecord, seq uint64) int { return cmp.Compare(r.Seq, seq) })
		out := slices.Clone(n.pending[i:min(len(n.pending), i+MaxTakeDramRecords)])
		ready := n.ready
		if len(out) == 0 && !reset {
			n.armed = true // never cleared here: another stream of the node may wait on ready too
		}
		q.mu.Unlock()
		if len(out) > 0 || reset {
			return q.id, reset, out, nil
		}
		if !armed {
			if *tp == nil {
				*tp = time.NewTimer(wait)
			} else {
				(*tp).Reset(wait)
			}
			armed = true
		}
		timer := *tp
		select {
		case <-ready:
		case <-timer.C:
			return q.id, false, nil, nil
		case <-ctx.Done():
			return q.id, false, nil, nil
		}
	}
}

// peekDramRecords returns this master's outbox and client's records with
// a seq above after (at most MaxTakeDramRecords), without waiting and
// without marking anything: ok is false when the client's queue is
// unknown or must first tell it to clear its directory (a stream takes
// that). For an appliance that applies its own commit records
// (DramRecordsConn.TryRecv).
func (m *Master) peekDramRecords(client string, after uint64, out []DramRecord) (uint64, []DramRecord, bool) {
	q := &m.dram
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.byNode[client]
	if n == nil || n.reset {
		return q.id, out, false
	}
	i, _ := slices.BinarySearchFunc(n.pending, after+1, func(r DramRecord, seq uint64) int { return cmp.Compare(r.Seq, seq) })
	return q.id, append(out, n.pending[i:min(len(n.pending), i+MaxTakeDramRecords)]...), true
}

// maxHolderRecords bounds the records a direct put's PutStart answer
// carries (holderRecords); a node further behind waits for its stream.
const maxHolderRecords = 64

// holderRecords returns node's records not yet acknowledged, up to and
// including seq, in order, for the answer of a direct put whose node
// applies them from it (PutConfig.holder_takes): with the records it
// applied before they are every record up to seq. Nil when there are more
// than maxHolderRecords, when one is a free (its revocation drains the
// node's data-port frames, the put's own among them: the stream
// goroutine applies it), or when the node's queue dropped records it has
// not yet cleared its directory for (reset): it waits for its stream then.
func (m *Master) holderRecords(node string, seq uint64) []DramRecord {
	q := &m.dram
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.byNode[node]
	if n == nil || n.reset || (n.lost != 0 && n.acked <= n.lost) {
		return nil
	}
	j, _ := slices.BinarySearchFunc(n.pending, seq+1, func(r DramRecord, seq uint64) int { return cmp.Compare(r.Seq, seq) })
	if j == 0 || j > maxHolderRecords {
		return nil
	}
	for i := range n.pending[:j] {
		if n.pending[i].Free {
			return nil
		}
	}
	return slices.Clone(n.pending[:j])
}

// wakeDramRecords wakes the client's streams waiting for records (an
// appliance that took none of a quiet record itself hands it back).
func (m *Master) wakeDramRecords(client string) {
	q := &m.dram
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := q.byNode[client]; n != nil && n.armed {
		close(n.ready)
		n.ready, n.armed = make(chan struct{}), false
	}
}

// RegisterDramObjects rebuilds objects from an appliance's DRAM directory
// (a master that did not know the appliance: restarted, or newly
// elected). Each object becomes COMPLETE again with a MEMORY replica at
// exactly the reported extent, reserved in the segment's allocator; the
// result per object is nil or why it was refused (the appliance then drops
// the entry):
//   - the segment is not one of the caller's mounted MEMORY segments, or
//     the extent lies outside it (INVALID_PARAMS / SEGMENT_NOT_FOUND);
//   - the extent overlaps space already taken (NO_AVAILABLE_HANDLE): a
//     newer put got there first;
//   - the key exists with other bytes (OBJECT_ALREADY_EXISTS): put again
//     meanwhile. The same object (size, checksum and version) reported by
//     another holder gains this replica instead.
//
// last ends the report: the caller's segments take allocations again.
// Leases restart empty; puts that were in flight are not reported (the
// appliance records only committed puts), so their space is free.
func (m *Master) RegisterDramObjects(ctx context.Context, clientID, inc string, objs []DramObject, last bool) ([]error, error) {
	c := m.clients.get(clientID)
	if clientID == "" || c == nil {
		return nil, kverr.New(kverr.ClientNotFound, "", "register dram objects: client %q is not known (heartbeat first)", clientID)
	}
	if inc != "" {
		c.mu.Lock()
		cur := c.ident.Incarnation
		c.mu.Unlock()
		if cur != "" && cur != inc {
			return nil, kverr.New(kverr.IllegalClient, "", "register dram objects: %q is held by incarnation %s, not %s", clientID, cur, inc)
		}
	}
	out := make([]error, len(objs))
	restored := 0
	for i := range objs {
		out[i] = m.registerDramObject(c, &objs[i])
		if out[i] == nil {
			restored++
		}
	}
	m.ctr.add(cDramObjectsRestored, uint64(restored))
	if restored > 0 {
		m.publish(Event{Kind: "client", Node: c.id, Message: fmt.Sprintf("%d objects rebuilt from its DRAM directory", restored)})
	}
	if last {
		m.endReport(c)
	}
	return out, nil
}

func (m *Master) registerDramObject(c *client, d *DramObject) error {
	t, k, err := m.checkKey(d.Tenant, d.Key)
	if err != nil {
		return err
	}
	s := m.segs.get(d.Segment)
	switch {
	case s == nil:
		return kverr.New(kverr.SegmentNotFound, d.Key, "segment %q is not mounted", d.Segment)
	case s.owner != c || s.spec.Type != Memory:
		return kverr.New(kverr.IllegalClient, d.Key, "segment %q is not a MEMORY segment of %s", d.Segment, c.id)
	case d.Size == 0 || d.Offset%s.align != 0 || d.Offset+d.Size < d.Offset || d.Offset+s.roundUp(d.Size) > s.spec.Size/s.align*s.align:
		return kverr.New(kverr.InvalidParams, d.Key, "extent [%d, +%d) is not an allocation of segment %s", d.Offset, d.Size, d.Segment)
	}
	sh := m.shardOf(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if o := sh.objs[k]; o != nil {
		if !o.complete || o.size != d.Size || (o.flags&flagHasCRC != 0 && d.HasChecksum && o.crc != d.CRC32C) ||
			(o.started != d.Version && o.memPos != 0) {
			return kverr.New(kverr.ObjectAlreadyExists, d.Key, "the master holds other bytes under this key")
		}
		for i := range o.replicas {
			if o.replicas[i].seg == s {
				return kverr.New(kverr.ObjectAlreadyExists, d.Key, "already has a replica in segment %s", d.Segment)
			}
		}
		if !s.reserve(d.Offset, d.Size) {
			return kverr.New(kverr.NoAvailableHandle, d.Key, "extent [%d, +%d) of %s overlaps space in use", d.Offset, d.Size, d.Segment)
		}
		o.replicas = append(o.replicas, replica{seg: s, offset: d.Offset, length: d.Size, typ: Memory, state: Complete})
		s.replicas.Add(1)
		noteMemLocked(sh, k, o)
		return nil
	}
	if m.nObjects.Add(1) > int64(m.cfg.MaxObjects) {
		m.nObjects.Add(-1)
		return kverr.New(kverr.ObjectCountExceeded, d.Key, "object count limit %d reached", m.cfg.MaxObjects)
	}
	if !s.reserve(d.Offset, d.Size) {
		m.nObjects.Add(-1)
		return kverr.New(kverr.NoAvailableHandle, d.Key, "extent [%d, +%d) of %s overlaps space in use", d.Offset, d.Size, d.Segment)
	}
	m.tenantUsage(t).Add(d.Size)
	o := &object{replicas: []replica{{seg: s, offset: d.Offset, length: d.Size, typ: Memory, state: Complete}},
		writer: c.id, size: d.Size, started: d.Version, created: d.Version, complete: true, flags: flagRebuilt}
	if d.HasChecksum {
		o.flags |= flagHasCRC
		o.crc = d.CRC32C
	}
	s.replicas.Add(1)
	sh.objs[k] = o
	noteMemLocked(sh, k, o)
	return nil
}

// reserve takes exactly [off, off+n) (n rounded up to the alignment) out
// of the free space; false when any of it is taken (nothing changes).
func (s *segment) reserve(off, n uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed.Load() || !s.alloc.reserve(off, s.roundUp(n)) {
		return false
	}
	s.used.Store(s.alloc.used())
	s.free.Store(s.alloc.free)
	return true
}

// reserve takes [off, off+length) out of the free set. It must lie wholly
// inside one free extent and be aligned; otherwise it reports false and
// changes nothing (an overlap with allocated space, refused cleanly).
func (a *allocator) reserve(off, length uint64) bool {
	if length == 0 || off%a.align != 0 || length%a.align != 0 || off+length < off || off+length > a.total {
		return false
	}
	var e extent
	found := false
	a.byOff.DescendLessOrEqual(extent{off: off}, func(x extent) bool {
		e, found = x, true
		return false
	})
	if !found || e.off+e.size < off+length {
		return false
	}
	a.remove(e)
	if off > e.off {
		a.insert(extent{e.off, off - e.off})
	}
	if end := e.off + e.size; end > off+length {
		a.insert(extent{off + length, end - off - length})
	}
	a.free -= length
	return true
}

// awaitReport marks the segments a heartbeat is about to re-announce for
// a master that did not know c, which will report its DRAM directory: they
// take no allocations until it has (or RebuildWait passed), so no put is
// placed over an object not yet reported.
//
// A node with objects in its directory is evidence that this master
// replaced one that knew them: reads that miss answer "rebuilding" until
// RebuildWindow after this master's start, giving the nodes not heard of
// yet one heartbeat to re-announce themselves.
func (m *Master) awaitReport(c *client, now int64, objects uint64) {
	if objects > 0 {
		m.restarted.Store(true)
	}
	c.mu.Lock()
	if c.awaitSince == 0 {
		c.awaitSince = now
	}
	c.mu.Unlock()
	c.awaitDram.Store(true)
}

// endReport lets c's segments take allocations again.
func (m *Master) endReport(c *client) {
	c.awaitDram.Store(false)
	c.mu.Lock()
	c.awaitSince = 0
	c.mu.Unlock()
	for _, s := range m.segs.all() {
		if s.owner == c {
			s.awaiting.Store(false)
		}
	}
}

// reapReports ends the wait for reports that did not come within
// RebuildWait: those segments take allocations (an object reported later
// is refused where a newer put took its space).
func (m *Master) reapReports(now int64) {
	for _, c := range m.clients.list() {
		if !c.awaitDram.Load() {
			continue
		}
		c.mu.Lock()
		due := c.awaitSince != 0 && now-c.awaitSince > int64(m.cfg.RebuildWait)
		c.mu.Unlock()
		if due {
			m.endReport(c)
			m.publish(Event{Kind: "client", Node: c.id, Message: "no DRAM directory report within " + m.cfg.RebuildWait.String()})
		}
	}
}

// Rebuilding reports whether the master waits for appliances' DRAM
// directory reports, and whose.
func (m *Master) Rebuilding() (bool, string) {
	if m.restarted.Load() && m.now().UnixNano() < m.started+int64(m.cfg.RebuildWindow) {
		return true, "appliances report what the previous master knew (the first " + m.cfg.RebuildWindow.String() + " after start)"
	}
	var who []string
	for _, c := range m.clients.list() {
		if c.awaitDram.Load() {
			who = append(who, c.id)
		}
	}
	if len(who) == 0 {
		return false, ""
	}
	return true, "waiting for the DRAM directory of " + strings.Join(who, ", ")
}

// settling reports whether a key this master does not know may still be
// reported by an appliance, and why: it rebuilds (Rebuilding), or it
// started less than RebuildWindow ago and no node holding objects has
// been heard from yet (after a restart the appliances' first heartbeats
// take up to an interval). Removals wait it out (Remove, removeMatching):
// a removal answered "not found" must not see the object come back with
// a late report.
func (m *Master) settling() (bool, string) {
	if ok, why := m.Rebuilding(); ok {
		return true, why
	}
	if !m.holderSeen.Load() && m.now().UnixNano() < m.started+int64(m.cfg.RebuildWindow) {
		return true, "no appliance heard from yet, in the first " + m.cfg.RebuildWindow.String() + " after start"
	}
	return false, ""
}

// errSettling is the answer to a removal that waited out its bound while
// the master settles: the caller retries shortly.
func (m *Master) errSettling(key string) error {
	if ok, why := m.settling(); ok {
		return kverr.New(kverr.UnavailableInCurrentStatus, key, "master rebuilding its object table (%s): retry", why)
	}
	return nil
}

// errAwaitingReports refuses a put while no MEMORY segment takes
// allocations because their appliances' reports are still due (a put
// elsewhere is fine: a key reported later that was put again meanwhile
// keeps the new bytes).
func (m *Master) errAwaitingReports(key string) error {
	waiting := false
	for _, s := range m.segs.all() {
		if s.spec.Type != Memory || s.removed.Load() {
			continue
		}
		if s.allocatable() {
			return nil
		}
		waiting = waiting || s.awaiting.Load()
	}
	if !waiting {
		return nil
	}
	return kverr.New(kverr.UnavailableInCurrentStatus, key, "master rebuilding: every DRAM segment waits for its appliance's directory report; retry")
}

// errRebuilding is the answer to a read of an unknown key or a put while
// the master rebuilds: the caller retries shortly.
func (m *Master) errRebuilding(key string) error {
	if ok, why := m.Rebuilding(); ok {
		return kverr.New(kverr.UnavailableInCurrentStatus, key, "master rebuilding its object table (%s): retry", why)
	}
	return nil
}
