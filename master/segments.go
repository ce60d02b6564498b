package master

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// memoryAlign is the alignment of MEMORY allocations.
const memoryAlign = 64

// defaultBlockSize is the NOF allocation unit when a segment names none.
const defaultBlockSize = 4096

// segment is one mounted segment. spec, owner and align never change after
// mount; state and counters are atomics read on the hot path.
type segment struct {
	spec  Segment
	owner *client
	align uint64

	state    atomic.Int32 // SegmentState
	removed  atomic.Bool  // unmounted: allocations fail, replicas being dropped
	awaiting atomic.Bool  // re-announced to a master that waits for its owner's DRAM directory (dramdir.go)
	replicas atomic.Int64
	used     atomic.Uint64 // mirror of alloc.used()
	free     atomic.Uint64 // mirror of alloc.free
	// freeSeq is the seq of the last DRAM-directory free record queued for
	// a replica here (dramdir.go queueFreeLocked): the grants signed now
	// carry it (grant.Mark).
	freeSeq atomic.Uint64
	// evictAt: an allocation that takes use to it wakes the background
	// evictor (onFull; evictor.go, evictIdleWait). Set for MEMORY
	// segments at mount and by every check of the evictor; ^0 never.
	evictAt atomic.Uint64
	onFull  func()

	mu            sync.Mutex
	alloc         *allocator // guarded by mu
	drainDeadline int64      // guarded by mu; unix ns, DRAINING only
}

func (s *segment) roundUp(n uint64) uint64 { return (n + s.align - 1) / s.align * s.align }

// tryAlloc reserves n bytes unless the segment is removed.
func (s *segment) tryAlloc(n uint64) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed.Load() {
		return 0, false
	}
	off, _, ok := s.alloc.alloc(n)
	if ok {
		used := s.alloc.used()
		s.used.Store(used)
		s.free.Store(s.alloc.free)
		if used >= s.evictAt.Load() && s.onFull != nil {
			s.onFull()
		}
	}
	return off, ok
}

// release frees [off, off+n) (n already aligned). Releasing into a removed
// segment is a no-op: its space left with it.
func (s *segment) release(off, n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.removed.Load() {
		return
	}
	s.alloc.release(off, n)
	s.used.Store(s.alloc.used())
	s.free.Store(s.alloc.free)
}

// allocatable reports whether new replicas may go here.
func (s *segment) allocatable() bool {
	return !s.removed.Load() && SegmentState(s.state.Load()) == SegMounted && !s.awaiting.Load()
}

// segTable is the set of mounted segments. Readers use the copy-on-write
// snapshot without locking.
type segTable struct {
	mu     sync.Mutex
	byName map[string]*segment // guarded by mu
	snap   atomic.Pointer[[]*segment]
}

func (t *segTable) init() {
	t.byName = map[string]*segment{}
	t.snap.Store(&[]*segment{})
}

func (t *segTable) rebuildLocked() {
	s := make([]*segment, 0, len(t.byName))
	for _, v := range t.byName {
		s = append(s, v)
	}
	slices.SortFunc(s, func(a, b *segment) int { return cmp.Compare(a.spec.Name, b.spec.Name) })
	t.snap.Store(&s)
}

func (t *segTable) all() []*segment { return *t.snap.Load() }

func (t *segTable) get(name string) *segment {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byName[name]
}

// MountSegment mounts seg for client. Mounting the same segment again (same
// name, type, size and node) is idempotent; the same name with a different
// size or owner is SEGMENT_ALREADY_EXISTS and changes nothing.
func (m *Master) MountSegment(ctx context.Context, clientID string, seg Segment) error {
	return m.mount(clientID, seg, true)
}

