package replay

import (
	"fmt"
	"time"
)

// SimOptions configures Simulate. The zero value (plus a capacity) simulates
// the master's default policy.
type SimOptions struct {
	CapacityBlocks int           // DRAM capacity in blocks; must be > 0
	Policy         string        // lru | plain | frequency; "" means frequency
	Lease          LeasePolicy   // TTL and bonuses; Kind is taken from Policy
	HighWatermark  float64       // (0,1]; 0 means DefaultHighWatermark (lease policies only)
	EvictionRatio  float64       // (0,1]; 0 means DefaultEvictionRatio (lease policies only)
	Speed          float64       // virtual time = trace time / Speed; 0 means 1
	BlockBytes     int           // bytes per block for the byte counters; 0 means DefaultBlockBytes
	Window         time.Duration // report window in trace time; 0 means 5 min, < 0 means none
	SkipPartial    bool
}

// DefaultBlockBytes is the payload per block when none is given.
const DefaultBlockBytes = 64 << 10

// DefaultWindow is the report window in trace time.
const DefaultWindow = 5 * time.Minute

func (o SimOptions) withDefaults() SimOptions {
	if o.Policy == "" {
		o.Policy = PolicyFrequency
	}
	if o.HighWatermark == 0 {
		o.HighWatermark = DefaultHighWatermark
	}
	if o.EvictionRatio == 0 {
		o.EvictionRatio = DefaultEvictionRatio
	}
	if o.Speed == 0 {
		o.Speed = 1
	}
	if o.BlockBytes == 0 {
		o.BlockBytes = DefaultBlockBytes
	}
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	o.Lease.Kind = o.Policy
	if o.Policy != PolicyLRU {
		o.Lease = o.Lease.WithDefaults()
		switch {
		case o.Lease.History == 0:
			o.Lease.History = DefaultHistoryPerCapacity * o.CapacityBlocks
		case o.Lease.History < 0:
			o.Lease.History = 0
		}
	}
	return o
}

// Validate reports options Simulate cannot run with.
func (o SimOptions) Validate() error {
	switch {
	case o.CapacityBlocks <= 0:
		return fmt.Errorf("capacity must be > 0 blocks, got %d", o.CapacityBlocks)
	case o.Policy != "" && o.Policy != PolicyLRU && o.Policy != PolicyPlain && o.Policy != PolicyFrequency:
		return fmt.Errorf("policy %q: want lru, plain or frequency", o.Policy)
	case o.HighWatermark < 0 || o.HighWatermark > 1:
		return fmt.Errorf("high watermark %v outside (0,1]", o.HighWatermark)
	case o.EvictionRatio < 0 || o.EvictionRatio > 1:
		return fmt.Errorf("eviction ratio %v outside (0,1]", o.EvictionRatio)
	case o.Speed < 0:
		return fmt.Errorf("speed %v is negative", o.Speed)
	case o.BlockBytes < 0:
		return fmt.Errorf("block bytes %d is negative", o.BlockBytes)
	}
	l := o.Lease
	l.Kind = ""
	return l.Validate()
}

func newModel(o SimOptions) model {
	if o.Policy == PolicyLRU {
		return newLRUModel(o.CapacityBlocks)
	}
	return newLeaseModel(o.CapacityBlocks, o.Lease, o.HighWatermark, o.EvictionRatio)
}

// Simulate replays t against an in-memory model of the DRAM tier: no store,
// no I/O. For every request it takes the longest present prefix (no lease
// change, like Exist), reads those blocks (refreshing their leases), then puts
// the absent blocks. In lru mode every block of the request is touched instead
// (the README's reference semantics).
func Simulate(t *Trace, o SimOptions) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	m := newModel(o)
	w := newWindower(o.Window)
	start := time.Now()
	var lastTS int64
	present := make([]bool, 0, 256)
	for i := range t.Records {
		rec := &t.Records[i]
		lastTS = rec.Timestamp
		w.at(rec.Timestamp)
		now := int64(float64(rec.Timestamp) * float64(time.Millisecond) / o.Speed)
		ev0 := m.evictions()
		present = present[:0]
		for _, id := range rec.HashIDs {
			present = append(present, m.contains(id))
		}
		prefix := leadingTrue(present)
		c := requestCounters(rec, prefix, o.BlockBytes)
		if m.touchAll() {
			for _, id := range rec.HashIDs {
				if m.contains(id) {
					m.read(id, now)
				} else {
					m.insert(id, now)
				}
			}
		} else {
			for _, id := range rec.HashIDs[:prefix] {
				m.read(id, now)
			}
			for j, id := range rec.HashIDs {
				if present[j] || m.contains(id) { // a repeated id within one request
					continue
				}
				if m.insert(id, now) {
					c.BytesWritten += int64(o.BlockBytes)
				} else {
					c.PutsRejected++
				}
			}
		}
		if m.touchAll() {
			c.BytesWritten = int64(len(rec.HashIDs)-prefix) * int64(o.BlockBytes)
		}
		c.Evictions = m.evictions() - ev0
		w.cur.add(c)
	}
	total, windows := w.finish(lastTS)
	if o.Window < 0 {
		windows = nil
	}
	return &Report{
		Mode: "simulate", Trace: t.Name, Policy: o.Policy, CapacityBlocks: o.CapacityBlocks,
		BlockBytes: o.BlockBytes, Elapsed: time.Since(start).Seconds(), Total: total, Windows: windows,
	}, nil
}

func leadingTrue(b []bool) int {
	for i, v := range b {
		if !v {
			return i
		}
	}
	return len(b)
}

// requestCounters accounts one request whose first prefix blocks were served.
func requestCounters(rec *Record, prefix, blockBytes int) Counters {
	c := Counters{Requests: 1, Blocks: int64(len(rec.HashIDs)), PrefixBlocks: int64(prefix)}
	if prefix > 0 {
		c.HitRequests = 1
		c.TokensSaved = min(int64(prefix)*BlockTokens, rec.InputLength)
		c.BytesRead = int64(prefix) * int64(blockBytes)
	}
	return c
}
