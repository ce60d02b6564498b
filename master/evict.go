package master

import (
	"context"
	"math"
	"time"
)

// Candidate is one eviction candidate: its order key (smaller goes first)
// and the bytes evicting it frees. Ref is the caller's index of the object.
// Exported with SelectByWeight so the trace-replay simulator selects
// exactly as the master does.
type Candidate struct {
	Key   int64
	Bytes uint64
	Ref   int32
}

// rng is a small xorshift generator for pivots (no shared state).
type rng uint64

func (r *rng) next() uint64 {
	x := uint64(*r)
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	*r = rng(x)
	return x
}

// SelectByWeight reorders c so that c[:n] holds the n candidates with the
// smallest keys (in no particular order), where n is the smallest count whose
// bytes reach target (len(c) when all of them do not). Expected O(len(c)):
// a quickselect with three-way partitioning, never a full sort.
func SelectByWeight(c []Candidate, target uint64) int {
	if target == 0 {
		return 0
	}
	r := rng(0x9E3779B97F4A7C15 ^ uint64(len(c)))
	lo, hi := 0, len(c)
	var acc uint64
	for hi > lo {
		if hi-lo <= 16 {
			insertionSort(c[lo:hi])
			for i := lo; i < hi; i++ {
				acc += c[i].Bytes
				if acc >= target {
					return i + 1
				}
			}
			return hi
		}
		p := medianOf3(c[lo+int(r.next()%uint64(hi-lo))].Key, c[lo+int(r.next()%uint64(hi-lo))].Key, c[lo+int(r.next()%uint64(hi-lo))].Key)
		lt, gt := partition3(c, lo, hi, p)
		var sum uint64
		for i := lo; i < lt; i++ {
			sum += c[i].Bytes
		}
		if acc+sum >= target {
			hi = lt
			continue
		}
		acc += sum
		for i := lt; i < gt; i++ {
			acc += c[i].Bytes
			if acc >= target {
				return i + 1
			}
		}
		lo = gt
	}
	return lo
}

func medianOf3(a, b, c int64) int64 {
	if a > b {
		a, b = b, a
	}
	if b > c {
		b = c
	}
	if a > b {
		return a
	}
	return b
}

// partition3 arranges c[lo:hi] as < p, == p, > p and returns the bounds of
// the middle part.
func partition3(c []Candidate, lo, hi int, p int64) (lt, gt int) {
	lt, i, gt := lo, lo, hi
	for i < gt {
		switch k := c[i].Key; {
		case k < p:
			c[lt], c[i] = c[i], c[lt]
			lt++
			i++
		case k > p:
			gt--
			c[gt], c[i] = c[i], c[gt]
		default:
			i++
		}
	}
	return lt, gt
}

func insertionSort(c []Candidate) {
	for i := 1; i < len(c); i++ {
		for j := i; j > 0 && c[j].Key < c[j-1].Key; j-- {
			c[j], c[j-1] = c[j-1], c[j]
		}
	}
}

// selectSmallest reorders s so that s[:k] holds its k smallest elements.
func selectSmallest[T any](s []T, k int, less func(a, b T) bool) {
	r := rng(0x2545F4914F6CDD1D ^ uint64(len(s)))
	lo, hi := 0, len(s)
	for hi-lo > 1 && k > lo && k < hi {
		p := s[lo+int(r.next()%uint64(hi-lo))]
		lt, i, gt := lo, lo, hi
		for i < gt {
			switch {
			case less(s[i], p):
				s[lt], s[i] = s[i], s[lt]
				lt++
				i++
			case less(p, s[i]):
				gt--
				s[gt], s[i] = s[i], s[gt]
			default:
				i++
			}
		}
		switch {
		case k < lt:
			hi = lt
		case k > gt:
			lo = gt
		default:
			return
		}
	}
}

// candRef locates a candidate's object. A cached candidate (evictCache)
// also holds its order key under pol when it was selected: an object read
// since has a later key and is no longer where the selection put it.
type candRef struct {
	ck  string
	obj *object
	pol LeasePolicy // nil: not cached
	key int64
}

// memBytesLocked returns the allocator bytes of o's COMPLETE MEMORY replicas.
func memBytesLocked(o *object) uint64 {
	var n uint64
	for i := range o.replicas {
		r := &o.replicas[i]
		if r.typ == Memory && r.state == Complete && !r.seg.removed.Load() {
			n += r.allocLen()
		}
	}
	return n
}

// orderKey is the eviction order key of o under pol.
func (m *Master) orderKey(pol LeasePolicy, o *object) int64 {
	base := o.created
	if o.flags&flagRead != 0 {
		base = o.lastRead + int64(m.cfg.LeaseTTL)
	}
	return pol.EvictionKey(base, o.readCount)
}