func (m *Master) mount(clientID string, seg Segment, explicit bool) error {
	if clientID == "" {
		return kverr.New(kverr.InvalidParams, "", "mount: empty client id")
	}
	if seg.Node == "" {
		seg.Node = clientID
	}
	if seg.Type == 0 {
		seg.Type = Memory
	}
	switch {
	case seg.Name == "":
		return kverr.New(kverr.InvalidParams, "", "mount: empty segment name")
	case seg.Size == 0:
		return kverr.New(kverr.InvalidParams, "", "mount %s: size 0", seg.Name)
	case seg.Node != clientID:
		return kverr.New(kverr.IllegalClient, "", "mount %s: node %q is not the caller %q", seg.Name, seg.Node, clientID)
	case seg.Type != Memory && seg.Type != NOF:
		return kverr.New(kverr.InvalidParams, "", "mount %s: type %v cannot be mounted", seg.Name, seg.Type)
	case seg.Base+seg.Size < seg.Base:
		return kverr.New(kverr.InvalidParams, "", "mount %s: base+size overflows", seg.Name)
	}
	m.holderSeen.Store(true) // see settling
	if seg.Offer.RDMAAddr != "" && !m.cfg.DisableGrants && !m.cfg.RDMATrustedFabric {
		seg.Offer = TransportOffer{}
		m.publish(Event{Kind: "client", Node: clientID, Message: "RDMA offer for " + seg.Name +
			" withheld: an rkey opens the whole segment past data-plane grants (--rdma-trusted-fabric hands it out)"})
	}
	for {
		old := m.segs.get(seg.Name)
		if old == nil {
			break
		}
		if err := sameSegment(old.spec, seg); err != nil {
			return err
		}
		if !explicit || m.undrain(old) {
			return nil
		}
		// The drain's unmount is under way: wait for it, then mount anew.
		time.Sleep(time.Millisecond)
	}
	align := uint64(memoryAlign)
	if seg.Type == NOF {
		if seg.BlockSize == 0 {
			seg.BlockSize = defaultBlockSize
		}
		if seg.BlockSize&(seg.BlockSize-1) != 0 {
			return kverr.New(kverr.InvalidParams, "", "mount %s: block size %d is not a power of two", seg.Name, seg.BlockSize)
		}
		if seg.NQN == "" || seg.TargetAddr == "" {
			return kverr.New(kverr.InvalidParams, "", "mount %s: NOF segment needs nqn and target address", seg.Name)
		}
		align = uint64(seg.BlockSize)
	}
	if seg.Size < align {
		return kverr.New(kverr.InvalidParams, "", "mount %s: size %d below the allocation unit %d", seg.Name, seg.Size, align)
	}
	now := m.now().UnixNano()
	c := m.clients.getOrCreate(m.intern(clientID), seg.Endpoint, now)
	if !explicit && c.isDrained(seg.Name) {
		return nil // drained by an operator: heartbeats do not bring it back
	}
	if explicit {
		// A mount is a sign of life, like a heartbeat.
		c.mu.Lock()
		c.lastBeat = max(c.lastBeat, now)
		c.mu.Unlock()
		if prev := ClientState(c.state.Swap(int32(ClientLive))); prev == ClientGrace {
			m.setClientSegments(c, SegGrace, SegMounted)
		}
	}
	m.segs.mu.Lock()
	if old, ok := m.segs.byName[seg.Name]; ok {
		m.segs.mu.Unlock()
		return sameSegment(old.spec, seg)
	}
	s := &segment{spec: seg, owner: c, align: align, alloc: newAllocator(seg.Size, align)}
	s.free.Store(s.alloc.free)
	s.evictAt.Store(^uint64(0))
	if seg.Type == Memory {
		s.onFull = m.evictorNeeded
		s.evictAt.Store(uint64(backgroundTrigger(m.settings.Load().dram) * float64(seg.Size/align*align)))
	}
	s.awaiting.Store(!explicit && c.awaitDram.Load())
	st := SegMounted
	if ClientState(c.state.Load()) == ClientGrace {
		st = SegGrace
	}
	s.state.Store(int32(st))
	m.segs.byName[seg.Name] = s
	m.segs.rebuildLocked()
	m.segs.mu.Unlock()
	c.addSegment(seg.Name)
	m.publish(Event{Kind: "segment", Segment: seg.Name, Node: clientID, Bytes: seg.Size, Message: "mounted"})
	return nil
}

// sameSegment accepts a re-mount of the same segment and refuses any other
// segment under a mounted name.
func sameSegment(o, seg Segment) error {
	if o.Size != seg.Size || o.Node != seg.Node || o.Type != seg.Type || o.Base != seg.Base {
		return kverr.New(kverr.SegmentAlreadyExists, "", "segment %s is mounted with size %d by %s", seg.Name, o.Size, o.Node)
	}
	return nil
}

