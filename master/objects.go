package master

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// PutStart reserves space for a new object and returns where to write it.
//
// A key that is COMPLETE, or in flight and younger than PutDiscardTimeout, is
// refused with OBJECT_ALREADY_EXISTS (the client SDK reports "already stored"
// when the size matches). An older in-flight put is taken over: its space is
// kept reserved until PutReleaseTimeout after its PutStart, since a stalled
// writer may still write into it. Replicas go on distinct segments, distinct
// nodes first; the count is best effort (at least one, else
// NO_AVAILABLE_HANDLE: at once when no MEMORY segment could hold the object;
// otherwise after one synchronous eviction pass and a retry, one evicted
// address range and a retry (makeRoom), and, while offloads are moving,
// waiting up to PutSpaceWait for them to make objects evictable).
func (m *Master) PutStart(ctx context.Context, req PutRequest) ([]Replica, error) {
	t, k, err := m.checkKey(req.Tenant, req.Key)
	if err != nil {
		return nil, err
	}
	if err := m.checkPut(&req); err != nil {
		return nil, err
	}
	if err := m.errAwaitingReports(req.Key); err != nil {
		return nil, err
	}
	need := req.Size * uint64(max(req.Config.Replicas, 1))
	reps, retry, err := m.putStartOnce(t, k, &req)
	if !retry {
		return reps, err
	}
	if largest := m.largestMemorySegment(); req.Config.Replicas == 0 || largest < req.Size {
		// Eviction frees only MEMORY, and no MEMORY segment could ever
		// hold this object: evicting would empty DRAM for nothing.
		m.ctr.add(cPutsRejectedNoSpace, 1)
		if req.Config.Replicas > 0 {
			err = kverr.New(kverr.NoAvailableHandle, req.Key, "%d bytes is more than any MEMORY segment holds (the largest: %d)", req.Size, largest)
		}
		return reps, err
	}
	var deadline time.Time // of waiting for offloads; set at the first wait
	for {
		// Taken before the pass: an offload landing after this wakes the
		// wait below, one landing before it is seen by the pass.
		progress := m.offload.progress()
		m.evictPass(ctx, need)
		if reps, retry, err = m.putStartOnce(t, k, &req); !retry {
			return reps, err
		}
		// The pass freed bytes in lease order, wherever they lay: an object
		// larger than its neighbours may still find no free extent large
		// enough. Evict one contiguous range for it instead (makeRoom).
		if m.evictForHole(req.Size) {
			if reps, retry, err = m.putStartOnce(t, k, &req); !retry {
				return reps, err
			}
		}
		// What the pass could not evict may be objects on their way to SSD
		// (offload on): while offloads are queued or in flight (the pass
		// itself queues them in on-evict mode), wait for one to land
		// and try again, up to PutSpaceWait, rather than refuse a put that
		// space is about to free up for.
		if deadline.IsZero() {
			deadline = time.Now().Add(m.cfg.PutSpaceWait)
		}
		if !m.offloadsMoving() || !waitFor(ctx, progress, deadline) {
			m.ctr.add(cPutsRejectedNoSpace, 1)
			return reps, err
		}
	}
}

