package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

// counterMetric maps one named master Stats counter to a metric and an
// optional label value (the label name is fixed per metric).
type counterMetric struct {
	counter string
	desc    *prometheus.Desc
	label   string // "" for unlabelled metrics
}

// clusterCollector asks the master for its figures at scrape time. The only
// state it keeps between scrapes is each appliance's SSD counter totals
// (applianceCounters): an appliance's own counters restart at zero when it
// restarts, and a Prometheus counter must not go backwards.
type clusterCollector struct {
	src     Source
	timeout time.Duration
	ssdTot  *applianceCounters

	up            *prometheus.Desc
	objects       *prometheus.Desc
	heap          *prometheus.Desc
	leader        *prometheus.Desc
	tierCap       *prometheus.Desc
	tierUsed      *prometheus.Desc
	tierObjects   *prometheus.Desc
	tierHits      *prometheus.Desc
	tierMisses    *prometheus.Desc
	segCap        *prometheus.Desc
	segUsed       *prometheus.Desc
	segFree       *prometheus.Desc
	segDraining   *prometheus.Desc
	clients       *prometheus.Desc
	ssdCap        *prometheus.Desc
	ssdUsed       *prometheus.Desc
	ssdBuckets    *prometheus.Desc
	ssdQuarantine *prometheus.Desc
	ssdEvicted    *prometheus.Desc
	ssdWritten    *prometheus.Desc
	ssdRead       *prometheus.Desc
	ssdQueue      *prometheus.Desc
	applianceUp   *prometheus.Desc
	grantRefused  *prometheus.Desc
	counters      []counterMetric
}