// UnmountSegment unmounts a segment. With grace > 0 the segment drains: it
// takes no new allocations, serves reads until grace has passed, then is
// unmounted by the reaper. clientID must be the owner, or empty (operator).
func (m *Master) UnmountSegment(ctx context.Context, clientID, name string, grace time.Duration) error {
	if grace < 0 {
		return kverr.New(kverr.InvalidParams, "", "unmount %s: negative grace", name)
	}
	s := m.segs.get(name)
	if s == nil {
		return kverr.New(kverr.SegmentNotFound, "", "segment %q is not mounted", name)
	}
	if clientID != "" && clientID != s.spec.Node {
		return kverr.New(kverr.IllegalClient, "", "segment %s belongs to %s, not %s", name, s.spec.Node, clientID)
	}
	s.owner.markDrained(name)
	if grace == 0 {
		m.unmountNow(s, "unmounted")
		return nil
	}
	s.mu.Lock()
	s.drainDeadline = m.now().Add(grace).UnixNano()
	s.mu.Unlock()
	s.state.Store(int32(SegDraining))
	m.publish(Event{Kind: "segment", Segment: name, Node: s.spec.Node, Message: "draining " + grace.String()})
	return nil
}

// unmountNow removes s and drops every replica stored there; objects left
// with no replica disappear.
func (m *Master) unmountNow(s *segment, why string) {
	m.segs.mu.Lock()
	if m.segs.byName[s.spec.Name] != s {
		m.segs.mu.Unlock()
		return
	}
	delete(m.segs.byName, s.spec.Name)
	m.segs.rebuildLocked()
	m.segs.mu.Unlock()
	s.mu.Lock()
	s.removed.Store(true)
	s.mu.Unlock()
	s.owner.removeSegment(s.spec.Name)
	// Any allocation that won the race against removed=true was made with its
	// shard locked, so the scan below sees it.
	m.dropReplicas(func(r *replica) bool { return r.seg == s })
	m.publish(Event{Kind: "segment", Segment: s.spec.Name, Node: s.spec.Node, Message: why})
}

// dropReplicas removes every replica matching drop from every object,
// without freeing space (its storage is gone). Objects left with no replica
// disappear.
func (m *Master) dropReplicas(drop func(r *replica) bool) {
	m.forEachShard(func(sh *shard) {
		for c, o := range sh.objs {
			n := 0
			for i := range o.replicas {
				if drop(&o.replicas[i]) {
					m.queueFreeLocked(&o.replicas[i]) // the owner's DRAM directory forgets it too
					m.countReplica(&o.replicas[i], -1)
					continue
				}
				o.replicas[n] = o.replicas[i]
				n++
			}
			if n == len(o.replicas) {
				continue
			}
			clear(o.replicas[n:])
			o.replicas = o.replicas[:n]
			if n == 0 {
				m.dropObjectLocked(sh, c, o)
			} else {
				noteMemLocked(sh, c, o)
			}
		}
	})
}

// countReplica keeps per-segment replica counts.
func (m *Master) countReplica(r *replica, d int64) {
	if r.seg != nil {
		r.seg.replicas.Add(d)
	}
}

// drainUnmounting marks a drained segment whose unmount has started.
const drainUnmounting = -1

// undrain cancels a pending drain of s (its owner mounted it again): it
// takes allocations again and is not unmounted. It reports false when the
// drain's unmount has already started (the caller waits and mounts anew).
func (m *Master) undrain(s *segment) bool {
	s.mu.Lock()
	if s.drainDeadline == drainUnmounting {
		s.mu.Unlock()
		return false
	}
	was := SegmentState(s.state.Load()) == SegDraining
	if was {
		s.drainDeadline = 0
		st := SegMounted
		if ClientState(s.owner.state.Load()) == ClientGrace {
			st = SegGrace
		}
		s.state.Store(int32(st))
	}
	s.mu.Unlock()
	if was {
		s.owner.addSegment(s.spec.Name) // also forgets the operator's drain mark
		m.publish(Event{Kind: "segment", Segment: s.spec.Name, Node: s.spec.Node, Message: "drain cancelled: mounted again"})
	}
	return true
}

