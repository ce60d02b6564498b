package master

import "time"

// The background evictor keeps eviction off the put's critical path.
//
// Run's evictor checks MEMORY use every EvictInterval and starts a pass
// once use crosses the high watermark less a margin (half of
// EvictionRatio), so DRAM keeps headroom and a put finds free space without
// waiting; puts evict inline only when an allocation fails, that is when
// the background evictor cannot keep up. A pass holds evictMu (passes never
// overlap) and at most one shard's lock at a time: the scan locks shard by
// shard, and each eviction locks only its object's shard.
//
// At the watermark every pass used to scan every object in DRAM to free
// EvictionRatio of it: with 4 KiB objects that is twenty objects visited
// per object evicted, and half the master's CPU (measured: 46 % of a
// standalone's profile under batch puts at the watermark, 31 % the scan
// itself, most of the rest the garbage its candidate slices made). Now a
// scan selects the candidates of evictCacheMult passes (the same
// SelectByWeight on the lease-order key, no sort) and keeps the ones its own
// pass did not need; the next passes select from those few. A kept
// candidate is evicted only if it still would be by a fresh scan: evictOne
// rechecks lease, pins, in-flight state and pending offloads under the
// object's lock, and skips an object whose order key moved (it was read).
// The cache is dropped after evictCacheTTL or 1/evictCacheLifetimeDiv of
// the tier's measured lifetime, whichever is shorter, when the settings change, when
// the pass policy moved by more than nearPolicy allows, and when it cannot
// meet a pass's target (that pass then scans, with the soft pin second
// pass and the shortfall report as before). Counter eviction_scans counts
// the passes that scanned. Objects put after
// the scan have later keys than the kept ones under the plain policy; under
// the frequency policy one could order before a kept, often-read one, for
// at most evictCacheTTL.

// Run's evictor checks every EvictInterval only while MEMORY use is above
// the trigger. Below it, it sleeps evictIdleWait between checks and is
// woken sooner by an allocation that takes a MEMORY segment past its own
// share of the trigger (segment.evictAt: no segment past its share means
// the total is below the trigger). A master ticking every 5 ms when idle
// woke its process ~200 times a second (1.9 % of a vCPU and ~840 context
// switches a second, measured idle), taking vCPUs from the appliances on
// the same host for nothing. Use that grows without an allocation (a
// rebuild's reservations, a lower watermark set at run time) is seen
// within evictIdleWait.
const evictIdleWait = 100 * time.Millisecond

// evictorWait is how long Run's evictor sleeps after a check that found
// use above the trigger (above) or not.
func (m *Master) evictorWait(above bool) time.Duration {
	if above {
		return m.cfg.EvictInterval
	}
	return max(m.cfg.EvictInterval, evictIdleWait)
}

// armEvictor sets every MEMORY segment's evictAt to its share of the
// trigger fraction, for the settings now in force.
func (m *Master) armEvictor(trigger float64) {
	for _, s := range m.segs.all() {
		if s.spec.Type == Memory {
			s.evictAt.Store(uint64(trigger * float64(s.spec.Size/s.align*s.align)))
		}
	}
}

// evictorNeeded wakes Run's evictor (it is never blocked on).
func (m *Master) evictorNeeded() {
	select {
	case m.evictWake <- struct{}{}:
	default:
	}
}

const (
	evictCacheMult = 8           // a scan selects the candidates of this many passes
	evictCacheTTL  = time.Second // kept candidates are used this long at most
	// evictCacheLifetimeDiv: and at most this part of the tier's lifetime
	// (evictCacheLifeLocked).
	evictCacheLifetimeDiv = 64
)

// evictCache holds the candidates a scan selected beyond its own pass.
type evictCache struct {
	cands []Candidate // Ref indexes refs
	refs  []candRef   // with pol and key set
	st    *settings   // the settings of the scan
	pol   LeasePolicy // the pass policy the kept keys were computed under
	until int64       // expiry, ns on the master's clock
	// stale: a pass queued an offload instead of freeing (on-evict mode).
	// The object is freed by a later pass once its disk copy lands, which
	// only a scan finds: the next pass scans.
	stale bool
}