// waitFor waits until ch is closed (true), or deadline passes or ctx ends
// (false).
func waitFor(ctx context.Context, ch <-chan struct{}, deadline time.Time) bool {
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (m *Master) checkPut(req *PutRequest) error {
	c := req.Config
	switch {
	case req.Client == "":
		return kverr.New(kverr.InvalidParams, req.Key, "put needs a client id")
	case req.Size == 0:
		return kverr.New(kverr.InvalidParams, req.Key, "size 0")
	case c.Replicas < 0 || c.NOFReplicas < 0 || c.Replicas+c.NOFReplicas == 0:
		return kverr.New(kverr.InvalidParams, req.Key, "replica count %d+%d: at least one replica", c.Replicas, c.NOFReplicas)
	case c.Replicas+c.NOFReplicas > m.cfg.MaxReplicas:
		return kverr.New(kverr.InvalidParams, req.Key, "replica count %d above the maximum %d", c.Replicas+c.NOFReplicas, m.cfg.MaxReplicas)
	case c.OnlyNode != "" && (c.Replicas != 1 || c.NOFReplicas != 0):
		return kverr.New(kverr.InvalidParams, req.Key, "a put placed on node %q takes one MEMORY replica, not %d+%d", c.OnlyNode, c.Replicas, c.NOFReplicas)
	case c.Stage != 0 && (c.OnlyNode == "" || !req.HasChecksum):
		return kverr.New(kverr.InvalidParams, req.Key, "a staged put (stage %d) is a direct put with a checksum", c.Stage)
	case c.SoftPinTTL < 0 || c.SoftPinTTL > m.cfg.MaxSoftPinTTL:
		return kverr.New(kverr.InvalidParams, req.Key, "soft-pin TTL %v outside [0, %v]", c.SoftPinTTL, m.cfg.MaxSoftPinTTL)
	}
	if c.PreferredSegment != "" && m.segs.get(c.PreferredSegment) == nil {
		return kverr.New(kverr.SegmentNotFound, req.Key, "preferred segment %q is not mounted", c.PreferredSegment)
	}
	return nil
}

// putStartOnce tries one placement. retry reports an allocation failure
// (nothing changed) that an eviction pass might cure.
func (m *Master) putStartOnce(t, k string, req *PutRequest) (_ []Replica, retry bool, _ error) {
	now := m.now().UnixNano()
	sh := m.shardOf(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if o := sh.objs[k]; o != nil {
		switch {
		case o.complete && o.size != req.Size:
			m.ctr.add(cPutsAlreadyExists, 1)
			return nil, false, kverr.New(kverr.ObjectAlreadyExists, req.Key, "stored with a different size (%d, not %d)", o.size, req.Size)
		case o.complete:
			m.ctr.add(cPutsAlreadyExists, 1)
			return nil, false, kverr.New(kverr.ObjectAlreadyExists, req.Key, "already stored")
		case now-o.started < int64(m.cfg.PutDiscardTimeout):
			m.ctr.add(cPutsAlreadyExists, 1)
			return nil, false, kverr.New(kverr.ObjectAlreadyExists, req.Key, "a put of this key is in flight (writer %s)", o.writer)
		}
		m.takeOverLocked(sh, k, o)
	}
	if m.nObjects.Add(1) > int64(m.cfg.MaxObjects) {
		m.nObjects.Add(-1)
		m.ctr.add(cPutsRejectedObjectCount, 1)
		return nil, false, kverr.New(kverr.ObjectCountExceeded, req.Key, "object count limit %d reached", m.cfg.MaxObjects)
	}
	usage := m.tenantUsage(t)
	if q, ok := m.cfg.TenantQuota[t]; ok {
		for {
			u := usage.Load()
			if u+req.Size > q || u+req.Size < u {
				m.nObjects.Add(-1)
				m.ctr.add(cPutsRejectedQuota, 1)
				return nil, false, kverr.New(kverr.QuotaExceeded, req.Key, "tenant %s holds %d of %d bytes", t, u, q)
			}
			if usage.CompareAndSwap(u, u+req.Size) {
				break
			}
		}
	} else {
		usage.Add(req.Size)
	}
	c := req.Config
	reps := m.allocate(req.Size, c.Replicas, c.NOFReplicas, c.PreferredSegment, c.OnlyNode)
	if len(reps) == 0 {
		m.nObjects.Add(-1)
		usage.Add(^(req.Size - 1))
		return nil, true, kverr.New(kverr.NoAvailableHandle, req.Key, "no segment has %d free bytes", req.Size)
	}
	if len(reps) < c.Replicas+c.NOFReplicas {
		m.ctr.add(cPutsPartialAlloc, 1)
	}
	o := &object{replicas: reps, writer: m.intern(req.Client), size: req.Size, started: now, crc: req.CRC32C}
	if req.HasChecksum {
		o.flags |= flagHasCRC
	}
	if c.SoftPin {
		o.flags |= flagSoftPin
		ttl := c.SoftPinTTL
		if ttl == 0 {
			ttl = m.cfg.SoftPinTTL
		}
		o.softPinEnd = int64(ttl) // converted to a deadline at PutEnd
	}
	if c.HardPin {
		o.flags |= flagHardPin
	}
	sh.objs[k] = o
	sh.inflight[k] = o
	noteMemLocked(sh, k, o)
	if req.HasChecksum {
		// The commit record travels to the appliances now, while the
		// client writes, instead of after PutEnd: PutEnd then rarely
		// waits (doc.go, "Rebuild"). Kept in lastRead until PutEnd.
		o.lastRead = int64(m.queueCommitLocked(t, req.Key, o, c.HolderPulls, c.Stage))
	}
	if c.Stage != 0 && o.lastRead != 0 {
		// Staged: the node holds the bytes and copies them in when it
		// applies the commit record just queued, so the put is complete
		// now; readers wait for that record's acknowledgement (landedLocked).
		seq := m.completeLocked(sh, k, o)
		o.lastRead, o.flags = int64(seq), o.flags|flagLanding
		m.ctr.add(cPutsStaged, 1)
	}
	m.ctr.add(cPutsStarted, 1)
	if c.OnlyNode != "" {
		m.ctr.add(cPutsDirect, 1)
	}
	if m.eventsWanted() && m.putSeq.Add(1)%uint64(m.cfg.PutEventSample) == 1 {
		m.publish(Event{Kind: "put", Tenant: t, Key: req.Key, Bytes: req.Size, Segment: reps[0].seg.spec.Name, Message: "started (sampled)"})
	}
	return m.publicReplicas(o.replicas), false, nil
}

// takeOverLocked retires an abandoned in-flight put: its space stays reserved
// until PutReleaseTimeout after its PutStart, then the reaper frees it.
func (m *Master) takeOverLocked(sh *shard, k string, o *object) {
	release := o.started + int64(m.cfg.PutReleaseTimeout)
	m.abandonedMu.Lock()
	for i := range o.replicas {
		r := &o.replicas[i]
		// Its commit record may be in the directory: drop it before the
		// space can go to another put. Queued even when there is none:
		// the free revokes the abandoned writer's grants at the owner.
		m.queueFreeLocked(r)
		if r.seg != nil {
			m.abandoned = append(m.abandoned, reservation{seg: r.seg, off: r.offset, n: r.allocLen(), releaseAt: release})
		}
		m.countReplica(r, -1)
	}
	m.abandonedMu.Unlock()
	unindexDiskReplicasLocked(sh, k, o)
	o.replicas = nil
	m.dropObjectLocked(sh, k, o)
	m.ctr.add(cAbandonedPutsReclaimed, 1)
}

// revokeLocked frees an in-flight object's space and forgets it. It
// returns the seq of the last free record queued when the put had a
// commit record in a DRAM directory (0 otherwise).
func (m *Master) revokeLocked(sh *shard, k string, o *object) uint64 {
	var last uint64
	for i := range o.replicas {
		last = max(last, m.freeReplicaLocked(&o.replicas[i]))
		m.countReplica(&o.replicas[i], -1)
	}
	if o.lastRead == 0 {
		last = 0 // nothing of it reached a directory: nothing to wait for
	}
	unindexDiskReplicasLocked(sh, k, o)
	o.replicas = nil
	m.dropObjectLocked(sh, k, o)
	return last
}

// reapPuts frees retired reservations and revokes puts older than the
// release timeout.
func (m *Master) reapPuts(now int64) {
	m.abandonedMu.Lock()
	var due []reservation
	n := 0
	for _, r := range m.abandoned {
		if r.releaseAt <= now {
			due = append(due, r)
			continue
		}
		m.abandoned[n] = r
		n++
	}
	clear(m.abandoned[n:])
	m.abandoned = m.abandoned[:n]
	m.abandonedMu.Unlock()
	for _, r := range due {
		r.seg.release(r.off, r.n)
	}
	limit := now - int64(m.cfg.PutReleaseTimeout)
	m.forEachShard(func(sh *shard) {
		for k, o := range sh.inflight {
			if o.started <= limit {
				m.revokeLocked(sh, k, o)
				m.ctr.add(cAbandonedPutsReclaimed, 1)
			}
		}
	})
}

// lockWriter finds k's object and checks that client wrote it. It returns
// with sh.mu held when err is nil.
func (m *Master) lockWriter(client, tenant, key string) (*shard, string, *object, error) {
	_, k, err := m.checkKey(tenant, key)
	if err != nil {
		return nil, "", nil, err
	}
	sh := m.shardOf(k)
	sh.mu.Lock()
	o := sh.objs[k]
	if o == nil {
		sh.mu.Unlock()
		return nil, "", nil, kverr.New(kverr.ObjectNotFound, key, "no such object")
	}
	if o.writer != client && (!o.complete || o.flags&flagRebuilt == 0) {
		// A rebuilt object's writer is unknown (the directory does not
		// keep it): its PutEnd and PutRevoke find it complete.
		sh.mu.Unlock()
		return nil, "", nil, kverr.New(kverr.IllegalClient, key, "put was started by %s, not %q", o.writer, client)
	}
	return sh, k, o, nil
}

// PutEnd makes the object visible: every replica flips to COMPLETE at once.
// Only the writer may call it. No read lease is granted. With offload mode
// "immediate" an offload task is queued for a node with an SSD tier.
//
// It answers once the appliances holding the MEMORY replicas recorded the
// object in their DRAM directories (at most DramSyncTimeout), so that a
// put acknowledged before a master's death is rebuilt by its successor
// (dramdir.go). A put with the client's checksum had its record queued at
// PutStart, so this is usually done already and PutEnd does not wait.
func (m *Master) PutEnd(ctx context.Context, client, tenant, key string) error {
	ws, err := m.putEnd(client, tenant, key, endChecksum{})
	if err == nil {
		m.awaitCommits(ctx, ws)
	}
	return err
}

// endChecksum is a CRC32C given at PutEnd (has false: none), for a put whose
// PutStart carried none: a client that checksums a large value slice by
// slice as it sends it knows the sum only once the bytes are written.
type endChecksum struct {
	crc uint32
	has bool
}

// putEnd is PutEnd without the wait for the DRAM directories; it returns
// what to wait for. sum is the checksum the PutEnd carries, if any.
func (m *Master) putEnd(client, tenant, key string, sum endChecksum) ([]dramWait, error) {
	sh, k, o, err := m.lockWriter(client, tenant, key)
	if err != nil {
		return nil, err
	}
	defer sh.mu.Unlock()
	startSum := o.flags&flagHasCRC != 0 // its commit record went at PutStart
	if sum.has && startSum && sum.crc != o.crc {
		return nil, kverr.New(kverr.ChecksumMismatch, key, "PutEnd checksum %08x contradicts PutStart's %08x", sum.crc, o.crc)
	}
	if o.complete {
		return nil, nil // a retried PutEnd, or one whose put a new master rebuilt
	}
	if sum.has && !startSum {
		o.crc = sum.crc
		o.flags |= flagHasCRC
	}
	seq := m.completeLocked(sh, k, o)
	if !startSum {
		// No client checksum at PutStart: the appliance could not tell a
		// landed write from a torn one, so the record goes now, after the
		// write (with the checksum PutEnd carries, if any).
		t, _ := splitCK(k)
		seq = m.queueCommitLocked(t, key, o, false, 0)
	}
	return dramWaitsLocked(o, seq), nil
}

// completeLocked makes in-flight o complete: every replica COMPLETE,
// created now, offloaded at once with offload "immediate". It returns the
// seq of the commit record queued at PutStart (0: none), taken out of
// lastRead. sh.mu must be held.
func (m *Master) completeLocked(sh *shard, k string, o *object) uint64 {
	now := m.now().UnixNano()
	for i := range o.replicas {
		o.replicas[i].state = Complete
	}
	seq := uint64(o.lastRead)
	o.lastRead = 0
	o.complete = true
	o.created = now
	m.recallLocked(sh, k, o) // the eviction history seeds the read count here, at PutEnd
	if o.flags&flagSoftPin != 0 {
		o.softPinEnd += now
	}
	delete(sh.inflight, k)
	m.ctr.add(cPutsCompleted, 1)
	if m.settings.Load().ssd.OffloadMode == OffloadImmediate {
		m.queueOffloadLocked(k, o)
	}
	return seq
}

// landedLocked reports whether o's bytes are known to be in place: true
// unless o is a staged put (flagLanding) whose holder has not yet
// acknowledged its commit record, in which case it returns what to wait
// for. Once acknowledged the mark is dropped. sh.mu must be held.
func (m *Master) landedLocked(o *object) (bool, []dramWait) {
	if o.flags&flagLanding == 0 {
		return true, nil
	}
	if !hasServable(o) {
		// Its node is suspect: nothing of it is handed out anyway, and a
		// dead node never acknowledges. Still landing if it comes back.
		return true, nil
	}
	ws := dramWaitsLocked(o, uint64(o.lastRead))
	if m.dram.settled(ws) < len(ws) {
		return false, ws
	}
	o.flags &^= flagLanding
	o.lastRead = 0
	return true, nil
}

// PutRevoke discards an in-flight put and frees its space. Only the writer
// may call it. It answers once the appliances dropped the put's DRAM
// directory entries (at most DramSyncTimeout; holders with no records
// stream open are not waited for, see awaitFrees), so that a revoked put
// does not come back after a master failover.
func (m *Master) PutRevoke(ctx context.Context, client, tenant, key string) error {
	ws, err := m.putRevoke(client, tenant, key)
	if err == nil {
		m.awaitFrees(ctx, ws)
	}
	return err
}

// putRevoke is PutRevoke without the wait; it returns what to wait for.
func (m *Master) putRevoke(client, tenant, key string) ([]dramWait, error) {
	sh, k, o, err := m.lockWriter(client, tenant, key)
	if err != nil {
		return nil, err
	}
	defer sh.mu.Unlock()
	if o.complete {
		return nil, kverr.New(kverr.UnavailableInCurrentStatus, key, "put already ended; use Remove")
	}
	reps := slices.Clone(o.replicas)
	seq := m.revokeLocked(sh, k, o)
	m.ctr.add(cPutsRevoked, 1)
	return dramWaitsLocked(&object{replicas: reps}, seq), nil
}

// replicaRank orders replicas: MEMORY, NOF, LOCAL_DISK; those on GRACE or
// DRAINING storage after all others.
func replicaRank(r *replica) int {
	rank := int(r.typ)
	if r.seg != nil {
		if SegmentState(r.seg.state.Load()) != SegMounted {
			rank += 10
		}
	} else if r.disk != nil && ClientState(r.disk.state.Load()) != ClientLive {
		rank += 10
	}
	return rank
}

// GetReplicaList returns the COMPLETE replicas of an object and grants or
// extends its read lease. REPLICA_IS_NOT_READY while in flight,
// OBJECT_NOT_FOUND when absent.
func (m *Master) GetReplicaList(ctx context.Context, client, tenant, key string) (ReplicaList, error) {
	t, err := m.validKey(tenant, key)
	if err != nil {
		return ReplicaList{}, err
	}
	m.ctr.add(cGets, 1)
	for {
		l, landing, err := m.getReplicaListOnce(client, t, key)
		if landing == nil {
			return l, err
		}
		// A staged put whose holder may not have copied its bytes in yet:
		// wait for its acknowledgement of the commit record, then look
		// again (the object may have changed meanwhile).
		m.ctr.add(cLandingWaits, 1)
		if late := m.dram.waitAcked(ctx, landing, m.landWait()); len(late) > 0 {
			m.ctr.add(cGetMisses, 1)
			return ReplicaList{}, kverr.New(kverr.ReplicaIsNotReady, key,
				"its bytes are not yet confirmed by %s (it has not acknowledged the put's commit record within %v)", late[0], m.landWait())
		}
	}
}

// landWait bounds how long a read waits for a staged put's holder to
// acknowledge its commit record: DramSyncTimeout, or its default when the
// operator turned that wait off (a read must not get bytes that are not
// there).
func (m *Master) landWait() time.Duration {
	if m.cfg.DramSyncTimeout > 0 {
		return m.cfg.DramSyncTimeout
	}
	return DefaultDramSyncTimeout
}

// getReplicaListOnce is GetReplicaList for tenant t without waiting: a
// staged put not yet landed returns what to wait for instead (landing).
func (m *Master) getReplicaListOnce(client, t, key string) (_ ReplicaList, landing []dramWait, _ error) {
	var buf [128]byte
	k := appendCK(buf[:0], t, key)
	sh := m.shardOfBytes(k)
	sh.mu.Lock()
	o := sh.objs[string(k)]
	if o == nil {
		sh.mu.Unlock()
		m.ctr.add(cGetMisses, 1)
		if err := m.errRebuilding(key); err != nil {
			return ReplicaList{}, nil, err
		}
		return ReplicaList{}, nil, kverr.New(kverr.ObjectNotFound, key, "no such object")
	}
	if !o.complete {
		sh.mu.Unlock()
		m.ctr.add(cGetMisses, 1)
		return ReplicaList{}, nil, kverr.New(kverr.ReplicaIsNotReady, key, "put in flight")
	}
	if ok, ws := m.landedLocked(o); !ok {
		sh.mu.Unlock()
		return ReplicaList{}, ws, nil
	}
	now := m.now().UnixNano()
	o.lastRead = now
	o.flags |= flagRead
	if o.readCount < ^uint32(0) {
		o.readCount++
	}
	out := ReplicaList{Size: o.size, CRC32C: o.crc, HasChecksum: o.flags&flagHasCRC != 0,
		LeaseDeadline: time.Unix(0, now+int64(m.cfg.LeaseTTL))}
	out.Replicas = make([]Replica, 0, len(o.replicas))
	var rk [8]int
	ranks := rk[:0]
	var suspect *replica // a replica skipped because its node is suspect
	var restarted string // a node re-registering the replica skipped
	for i := range o.replicas {
		r := &o.replicas[i]
		if r.state != Complete || (r.seg != nil && r.seg.removed.Load()) {
			continue
		}
		if r.unconfirmed && ClientState(r.disk.state.Load()) == ClientLive {
			restarted = r.disk.id
			continue
		}
		if !servable(r) {
			suspect = r
			continue
		}
		rank := replicaRank(r)
		j := len(out.Replicas)
		out.Replicas = append(out.Replicas, Replica{})
		ranks = append(ranks, 0)
		for ; j > 0 && ranks[j-1] > rank; j-- { // stable insertion
			out.Replicas[j], ranks[j] = out.Replicas[j-1], ranks[j-1]
		}
		out.Replicas[j], ranks[j] = m.publicReplica(r), rank
	}
	var suspectNode string
	if suspect != nil {
		suspectNode = m.publicReplica(suspect).Node
	}
	sh.mu.Unlock()
	if len(out.Replicas) == 0 {
		m.ctr.add(cGetMisses, 1)
		if suspectNode != "" {
			return ReplicaList{}, nil, kverr.New(kverr.ObjectNotFound, key,
				"no live replica: its replicas are on %s, which is not heartbeating (suspect)", suspectNode)
		}
		if restarted != "" {
			// Transient: the copy is served again once registered, or
			// dropped then (the object disappears if it was the last).
			return ReplicaList{}, nil, kverr.New(kverr.UnavailableInCurrentStatus, key,
				"its copy is on the SSD of %s, which restarted and is re-registering its SSD copies: retry", restarted)
		}
		return ReplicaList{}, nil, kverr.New(kverr.ObjectNotFound, key, "no live replica")
	}
	switch out.Replicas[0].Type {
	case Memory:
		m.ctr.add(cGetHitsMemory, 1)
	case NOF:
		m.ctr.add(cGetHitsNOF, 1)
	default:
		m.ctr.add(cGetHitsDisk, 1)
	}
	return out, nil, nil
}

// validCachedReads checks a heartbeat's cached reads before any is applied.
func (m *Master) validCachedReads(rs []CachedRead) error {
	if len(rs) > MaxCachedReads {
		return kverr.New(kverr.InvalidParams, "", "heartbeat: %d cached reads, at most %d per beat", len(rs), MaxCachedReads)
	}
	for _, r := range rs {
		if _, err := m.validKey(r.Tenant, r.Key); err != nil {
			return fmt.Errorf("heartbeat cached read: %w", err)
		}
		if r.Count == 0 || r.LastReadAge < 0 {
			return kverr.New(kverr.InvalidParams, r.Key, "heartbeat cached read: count %d, age %v", r.Count, r.LastReadAge)
		}
	}
	return nil
}

// noteCachedReads counts reads a client served from its lease cache as
// GetReplicaList would have: the read count grows and the last read moves
// to when the latest of them happened (never backwards), which extends the
// lease the same way. Objects gone or not complete are skipped.
func (m *Master) noteCachedReads(rs []CachedRead) {
	if len(rs) == 0 {
		return
	}
	now := m.now().UnixNano()
	var buf [128]byte
	var n uint64
	for _, r := range rs {
		t, _ := m.validKey(r.Tenant, r.Key) // validated by validCachedReads
		k := appendCK(buf[:0], t, r.Key)
		sh := m.shardOfBytes(k)
		sh.mu.Lock()
		if o := sh.objs[string(k)]; o != nil && o.complete && o.flags&flagLanding == 0 { // (a landing one was never handed out)
			at := now - min(int64(r.LastReadAge), now)
			if o.flags&flagRead == 0 || at > o.lastRead {
				o.lastRead = at
			}
			o.flags |= flagRead
			o.readCount = uint32(min(uint64(o.readCount)+uint64(r.Count), math.MaxUint32))
			n += uint64(r.Count)
		}
		sh.mu.Unlock()
	}
	m.ctr.add(cCachedReads, n)
}

// hasServable reports whether GetReplicaList would hand out a replica of o.
func hasServable(o *object) bool {
	for i := range o.replicas {
		if o.replicas[i].state == Complete && servable(&o.replicas[i]) {
			return true
		}
	}
	return false
}

// Exist reports whether a COMPLETE object exists with a replica a reader
// can use: "exists" implies "get succeeds" or a clear error, so an object
// whose only replicas are on a suspect node does not exist for now. It never grants or extends
// a lease: inference engines probe every block on every request.
func (m *Master) Exist(ctx context.Context, tenant, key string) (bool, error) {
	t, err := m.validKey(tenant, key)
	if err != nil {
		return false, err
	}
	m.ctr.add(cExists, 1)
	var buf [128]byte
	k := appendCK(buf[:0], t, key)
	sh := m.shardOfBytes(k)
	sh.mu.Lock()
	o := sh.objs[string(k)]
	ok := o != nil && o.complete && hasServable(o)
	sh.mu.Unlock()
	return ok, nil
}

// removable reports why o cannot be removed (nil: it can).
func (m *Master) removable(o *object, key string, force bool, now int64) error {
	if !o.complete {
		return kverr.New(kverr.ReplicaIsNotReady, key, "put in flight")
	}
	for i := range o.replicas {
		if o.replicas[i].state != Complete {
			return kverr.New(kverr.ReplicaIsNotReady, key, "a replica is %v", o.replicas[i].state)
		}
	}
	if !force && m.leased(o, now) {
		return kverr.New(kverr.ObjectHasLease, key, "read lease until %v", m.leaseDeadline(o).UTC().Format(time.RFC3339Nano))
	}
	if o.offload == offloadDispatched {
		return kverr.New(kverr.ReplicaIsNotReady, key, "being replicated to SSD")
	}
	return nil
}

// removeLocked frees o's space and forgets it.
func (m *Master) removeLocked(sh *shard, k string, o *object) {
	for i := range o.replicas {
		m.freeReplicaLocked(&o.replicas[i])
		m.countReplica(&o.replicas[i], -1)
	}
	unindexDiskReplicasLocked(sh, k, o)
	forgetGoneLocked(sh, k)
	o.replicas = nil
	m.dropObjectLocked(sh, k, o)
	m.ctr.add(cRemoves, 1)
}

// Remove deletes an object. It refuses a leased object (OBJECT_HAS_LEASE)
// unless force, and always one in flight (REPLICA_IS_NOT_READY). One
// being replicated to SSD (its offload task dispatched) is removed once
// the copy lands or the task ends, with the copy: a removal right after a
// put would otherwise fail whenever offload is immediate. The object is
// gone from the master at once; when appliances hold LOCAL_DISK copies,
// Remove returns once each has recorded their deletion durably, or
// UNAVAILABLE_IN_CURRENT_STATUS naming those that did not. The wait for
// the copy and the confirmations share one RemoveSyncTimeout (doc.go,
// "Removals"); past it a copy still on its way is REPLICA_IS_NOT_READY
// and nothing is removed.
func (m *Master) Remove(ctx context.Context, tenant, key string, force bool) error {
	t, k, err := m.checkKey(tenant, key)
	if err != nil {
		return err
	}
	if m.cfg.RemoveSyncTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.cfg.RemoveSyncTimeout)
		defer cancel()
	}
	start := time.Now()
	sh := m.shardOf(k)
	var o *object
	for {
		// Taken before the check: an offload ending after it wakes the
		// wait below, one ending before it is seen by the check.
		progress := m.offload.progress()
		sh.mu.Lock()
		if o = sh.objs[k]; o == nil {
			sh.mu.Unlock()
			// An appliance's report may still bring the key back: "not
			// found" now would let it return after a removal the caller
			// took as done. Wait for the report, or say "retry".
			if settling, _ := m.settling(); !settling {
				return kverr.New(kverr.ObjectNotFound, key, "no such object")
			}
			if m.cfg.RemoveSyncTimeout < 0 || !rebuildPause(ctx) {
				if err := m.errSettling(key); err != nil {
					return err
				}
			}
			continue
		}
		err := m.removable(o, key, force, m.now().UnixNano())
		if err == nil {
			break
		}
		offloading := o.offload == offloadDispatched && kverr.Is(err, kverr.ReplicaIsNotReady)
		sh.mu.Unlock()
		if !offloading || m.cfg.RemoveSyncTimeout < 0 {
			return err
		}
		if !waitDone(ctx, progress) {
			return kverr.New(kverr.ReplicaIsNotReady, key, "being replicated to SSD; the copy did not land within %v", time.Since(start).Round(time.Millisecond))
		}
	}
	size := o.size
	waits := m.queueDeleteLocked(t, key, o, nil)
	m.queueGoneLocked(t, key, waits)
	m.removeLocked(sh, k, o)
	sh.mu.Unlock()
	m.publish(Event{Kind: "remove", Tenant: t, Key: key, Bytes: size})
	return m.awaitRemoved(ctx, key, waits)
}

// rebuildPause is a removal's wait for the rebuild to go on (appliances'
// reports arrive in milliseconds; the rebuild holds at most RebuildWindow
// or RebuildWait): false when ctx ended first.
func rebuildPause(ctx context.Context) bool {
	t := time.NewTimer(5 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// waitDone waits until ch is closed (true) or ctx ends (false).
func waitDone(ctx context.Context, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// awaitRemoved waits for the appliances to confirm a removal: their SSD
// copies deleted (awaitRemovals) and their DRAM directory entries dropped
// (dramBarrier), within one RemoveSyncTimeout for both. One after the
// other, each with its own bound, a removal whose appliance had died took
// twice the bound (10 s by default), as long as a client's RPCTimeout, so
// the caller saw its own deadline pass instead of the answer naming the
// appliance that did not confirm.
func (m *Master) awaitRemoved(ctx context.Context, key string, waits map[string]*pendingRemoval) error {
	if m.cfg.RemoveSyncTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, m.cfg.RemoveSyncTimeout)
		defer cancel()
	}
	return errors.Join(m.awaitRemovals(ctx, key, waits), m.dramBarrier(ctx, key))
}