// finishDrains unmounts drained segments whose grace has passed.
func (m *Master) finishDrains(ctx context.Context, now int64) {
	for _, s := range m.segs.all() {
		if SegmentState(s.state.Load()) != SegDraining {
			continue
		}
		s.mu.Lock()
		due := SegmentState(s.state.Load()) == SegDraining && s.drainDeadline <= now
		if due {
			s.drainDeadline = drainUnmounting // a remount now waits for the unmount
		}
		s.mu.Unlock()
		if due {
			m.unmountNow(s, "drained")
		}
	}
}

// allocate places want MEMORY and wantNOF replicas of size bytes on
// distinct segments, distinct nodes first, preferred segment first; with
// onlyNode set, MEMORY replicas only on that node's segments. Called with
// the object's shard locked.
func (m *Master) allocate(size uint64, want, wantNOF int, preferred, onlyNode string) []replica {
	segs := m.segs.all()
	var out []replica
	for _, spec := range []struct {
		typ ReplicaType
		n   int
	}{{Memory, want}, {NOF, wantNOF}} {
		if spec.n == 0 {
			continue
		}
		cands := make([]*segment, 0, len(segs))
		for _, s := range segs {
			if s.spec.Type == spec.typ && s.allocatable() && s.roundUp(size) <= s.free.Load() &&
				(onlyNode == "" || spec.typ != Memory || s.spec.Node == onlyNode) {
				cands = append(cands, s)
			}
		}
		// Most free space first: spreads load; preferred segment before all.
		slices.SortFunc(cands, func(a, b *segment) int {
			ap, bp := a.spec.Name == preferred, b.spec.Name == preferred
			if ap != bp {
				if ap {
					return -1
				}
				return 1
			}
			return cmp.Compare(b.free.Load(), a.free.Load())
		})
		got := 0
		// Replica counts are small: linear scans beat maps here.
		var tried []*segment
		var nodes []string
		for _, r := range out {
			nodes = append(nodes, r.seg.spec.Node)
		}
		for pass := 0; pass < 2 && got < spec.n; pass++ {
			for _, s := range cands {
				if got == spec.n {
					break
				}
				if slices.Contains(tried, s) || (pass == 0 && slices.Contains(nodes, s.spec.Node)) {
					continue
				}
				tried = append(tried, s)
				off, ok := s.tryAlloc(size)
				if !ok {
					continue
				}
				nodes = append(nodes, s.spec.Node)
				out = append(out, replica{seg: s, offset: off, length: size, typ: spec.typ, state: Processing})
				s.replicas.Add(1)
				got++
			}
		}
	}
	return out
}

// memoryUsage sums MEMORY segments: capacity and allocated bytes.
func (m *Master) memoryUsage() (capacity, used uint64) {
	for _, s := range m.segs.all() {
		if s.spec.Type == Memory && !s.removed.Load() {
			capacity += s.spec.Size / s.align * s.align
			used += s.used.Load()
		}
	}
	return capacity, used
}

// largestMemorySegment returns the usable size of the largest MEMORY
// segment that takes allocations (0 when there is none).
func (m *Master) largestMemorySegment() uint64 {
	var largest uint64
	for _, s := range m.segs.all() {
		if s.spec.Type == Memory && s.allocatable() {
			largest = max(largest, s.spec.Size/s.align*s.align)
		}
	}
	return largest
}

// ListSegments returns every mounted segment with its state and usage.
func (m *Master) ListSegments(ctx context.Context) []SegmentInfo {
	segs := m.segs.all()
	out := make([]SegmentInfo, 0, len(segs))
	for _, s := range segs {
		s.mu.Lock()
		info := SegmentInfo{
			Segment:     s.spec,
			State:       SegmentState(s.state.Load()),
			Used:        s.alloc.used(),
			LargestFree: s.alloc.largest(),
			Replicas:    uint64(max(s.replicas.Load(), 0)),
		}
		if info.State == SegDraining {
			info.DrainDeadline = time.Unix(0, s.drainDeadline)
		}
		s.mu.Unlock()
		out = append(out, info)
	}
	return out
}