func newClusterCollector(src Source, timeout time.Duration) *clusterCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	c := &clusterCollector{
		src:           src,
		timeout:       timeout,
		up:            d("kvtier_master_up", "1 when the last scrape reached the master's Stats."),
		objects:       d("kvtier_objects", "Objects the master knows (all tiers)."),
		heap:          d("kvtier_master_heap_bytes", "Go heap in use by the master process."),
		leader:        d("kvtier_master_leader", "1 when this master is the leader."),
		tierCap:       d("kvtier_tier_capacity_bytes", "Capacity of a tier.", "tier"),
		tierUsed:      d("kvtier_tier_used_bytes", "Bytes allocated in a tier.", "tier"),
		tierObjects:   d("kvtier_tier_objects", "Replicas held in a tier (objects, for the SSD tier).", "tier"),
		tierHits:      d("kvtier_tier_hits_total", "Gets served from a tier.", "tier"),
		tierMisses:    d("kvtier_tier_misses_total", "Gets a tier could not serve.", "tier"),
		segCap:        d("kvtier_segment_capacity_bytes", "Size of a mounted segment.", "segment"),
		segUsed:       d("kvtier_segment_used_bytes", "Bytes allocated in a segment.", "segment"),
		segFree:       d("kvtier_segment_largest_free_bytes", "Largest free extent of a segment.", "segment"),
		segDraining:   d("kvtier_segment_draining", "1 while a segment drains before unmount.", "segment"),
		clients:       d("kvtier_clients", "Registered clients by state (live, grace, gone).", "state"),
		ssdCap:        d("kvtier_ssd_capacity_bytes", "SSD tier capacity of an appliance (departed appliances are not listed).", "appliance"),
		ssdUsed:       d("kvtier_ssd_used_bytes", "SSD tier bytes in use on an appliance.", "appliance"),
		ssdBuckets:    d("kvtier_ssd_buckets", "SSD buckets on disk of an appliance.", "appliance"),
		ssdQuarantine: d("kvtier_ssd_quarantined_buckets", "SSD buckets quarantined after I/O errors, per appliance.", "appliance"),
		ssdEvicted:    d("kvtier_ssd_evicted_buckets_total", "SSD buckets evicted (deleted) by an appliance; monotonic across its restarts.", "appliance"),
		ssdWritten:    d("kvtier_ssd_written_bytes_total", "Bytes an appliance wrote to its SSD tier; monotonic across its restarts.", "appliance"),
		ssdRead:       d("kvtier_ssd_read_bytes_total", "Bytes an appliance read from its SSD tier; monotonic across its restarts.", "appliance"),
		ssdQueue:      d("kvtier_ssd_offload_queue", "Offload tasks waiting on an appliance.", "appliance"),
		ssdTot:        newApplianceCounters(),
		applianceUp: d("kvtier_appliance_up", "1 while an appliance (a client serving storage) heartbeats and reports no problem; "+
			"0 when it is suspect, left, gone or unhealthy (its replicas are not handed out while it is not LIVE).", "appliance"),
	}
	puts := d("kvtier_puts_total", "Put outcomes counted by the master.", "result")
	gets := d("kvtier_gets_total", "Get outcomes counted by the master (hit per tier, or miss).", "result")
	short := d("kvtier_eviction_shortfall_total", "Eviction passes that fell short, by reason.", "result")
	offl := d("kvtier_offloads_total", "Offloads to SSD by result.", "result")
	one := func(counter, name, help string) counterMetric {
		return counterMetric{counter: counter, desc: d(name, help)}
	}
	c.grantRefused = d("kvtier_grant_refusals_total", "Data-port requests an appliance refused for their data-plane grant, by reason (as last reported by its heartbeat; restarts with the appliance).", "appliance", "reason")
	lab := func(counter string, desc *prometheus.Desc, label string) counterMetric {
		return counterMetric{counter: counter, desc: desc, label: label}
	}
	c.counters = []counterMetric{
		lab("puts_started", puts, "started"),
		lab("puts_completed", puts, "completed"),
		lab("puts_revoked", puts, "revoked"),
		lab("puts_rejected_no_space", puts, "rejected_no_space"),
		lab("puts_rejected_quota", puts, "rejected_quota"),
		lab("puts_rejected_object_count", puts, "rejected_object_count"),
		lab("puts_partial_alloc", puts, "partial_alloc"),
		lab("puts_already_exists", puts, "already_exists"),
		lab("get_hits_memory", gets, "hit_memory"),
		lab("get_hits_nof", gets, "hit_nof"),
		lab("get_hits_disk", gets, "hit_disk"),
		lab("get_misses", gets, "miss"),
		lab("eviction_shortfall_leased", short, "leased"),
		lab("eviction_shortfall_pinned", short, "pinned"),
		lab("eviction_shortfall_in_flight", short, "in_flight"),
		lab("eviction_shortfall_awaiting_offload", short, "awaiting_offload"),
		lab("offloads_queued", offl, "queued"),
		lab("offloads_completed", offl, "completed"),
		lab("offloads_failed", offl, "failed"),
		lab("offloads_skipped_queue_full", offl, "skipped_queue_full"),
		one("gets", "kvtier_get_requests_total", "Get requests (replica-list lookups) seen by the master."),
		one("exists", "kvtier_exist_requests_total", "Exist requests seen by the master."),
		one("removes", "kvtier_removes_total", "Objects removed."),
		one("evictions", "kvtier_evictions_total", "Objects evicted from DRAM."),
		one("evicted_bytes", "kvtier_evicted_bytes_total", "Bytes evicted from DRAM."),
		one("eviction_passes", "kvtier_eviction_passes_total", "Eviction passes run."),
		one("eviction_scans", "kvtier_eviction_scans_total", "Eviction passes that scanned every DRAM object; the others took candidates an earlier scan kept."),
		one("abandoned_puts_reclaimed", "kvtier_abandoned_puts_reclaimed_total", "Puts never finished whose space was reclaimed."),
		one("disk_buckets_dropped", "kvtier_disk_buckets_dropped_total", "SSD buckets whose replicas the master dropped."),
		one("events_dropped", "kvtier_events_dropped_total", "Operator events dropped because a watcher was slow."),
		one("cached_reads", "kvtier_cached_reads_total", "Reads clients served from their lease cache, reported with heartbeats."),
		one("puts_direct", "kvtier_direct_puts_total", "Puts an appliance placed for its client, which sent key and bytes to its data port in one frame (direct puts); a subset of kvtier_puts_total{result=\"started\"}."),
		one("puts_staged", "kvtier_staged_puts_total", "Direct puts an appliance staged (bytes read before it asked the master) and the master committed with their PutStart; a subset of kvtier_direct_puts_total."),
		one("landing_waits", "kvtier_landing_waits_total", "Reads that waited for an appliance to acknowledge a staged put's commit record (its bytes being copied in) before the master handed the object out."),
	}
	return c
}