// backgroundTrigger is the MEMORY use fraction at which the background
// evictor starts a pass: the high watermark less half the eviction ratio.
func backgroundTrigger(d DramSettings) float64 {
	return max(d.HighWatermark-d.EvictionRatio/2, d.HighWatermark/2)
}

// evictCachedLocked evicts from the kept candidates toward rep's target.
// It reports whether the target was met; if not, the cache is dropped and
// the caller scans (rep keeps what was freed). evictMu must be held.
func (m *Master) evictCachedLocked(rep *EvictionReport, st *settings, pol LeasePolicy, now int64) bool {
	c := &m.evc
	// A pass policy that moved far (the frequency bonus's bound follows
	// the tier's lifetime) reorders objects: the kept keys are no longer
	// the earliest, so the pass scans; one that barely moved keeps them
	// (nearPolicy).
	if len(c.cands) == 0 || c.st != st || !nearPolicy(c.pol, pol) || now >= c.until || c.stale {
		m.dropEvictCacheLocked()
		return false
	}
	rep.Candidates = len(c.cands)
	c.cands = m.evictFrom(c.cands, c.refs, rep, st, now, false)
	if rep.FreedBytes+rep.AwaitingBytes >= rep.Target {
		return true
	}
	m.dropEvictCacheLocked()
	return false
}

// nearPolicy reports whether a pass ordering by pol may take the
// candidates a scan kept under kept (which they stay ordered by): the same
// policy, or the frequency policy whose lifetime bound (Extra) moved by at
// most a quarter. That bound follows the DRAM lifetime (passPolicyLocked),
// which a full store's passes measure anew each time, a few per cent
// apart: compared exactly, every pass of a full store under the default
// policy scanned every DRAM object (4 KiB batch puts at the watermark:
// the scan was 12 % of a standalone's CPU). Within a quarter, only objects
// read twice or more near that bound can order differently, for at most
// evictCacheTTL.
func nearPolicy(kept, pol LeasePolicy) bool {
	if kept == pol {
		return true
	}
	k, ok := kept.(FrequencyPolicy)
	p, ok2 := pol.(FrequencyPolicy)
	if !ok || !ok2 || k.Bonus != p.Bonus || k.MaxBonus != p.MaxBonus || k.Extra <= 0 || p.Extra <= 0 {
		return false
	}
	return p.Extra >= k.Extra-k.Extra/4 && p.Extra <= k.Extra+k.Extra/4
}

// fillCacheLocked keeps rest (candidates of the scan whose refs are refs,
// keyed under pol) for the next passes. evictMu must be held.
func (m *Master) fillCacheLocked(rest []Candidate, refs []candRef, pol LeasePolicy, st *settings, now int64) {
	c := &m.evc
	stale := c.stale
	m.dropEvictCacheLocked()
	if len(rest) == 0 || stale {
		return
	}
	for i, cd := range rest {
		r := refs[cd.Ref]
		r.pol, r.key = pol, cd.Key
		c.refs = append(c.refs, r)
		cd.Ref = int32(i)
		c.cands = append(c.cands, cd)
	}
	c.st, c.pol, c.until = st, pol, now+int64(m.evictCacheLifeLocked(now))
}

// evictCacheLifeLocked is how long kept candidates may be used from now:
// evictCacheTTL, and at most 1/evictCacheLifetimeDiv of the DRAM tier's
// measured lifetime. A kept candidate's order is a scan's; in a tier that
// turns over within a second (a trace replayed 100 times faster than it
// was recorded: the conversation trace at 5,000 blocks turns its DRAM
// over in ~0.7 s), a second-old scan is older than the objects it
// orders, and the frequency policy's prefix-hit rate fell from 0.162 to
// 0.140 (kvtier replay, README). evictMu must be held.
func (m *Master) evictCacheLifeLocked(now int64) time.Duration {
	ttl := evictCacheTTL
	if l, ok := m.turnover.Lifetime(now, m.turnoverCap); ok {
		ttl = min(ttl, l/evictCacheLifetimeDiv)
	}
	return ttl
}

// dropEvictCacheLocked forgets the kept candidates (and the objects they
// point at). evictMu must be held.
func (m *Master) dropEvictCacheLocked() {
	c := &m.evc
	clear(c.refs)
	c.cands, c.refs, c.st, c.pol, c.stale = c.cands[:0], c.refs[:0], nil, nil, false
}
