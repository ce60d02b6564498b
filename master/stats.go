package master

import (
	"sync"
	"sync/atomic"
	"time"
)

// counter indexes Master.counters.
type counter int

// The named counters (StatsResponse.counters). Keep names stable.
const (
	cPutsStarted counter = iota
	cPutsCompleted
	cPutsRevoked
	cPutsRejectedNoSpace
	cPutsRejectedQuota
	cPutsRejectedObjectCount
	cPutsPartialAlloc
	cPutsAlreadyExists
	cGets
	cGetHitsMemory
	cGetHitsNOF
	cGetHitsDisk
	cGetMisses
	cExists
	cRemoves
	cEvictions
	cEvictedBytes
	cEvictionPasses
	cShortLeased
	cShortPinned
	cShortInFlight
	cShortAwaitingOffload
	cOffloadsQueued
	cOffloadsCompleted
	cOffloadsFailed
	cOffloadsSkippedQueueFull
	cAbandonedPutsReclaimed
	cDiskBucketsDropped
	cEventsDropped
	cEvictionHistoryHits
	cCachedReads
	cRemovalsUnconfirmed
	cApplianceRestarts
	cDramCommitsUnconfirmed
	cDramObjectsRestored
	cDramCommitWaits // PutEnds (and revokes) that found a DRAM-directory record not yet applied and waited
	cPutsDirect      // PutStarts an appliance made for its client (direct puts: only_node), a subset of puts_started
	cEvictionScans   // eviction passes that scanned every DRAM object (the others took kept candidates: evictor.go)
	cPutsStaged      // direct puts committed by their PutStart (PutConfig.Stage), a subset of puts_direct
	cLandingWaits    // reads that waited for a staged put's holder to acknowledge its commit record
	numCounters
)

var counterNames = [numCounters]string{
	"puts_started", "puts_completed", "puts_revoked", "puts_rejected_no_space",
	"puts_rejected_quota", "puts_rejected_object_count", "puts_partial_alloc",
	"puts_already_exists", "gets", "get_hits_memory", "get_hits_nof", "get_hits_disk",
	"get_misses", "exists", "removes", "evictions", "evicted_bytes", "eviction_passes",
	"eviction_shortfall_leased", "eviction_shortfall_pinned", "eviction_shortfall_in_flight",
	"eviction_shortfall_awaiting_offload", "offloads_queued", "offloads_completed",
	"offloads_failed", "offloads_skipped_queue_full", "abandoned_puts_reclaimed",
	"disk_buckets_dropped", "events_dropped", "eviction_history_hits",
	"cached_reads", "removals_unconfirmed", "appliance_restarts",
	"dram_commits_unconfirmed", "dram_objects_restored", "dram_commit_waits",
	"puts_direct", "eviction_scans", "puts_staged", "landing_waits",
}

// CounterNames lists the names of the counters Stats reports.
func CounterNames() []string { return append([]string(nil), counterNames[:]...) }

// counters are padded atomics: hot counters on separate cache lines.
type paddedCounter struct {
	v atomic.Uint64
	_ [56]byte
}

type counterSet [numCounters]paddedCounter

func (c *counterSet) add(i counter, n uint64) { c[i].v.Add(n) }
func (c *counterSet) get(i counter) uint64    { return c[i].v.Load() }

// eventBus fans events out to subscribers. Publishing never blocks: a full
// subscriber buffer drops the event and counts it.
type eventBus struct {
	n   atomic.Int32 // subscriber count, read without the lock on the hot path
	mu  sync.RWMutex
	sub map[*Subscription]struct{} // guarded by mu
}

// Subscription receives events until Close.
type Subscription struct {
	bus     *eventBus
	ch      chan Event
	dropped atomic.Uint64
	once    sync.Once
}

// C returns the event channel. It is closed by Close.
func (s *Subscription) C() <-chan Event { return s.ch }

// Dropped returns how many events this subscriber missed.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close stops the subscription and closes C.
func (s *Subscription) Close() {
	s.once.Do(func() {
		s.bus.mu.Lock()
		delete(s.bus.sub, s)
		s.bus.n.Store(int32(len(s.bus.sub)))
		close(s.ch)
		s.bus.mu.Unlock()
	})
}

// Subscribe returns a subscription with a buffer of buf events (0 =
// Config.EventBuffer). Events that find the buffer full are dropped and
// counted (events_dropped).
func (m *Master) Subscribe(buf int) *Subscription {
	if buf <= 0 {
		buf = m.cfg.EventBuffer
	}
	s := &Subscription{bus: &m.events, ch: make(chan Event, buf)}
	m.events.mu.Lock()
	if m.events.sub == nil {
		m.events.sub = map[*Subscription]struct{}{}
	}
	m.events.sub[s] = struct{}{}
	m.events.n.Store(int32(len(m.events.sub)))
	m.events.mu.Unlock()
	return s
}

// publish sends ev to every subscriber without blocking.
func (m *Master) publish(ev Event) {
	if m.events.n.Load() == 0 {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = m.now()
	}
	m.events.mu.RLock()
	for s := range m.events.sub {
		select {
		case s.ch <- ev:
		default:
			s.dropped.Add(1)
			m.ctr.add(cEventsDropped, 1)
		}
	}
	m.events.mu.RUnlock()
}

// eventsWanted reports whether anyone listens (so callers skip building events).
func (m *Master) eventsWanted() bool { return m.events.n.Load() > 0 }

func (m *Master) now() time.Time { return m.cfg.Clock.Now() }