// Describe sends every descriptor.
func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.objects, c.heap, c.leader, c.tierCap, c.tierUsed,
		c.tierObjects, c.tierHits, c.tierMisses, c.segCap, c.segUsed, c.segFree, c.segDraining,
		c.clients, c.ssdCap, c.ssdUsed, c.ssdBuckets, c.ssdQuarantine, c.ssdEvicted, c.ssdWritten,
		c.ssdRead, c.ssdQueue, c.applianceUp, c.grantRefused} {
		ch <- d
	}
	seen := map[*prometheus.Desc]bool{}
	for _, cm := range c.counters {
		if !seen[cm.desc] {
			seen[cm.desc] = true
			ch <- cm.desc
		}
	}
}

// Collect queries the master. A failed Stats call reports kvtier_master_up 0
// and nothing else from the master, rather than stale figures.
func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	st, err := c.src.Stats(ctx, &kvtierpb.Empty{})
	if err != nil {
		gauge(c.up, 0)
		return
	}
	gauge(c.up, 1)
	gauge(c.objects, float64(st.GetObjects()))
	gauge(c.heap, float64(st.GetHeapBytes()))
	gauge(c.leader, b2f(st.GetLeader()))
	for _, t := range st.GetTiers() {
		gauge(c.tierCap, float64(t.GetCapacity()), t.GetTier())
		gauge(c.tierUsed, float64(t.GetUsed()), t.GetTier())
		gauge(c.tierObjects, float64(t.GetObjects()), t.GetTier())
		counter(c.tierHits, float64(t.GetHits()), t.GetTier())
		counter(c.tierMisses, float64(t.GetMisses()), t.GetTier())
	}
	cs := st.GetCounters()
	for _, cm := range c.counters {
		v := float64(cs[cm.counter])
		if cm.label == "" {
			counter(cm.desc, v)
		} else {
			counter(cm.desc, v, cm.label)
		}
	}
	if segs, err := c.src.ListSegments(ctx, &kvtierpb.Empty{}); err == nil {
		for _, s := range segs.GetSegments() {
			name := s.GetSegment().GetName()
			gauge(c.segCap, float64(s.GetSegment().GetSize()), name)
			gauge(c.segUsed, float64(s.GetUsed()), name)
			gauge(c.segFree, float64(s.GetLargestFree()), name)
			gauge(c.segDraining, b2f(s.GetState() == kvtierpb.SegmentState_DRAINING), name)
		}
	}
	if cl, err := c.src.ListClients(ctx, &kvtierpb.Empty{}); err == nil {
		states := map[string]float64{"live": 0, "grace": 0, "gone": 0}
		for _, ci := range cl.GetClients() {
			for reason, n := range ci.GetGrantRefusals() {
				counter(c.grantRefused, float64(n), ci.GetClientId(), reason)
			}
			if ci.GetStorage() {
				gauge(c.applianceUp, b2f(ci.GetState() == kvtierpb.ClientState_LIVE && len(ci.GetProblems()) == 0), ci.GetClientId())
			}
			switch ci.GetState() {
			case kvtierpb.ClientState_LIVE:
				states["live"]++
			case kvtierpb.ClientState_CLIENT_GRACE:
				states["grace"]++
			case kvtierpb.ClientState_GONE:
				states["gone"]++
			}
		}
		for s, n := range states {
			gauge(c.clients, n, s)
		}
		for _, a := range c.ssdTot.observe(cl.GetClients(), time.Now()) {
			d := a.disk
			gauge(c.ssdCap, float64(d.GetCapacity()), a.name)
			gauge(c.ssdUsed, float64(d.GetUsed()), a.name)
			gauge(c.ssdBuckets, float64(d.GetBuckets()), a.name)
			gauge(c.ssdQuarantine, float64(d.GetQuarantinedBuckets()), a.name)
			gauge(c.ssdQueue, float64(d.GetOffloadQueue()), a.name)
			counter(c.ssdEvicted, float64(a.totals[ctrEvicted]), a.name)
			counter(c.ssdWritten, float64(a.totals[ctrWritten]), a.name)
			counter(c.ssdRead, float64(a.totals[ctrRead]), a.name)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
