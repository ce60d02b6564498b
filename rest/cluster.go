package rest

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

// ClusterJSON is GET cluster: the figures an operator looks at first.
type ClusterJSON struct {
	Time      time.Time          `json:"time"`
	Leader    bool               `json:"leader"`
	Objects   uint64             `json:"objects"`
	HeapBytes uint64             `json:"heap_bytes"`
	Tiers     []ClusterTierJSON  `json:"tiers"`
	Rates     RatesJSON          `json:"rates"`
	Puts      PutsJSON           `json:"puts"`
	Gets      GetsJSON           `json:"gets"`
	Evictions EvictionsJSON      `json:"evictions"`
	Offloads  OffloadsJSON       `json:"offloads"`
	Other     map[string]uint64  `json:"other"`
	Counters  map[string]uint64  `json:"counters"`
	rawRates  map[string]float64 // for tests
}

// ClusterTierJSON is one tier in GET cluster.
type ClusterTierJSON struct {
	TierJSON
	HitRate float64 `json:"hit_rate"` // hits / (hits + misses) of this tier
}

// RatesJSON are per-second rates over the last WindowSeconds (0 and
// Valid=false until two samples half a second apart exist).
type RatesJSON struct {
	Valid              bool    `json:"valid"`
	WindowSeconds      float64 `json:"window_seconds"`
	PutsPerSec         float64 `json:"puts_per_sec"`
	GetsPerSec         float64 `json:"gets_per_sec"`
	HitsPerSec         float64 `json:"hits_per_sec"`
	EvictionsPerSec    float64 `json:"evictions_per_sec"`
	EvictedBytesPerSec float64 `json:"evicted_bytes_per_sec"`
	OffloadsPerSec     float64 `json:"offloads_per_sec"`
	RejectedPerSec     float64 `json:"rejected_puts_per_sec"`
}

// PutsJSON counts put outcomes.
type PutsJSON struct {
	Started       uint64       `json:"started"`
	Completed     uint64       `json:"completed"`
	Revoked       uint64       `json:"revoked"`
	AlreadyExists uint64       `json:"already_exists"`
	PartialAlloc  uint64       `json:"partial_alloc"`
	Rejected      RejectedJSON `json:"rejected"`
}

// RejectedJSON counts refused puts by reason.
type RejectedJSON struct {
	Total       uint64 `json:"total"`
	NoSpace     uint64 `json:"no_space"`
	Quota       uint64 `json:"quota"`
	ObjectCount uint64 `json:"object_count"`
}

// GetsJSON counts get outcomes; the fractions are of all gets.
type GetsJSON struct {
	Total        uint64             `json:"total"`
	HitsByTier   map[string]uint64  `json:"hits_by_tier"`
	Misses       uint64             `json:"misses"`
	HitRate      float64            `json:"hit_rate"`
	ShareByTier  map[string]float64 `json:"share_by_tier"`
	MissFraction float64            `json:"miss_fraction"`
}

// EvictionsJSON counts DRAM evictions and why passes fell short.
type EvictionsJSON struct {
	Count     uint64            `json:"count"`
	Bytes     uint64            `json:"bytes"`
	Passes    uint64            `json:"passes"`
	Shortfall map[string]uint64 `json:"shortfall"` // leased, pinned, in_flight, awaiting_offload
}

// OffloadsJSON counts offloads to SSD.
type OffloadsJSON struct {
	Queued           uint64 `json:"queued"`
	Completed        uint64 `json:"completed"`
	Failed           uint64 `json:"failed"`
	SkippedQueueFull uint64 `json:"skipped_queue_full"`
}

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// clusterJSON derives the operator view from one Stats answer and the rate
// tracker.
func (s *Server) clusterJSON(st *kvtierpb.StatsResponse, now time.Time) ClusterJSON {
	c := st.GetCounters()
	if c == nil {
		c = map[string]uint64{}
	}
	out := ClusterJSON{Time: now.UTC(), Leader: st.GetLeader(), Objects: st.GetObjects(), HeapBytes: st.GetHeapBytes(),
		Tiers: []ClusterTierJSON{}, Counters: c}
	for _, t := range st.GetTiers() {
		tj := tierJSON(t)
		out.Tiers = append(out.Tiers, ClusterTierJSON{TierJSON: tj, HitRate: ratio(tj.Hits, tj.Hits+tj.Misses)})
	}
	out.Puts = PutsJSON{Started: c["puts_started"], Completed: c["puts_completed"], Revoked: c["puts_revoked"],
		AlreadyExists: c["puts_already_exists"], PartialAlloc: c["puts_partial_alloc"],
		Rejected: RejectedJSON{NoSpace: c["puts_rejected_no_space"], Quota: c["puts_rejected_quota"], ObjectCount: c["puts_rejected_object_count"]}}
	out.Puts.Rejected.Total = out.Puts.Rejected.NoSpace + out.Puts.Rejected.Quota + out.Puts.Rejected.ObjectCount
	hits := map[string]uint64{"memory": c["get_hits_memory"], "nof": c["get_hits_nof"], "disk": c["get_hits_disk"]}
	gets := c["gets"]
	var allHits uint64
	share := map[string]float64{}
	for t, h := range hits {
		allHits += h
		share[t] = ratio(h, gets)
	}
	out.Gets = GetsJSON{Total: gets, HitsByTier: hits, Misses: c["get_misses"], HitRate: ratio(allHits, gets),
		ShareByTier: share, MissFraction: ratio(c["get_misses"], gets)}
	out.Evictions = EvictionsJSON{Count: c["evictions"], Bytes: c["evicted_bytes"], Passes: c["eviction_passes"],
		Shortfall: map[string]uint64{"leased": c["eviction_shortfall_leased"], "pinned": c["eviction_shortfall_pinned"],
			"in_flight": c["eviction_shortfall_in_flight"], "awaiting_offload": c["eviction_shortfall_awaiting_offload"]}}
	out.Offloads = OffloadsJSON{Queued: c["offloads_queued"], Completed: c["offloads_completed"], Failed: c["offloads_failed"],
		SkippedQueueFull: c["offloads_skipped_queue_full"]}
	out.Other = map[string]uint64{"removes": c["removes"], "exists": c["exists"], "abandoned_puts_reclaimed": c["abandoned_puts_reclaimed"],
		"disk_buckets_dropped": c["disk_buckets_dropped"], "events_dropped": c["events_dropped"]}

	r, span := s.rates.observe(now, c)
	out.rawRates = r
	if r != nil {
		out.Rates = RatesJSON{Valid: true, WindowSeconds: span, PutsPerSec: r["puts_completed"], GetsPerSec: r["gets"],
			HitsPerSec:      r["get_hits_memory"] + r["get_hits_nof"] + r["get_hits_disk"],
			EvictionsPerSec: r["evictions"], EvictedBytesPerSec: r["evicted_bytes"], OffloadsPerSec: r["offloads_completed"],
			RejectedPerSec: r["puts_rejected_no_space"] + r["puts_rejected_quota"] + r["puts_rejected_object_count"]}
	}
	return out
}

func (s *Server) cluster(c echo.Context) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	st, err := s.ms.Stats(ctx, &kvtierpb.Empty{})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.clusterJSON(st, s.clk.Now()))
}