// capacityObjects estimates how many objects DRAM holds when full: the
// capacity divided by the mean MEMORY bytes of the n objects holding mem
// bytes (n when nothing is known).
func capacityObjects(n int, mem, capacity uint64) int {
	if n == 0 || mem == 0 {
		return n
	}
	return int(min(float64(n)*float64(capacity)/float64(mem), math.MaxInt32))
}

// LastEviction returns the report of the latest pass.
func (m *Master) LastEviction() EvictionReport {
	m.evictMu.Lock()
	defer m.evictMu.Unlock()
	return m.lastReport
}

// maybeEvict is the background evictor's check (see evictor.go): it runs a
// pass when MEMORY use is above the high watermark less the headroom
// margin, backing off after passes that fell short (so a store full of
// leased objects is not rescanned every few milliseconds).
func (m *Master) maybeEvict(ctx context.Context) (above bool) {
	capacity, used := m.memoryUsage()
	st := m.settings.Load()
	trigger := backgroundTrigger(st.dram)
	m.armEvictor(trigger)
	if capacity == 0 || float64(used) <= trigger*float64(capacity) {
		return false
	}
	m.evictMu.Lock()
	wait := time.Now().Before(m.nextEvict)
	m.evictMu.Unlock()
	if wait {
		return true
	}
	rep := m.evictPassAt(ctx, 0, trigger)
	m.evictMu.Lock()
	if rep.Short {
		m.backoff = min(max(2*m.backoff, 10*time.Millisecond), time.Second)
		m.nextEvict = time.Now().Add(m.backoff)
	} else {
		m.backoff = 0
	}
	m.evictMu.Unlock()
	return true
}

// EvictNow runs one eviction pass if MEMORY use is above the high
// watermark and returns its report (a zero report when nothing was due).
func (m *Master) EvictNow(ctx context.Context) EvictionReport { return m.evictPass(ctx, 0) }

// evictPass is a pass triggered at the high watermark (EvictNow, and puts
// whose allocation failed).
func (m *Master) evictPass(ctx context.Context, need uint64) EvictionReport {
	return m.evictPassAt(ctx, need, m.settings.Load().dram.HighWatermark)
}

// evictPassAt frees MEMORY: at least EvictionRatio of capacity, down below
// the trigger fraction (the high watermark, or less for the background
// evictor's headroom), and at least need bytes (allocation failure).
// Candidates are lease-expired, not hard-pinned, COMPLETE objects with a
// MEMORY replica and no pending offload (unless ForceEvict); soft-pinned
// objects only in a second pass. The boundary is found by SelectByWeight on
// the policy's key. A scan selects the candidates of several passes at once
// and keeps the ones this pass did not need (evictCache); the next passes
// select from those instead of rescanning every object.
func (m *Master) evictPassAt(ctx context.Context, need uint64, trigger float64) EvictionReport {
	gen := m.passGen.Load()
	m.evictMu.Lock()
	defer m.evictMu.Unlock()
	if need > 0 && m.passGen.Load() != gen {
		// A pass finished while this caller waited: failed puts that pile up
		// share it instead of rescanning one after another.
		return m.lastReport
	}
	defer m.passGen.Add(1)
	st := m.settings.Load()
	capacity, used := m.memoryUsage()
	trigBytes := uint64(trigger * float64(capacity))
	rep := EvictionReport{Time: m.now()}
	if capacity == 0 || (used <= trigBytes && need == 0) {
		return rep
	}
	target := uint64(st.dram.EvictionRatio * float64(capacity))
	if used > trigBytes {
		target = max(target, used-trigBytes)
	}
	target = max(target, need)
	rep.Target = target
	m.ctr.add(cEvictionPasses, 1)

	now := rep.Time.UnixNano()
	pol := m.passPolicyLocked(st.policy, now)
	if m.evictCachedLocked(&rep, st, pol, now) {
		m.turnover.Record(now, int(rep.FreedObjects))
		m.lastReport = rep
		return rep
	}
	m.ctr.add(cEvictionScans, 1)
	first, soft, refs := m.scanFirst[:0], m.scanSoft[:0], m.scanRefs[:0]
	memObjects, memBytes := 0, uint64(0)
	m.forEachShard(func(sh *shard) {
		for _, e := range sh.mem { // the objects holding DRAM, not the SSD-only ones
			k, o := e.ck, e.o
			if !o.complete {
				rep.InFlight++
				continue
			}
			b := memBytesLocked(o)
			if b == 0 {
				continue
			}
			memObjects++
			memBytes += b
			switch {
			case o.flags&flagHardPin != 0:
				rep.Pinned++
				continue
			case m.leased(o, now):
				rep.Leased++
				continue
			case o.offload != offloadNone && !m.cfg.ForceEvict:
				rep.AwaitingOffload++
				continue
			}
			c := Candidate{Key: m.orderKey(pol, o), Bytes: b, Ref: int32(len(refs))}
			refs = append(refs, candRef{ck: k, obj: o})
			if o.flags&flagSoftPin != 0 && o.softPinEnd > now {
				soft = append(soft, c)
			} else {
				first = append(first, c)
			}
		}
	})
	defer func() {
		// Keep the buffers for the next scan, without the objects they
		// point at.
		clear(refs)
		m.scanFirst, m.scanSoft, m.scanRefs = first[:0], soft[:0], refs[:0]
	}()
	capObjects := capacityObjects(memObjects, memBytes, capacity)
	m.growHistory(capObjects)
	rep.Candidates = len(first)
	// Select the candidates of evictCacheMult passes; this pass takes the
	// smallest keys among them and the rest wait in the cache.
	n := SelectByWeight(first, rep.Target*evictCacheMult)
	rest := m.evictFrom(first[:n], refs, &rep, st, now, false)
	if rep.FreedBytes+rep.AwaitingBytes < rep.Target {
		m.evictFrom(first[n:], refs, &rep, st, now, false)
		rest = nil
	}
	m.fillCacheLocked(rest, refs, pol, st, now)
	if rep.FreedBytes < rep.Target && len(soft) > 0 {
		rep.SecondPass = true
		rep.Candidates += len(soft)
		m.evictFrom(soft, refs, &rep, st, now, true)
	} else {
		rep.Pinned += uint64(len(soft))
	}
	if rep.FreedBytes < rep.Target {
		rep.Short = true
		m.ctr.add(cShortLeased, rep.Leased)
		m.ctr.add(cShortPinned, rep.Pinned)
		m.ctr.add(cShortInFlight, rep.InFlight)
		m.ctr.add(cShortAwaitingOffload, rep.AwaitingOffload)
	}
	m.turnover.Record(now, int(rep.FreedObjects))
	m.turnoverCap = capObjects
	m.lastReport = rep
	return rep
}

