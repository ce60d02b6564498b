package replay

import (
	"fmt"
	"time"

	"github.com/kvtier/kvtier/master"
)

// Policy names accepted by SimOptions.Policy and LeasePolicy.Kind.
const (
	// PolicyLRU is the exact-LRU reference of shared/traces/README.md: every
	// block of a request is touched after the lookup, one block evicted at a time.
	PolicyLRU = "lru"
	// PolicyPlain is the master's lease order with no bonus: key = lease deadline.
	PolicyPlain = "plain"
	// PolicyFrequency adds min(reads*FrequencyBonus, FrequencyMaxBonus) to the deadline.
	PolicyFrequency = "frequency"
)

// Defaults of LeasePolicy, in trace time (the trace's millisecond clock at
// speed 1): the master's defaults, which were chosen with Sweep on both
// FAST'25 traces (see the package doc).
const (
	DefaultLeaseTTL           = master.DefaultLeaseTTL
	DefaultFrequencyBonus     = master.DefaultFrequencyBonus
	DefaultFrequencyMaxBonus  = master.DefaultFrequencyMaxBonus
	DefaultHistoryPerCapacity = master.EvictionHistoryPerObject
	DefaultHighWatermark      = master.DefaultHighWatermark
	DefaultEvictionRatio      = master.DefaultEvictionRatio
)

// LeasePolicy is the DRAM eviction order of the master as the simulator
// runs it. The order key is computed by the master's own implementation
// (master.PlainPolicy, master.FrequencyPolicy), so there is one formula:
//
//	on PutEnd:  deadline = now            (a fresh object holds no read lease)
//	            reads = h+1 if the key's read count h is in the eviction
//	            history (frequency only), else 0
//	on read:    deadline = now + LeaseTTL; reads++
//	on evict:   remember (key, reads) in a FIFO history of History entries
//	evictable:  deadline <= now
//	key:        master.LeasePolicy.EvictionKey(deadline, reads): deadline +
//	            0 (plain) or, for reads >= 1, min(reads*FrequencyBonus,
//	            FrequencyMaxBonus, FrequencyBonus + (reads-1)*Extra) where
//	            Extra = master.FrequencyExtraLifetimes x the DRAM lifetime
//	            measured by master.Turnover over the previous passes (no
//	            such bound until one capacity has been evicted)
//	eviction:   the evictable objects with the smallest keys (O(n) selection)
type LeasePolicy struct {
	Kind              string        // PolicyPlain or PolicyFrequency; "" means frequency
	LeaseTTL          time.Duration // 0 means DefaultLeaseTTL
	FrequencyBonus    time.Duration // 0 means DefaultFrequencyBonus
	FrequencyMaxBonus time.Duration // 0 means DefaultFrequencyMaxBonus
	// History is how many evicted objects' read counts are remembered
	// (frequency only). 0 means DefaultHistoryPerCapacity x the capacity
	// in objects; < 0 means none.
	History int
}

// WithDefaults returns p with zero fields replaced by the defaults.
func (p LeasePolicy) WithDefaults() LeasePolicy {
	if p.Kind == "" {
		p.Kind = PolicyFrequency
	}
	if p.LeaseTTL == 0 {
		p.LeaseTTL = DefaultLeaseTTL
	}
	if p.FrequencyBonus == 0 {
		p.FrequencyBonus = DefaultFrequencyBonus
	}
	if p.FrequencyMaxBonus == 0 {
		p.FrequencyMaxBonus = DefaultFrequencyMaxBonus
	}
	return p
}

// Validate reports a policy the master could not run.
func (p LeasePolicy) Validate() error {
	if p.Kind != "" && p.Kind != PolicyPlain && p.Kind != PolicyFrequency {
		return fmt.Errorf("lease policy %q: want plain or frequency", p.Kind)
	}
	if p.LeaseTTL < 0 || p.FrequencyBonus < 0 || p.FrequencyMaxBonus < 0 {
		return fmt.Errorf("lease policy durations must not be negative")
	}
	return nil
}

// Key is the eviction order key (smaller goes first) of an object whose lease
// deadline is deadline (ns of virtual time) and which was read reads times,
// before the DRAM lifetime is known: the master's EvictionKey. Eviction
// passes order by Master() adjusted to the lifetime (see leaseModel.evict).
func (p LeasePolicy) Key(deadline int64, reads uint32) int64 {
	return p.Master().EvictionKey(deadline, reads)
}

// Master is p as the master's LeasePolicy value.
func (p LeasePolicy) Master() master.LeasePolicy {
	if p.Kind == PolicyPlain {
		return master.PlainPolicy{}
	}
	return master.FrequencyPolicy{Bonus: p.FrequencyBonus, MaxBonus: p.FrequencyMaxBonus}
}
