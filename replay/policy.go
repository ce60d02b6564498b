package replay

import (
	"fmt"
	"time"
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

// Defaults of LeasePolicy, in trace time (the trace's millisecond clock at speed 1).
// They were chosen with Sweep on both FAST'25 traces (see the package doc).
const (
	DefaultLeaseTTL           = 5 * time.Second
	DefaultFrequencyBonus     = 270 * time.Second
	DefaultFrequencyMaxBonus  = 330 * time.Second
	DefaultHistoryPerCapacity = 4
	DefaultHighWatermark      = 0.90
	DefaultEvictionRatio      = 0.05
)

// LeasePolicy is the DRAM eviction order of the master, restated here so the
// simulator needs no master import. TODO(lead): switch to master.LeasePolicy
// once it is exported; the formula must stay identical:
//
//	on PutEnd:  deadline = now            (a fresh object holds no read lease)
//	            reads = h+1 if the key's read count h is in the eviction
//	            history (frequency only), else 0
//	on read:    deadline = now + LeaseTTL; reads++
//	on evict:   remember (key, reads) in a FIFO history of History entries
//	evictable:  deadline <= now
//	key:        deadline + bonus, bonus = 0 (plain) or
//	            min(reads*FrequencyBonus, FrequencyMaxBonus) (frequency)
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
// deadline is deadline (ns of virtual time) and which was read reads times.
func (p LeasePolicy) Key(deadline int64, reads uint32) int64 {
	if p.Kind == PolicyPlain || reads == 0 {
		return deadline
	}
	maxBonus, per := int64(p.FrequencyMaxBonus), max(int64(p.FrequencyBonus), 1)
	if int64(reads) > maxBonus/per { // reads*per would reach the cap (or overflow)
		return deadline + maxBonus
	}
	return deadline + min(int64(reads)*per, maxBonus)
}