// evictFrom evicts the smallest-key candidates of cands until rep reaches
// its target, selecting again when some selected objects could not go. It
// returns the candidates it did not try.
func (m *Master) evictFrom(cands []Candidate, refs []candRef, rep *EvictionReport, st *settings, now int64, second bool) []Candidate {
	for len(cands) > 0 && rep.FreedBytes+rep.AwaitingBytes < rep.Target {
		n := SelectByWeight(cands, rep.Target-rep.FreedBytes-rep.AwaitingBytes)
		for _, c := range cands[:n] {
			m.evictOne(refs[c.Ref], rep, st, now, second)
		}
		cands = cands[n:]
	}
	return cands
}

// evictOne frees ref's MEMORY replicas after re-checking it under its lock.
// Objects with no COMPLETE disk copy whose node has an SSD tier get an
// offload task instead (offload on, no ForceEvict).
func (m *Master) evictOne(ref candRef, rep *EvictionReport, st *settings, now int64, second bool) {
	sh := m.shardOf(ref.ck)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	o := sh.objs[ref.ck]
	if o != ref.obj || (ref.pol != nil && (m.orderKey(ref.pol, o) != ref.key || memBytesLocked(o) == 0)) || !o.complete || o.flags&flagHardPin != 0 || m.leased(o, now) ||
		(o.offload != offloadNone && !m.cfg.ForceEvict) ||
		(!second && o.flags&flagSoftPin != 0 && o.softPinEnd > now) {
		return
	}
	if st.ssd.OffloadMode != OffloadOff && !m.cfg.ForceEvict && !hasDiskCopy(o) && o.flags&flagOffloadFailed == 0 {
		if pending, full := m.queueOffloadLocked(ref.ck, o); pending || full {
			rep.AwaitingOffload++
			m.evc.stale = true
			if pending {
				// Counts toward the target: a later pass frees it once the
				// disk copy is COMPLETE, so not every candidate is offloaded.
				rep.AwaitingBytes += memBytesLocked(o)
			}
			return
		}
	}
	var freed uint64
	n := 0
	for i := range o.replicas {
		r := &o.replicas[i]
		if r.typ == Memory {
			freed += r.allocLen()
			m.freeReplicaLocked(r)
			m.countReplica(r, -1)
			continue
		}
		o.replicas[n] = *r
		n++
	}
	clear(o.replicas[n:])
	o.replicas = o.replicas[:n]
	m.rememberEvictedLocked(sh, ref.ck, o, st.policy)
	if n == 0 {
		m.dropObjectLocked(sh, ref.ck, o)
	} else {
		noteMemLocked(sh, ref.ck, o)
	}
	rep.FreedBytes += freed
	rep.FreedObjects++
	m.ctr.add(cEvictions, 1)
	m.ctr.add(cEvictedBytes, freed)
	if m.eventsWanted() {
		t, key := splitCK(ref.ck)
		m.publish(Event{Kind: "evict", Tenant: t, Key: key, Bytes: freed})
	}
}
