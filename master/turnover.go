package master

import (
	"math"
	"time"
)

// FrequencyExtraLifetimes is what each read after the first may add to the
// frequency policy's bonus, in DRAM lifetimes (see Turnover): the extra
// bonus of an object read r ≥ 2 times is at most
// (r−1) × FrequencyExtraLifetimes × lifetime, besides the configured bounds
// reads × FrequencyBonus and FrequencyMaxBonus. Chosen with the replay
// simulator and the master itself on both FAST'25 traces (package doc,
// "Eviction order").
const FrequencyExtraLifetimes = 0.25

// turnoverPasses is how many passes a Turnover remembers. Passes free at
// least EvictionRatio of capacity (5 % by default), so 64 cover three
// lifetimes; with fewer evictions recorded than one capacity the lifetime
// is extrapolated from the rate over the passes remembered.
const turnoverPasses = 64

// Turnover measures the DRAM tier's lifetime: the time over which the last
// capacity-many objects were evicted, i.e. how long the tier keeps what it
// admits (Little's law: mean residence = population / departure rate).
// It depends only on eviction times and counts, not on the policy's keys,
// so it is the same for every policy and needs no per-object memory.
// Exported so the trace-replay simulator measures exactly as the master
// does. The zero value is ready; not safe for concurrent use (the master
// guards it with its eviction mutex).
type Turnover struct {
	passes [turnoverPasses]turnoverPass // ring, next is the oldest once full
	n      int                          // passes held (≤ turnoverPasses)
	next   int                          // slot of the next pass
	total  int64                        // evictions recorded
}

type turnoverPass struct {
	at     int64 // unix ns (or virtual ns) of the pass
	before int64 // evictions recorded before the pass
}

// Record notes a pass at time at that evicted n objects (passes that evict
// nothing are ignored).
func (t *Turnover) Record(at int64, n int) {
	if n <= 0 {
		return
	}
	t.passes[t.next] = turnoverPass{at: at, before: t.total}
	t.next = (t.next + 1) % turnoverPasses
	t.n = min(t.n+1, turnoverPasses)
	t.total += int64(n)
}

// Lifetime returns, at time now, how long ago the capacity-th most recent
// eviction happened (the time of the pass that made it): the tier's
// lifetime for a tier of capacity objects. When fewer passes are
// remembered than that reaches back, it extrapolates from the eviction
// rate over the remembered passes. ok is false until one capacity's worth
// of objects has been evicted (a tier still filling has no lifetime yet).
func (t *Turnover) Lifetime(now int64, capacity int) (lifetime time.Duration, ok bool) {
	target := t.total - int64(capacity) // number of the capacity-th most recent eviction
	if capacity <= 0 || target < 0 || t.n == 0 {
		return 0, false
	}
	var oldest turnoverPass
	for i := 1; i <= t.n; i++ { // newest first
		p := t.passes[(t.next-i+turnoverPasses)%turnoverPasses]
		if p.before <= target {
			return time.Duration(max(now-p.at, 0)), true
		}
		oldest = p
	}
	span, evicted := float64(max(now-oldest.at, 0)), float64(t.total-oldest.before)
	return time.Duration(min(span*float64(capacity)/evicted, math.MaxInt64/2)), true
}

// LifetimeScaled is a LeasePolicy whose order depends on the DRAM tier's
// lifetime (an optional capability, found by type assertion): each
// eviction pass orders by ForLifetime(the Turnover's lifetime) once the
// lifetime is known, and by the policy itself before.
type LifetimeScaled interface {
	LeasePolicy
	ForLifetime(lifetime time.Duration) LeasePolicy
}

var _ LifetimeScaled = FrequencyPolicy{}

// ForLifetime implements LifetimeScaled: p with Extra set to
// FrequencyExtraLifetimes × lifetime (at least 1 ns, since 0 means no
// bound). The configured Bonus and MaxBonus stay the upper bounds.
func (p FrequencyPolicy) ForLifetime(lifetime time.Duration) LeasePolicy {
	p.Extra = max(time.Duration(FrequencyExtraLifetimes*float64(lifetime)), 1)
	return p
}

// passPolicyLocked is the policy a pass at time now orders by: pol adjusted
// to the lifetime measured over the previous passes. m.evictMu held.
func (m *Master) passPolicyLocked(pol LeasePolicy, now int64) LeasePolicy {
	if ls, ok := pol.(LifetimeScaled); ok {
		if l, ok := m.turnover.Lifetime(now, m.turnoverCap); ok {
			return ls.ForLifetime(l)
		}
	}
	return pol
}
