package metrics

import (
	"sort"
	"sync"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

// The appliance counters kept monotonic.
const (
	ctrEvicted = iota
	ctrWritten
	ctrRead
	numCtrs
)

func diskCounters(d *kvtierpb.DiskTierStats) [numCtrs]uint64 {
	return [numCtrs]uint64{d.GetEvictedBuckets(), d.GetBytesWritten(), d.GetBytesRead()}
}

// applianceCounters turns each appliance's reported SSD counters, which
// restart at zero with the appliance, into totals that never go backwards:
// it adds each report's increase over the last one seen, and a value below
// the last one is a restart, whose whole value is new. What an appliance
// counted after the last observation before it restarted is lost (it is
// observed at every scrape and by Track, every few seconds).
//
// Entries of appliances unseen for forgetAfter are dropped, so names that
// come and go do not grow the map without bound.
type applianceCounters struct {
	mu   sync.Mutex
	byID map[string]*applianceTotals // guarded by mu
}

type applianceTotals struct {
	last     [numCtrs]uint64
	totals   [numCtrs]uint64
	lastSeen time.Time
}

// forgetAfter is how long totals of an appliance no longer listed are kept
// (a restart within it continues the series).
const forgetAfter = 24 * time.Hour

func newApplianceCounters() *applianceCounters {
	return &applianceCounters{byID: map[string]*applianceTotals{}}
}

// applianceFigures is one appliance's series at one scrape.
type applianceFigures struct {
	name   string
	disk   *kvtierpb.DiskTierStats
	totals [numCtrs]uint64
}

// observe folds one ListClients answer in and returns the figures of the
// appliances to export: those with an SSD tier that are not GONE (a departed
// appliance's series disappear), sorted by name.
func (a *applianceCounters) observe(clients []*kvtierpb.ClientInfo, now time.Time) []applianceFigures {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []applianceFigures
	for _, ci := range clients {
		d := ci.GetDisk()
		if d == nil {
			continue
		}
		id := ci.GetClientId()
		cur := diskCounters(d)
		t := a.byID[id]
		if t == nil {
			t = &applianceTotals{last: cur, totals: cur}
			a.byID[id] = t
		} else {
			for i := range cur {
				if cur[i] >= t.last[i] {
					t.totals[i] += cur[i] - t.last[i]
				} else {
					t.totals[i] += cur[i] // restarted: everything it reports is new
				}
			}
			t.last = cur
		}
		t.lastSeen = now
		if ci.GetState() == kvtierpb.ClientState_GONE {
			continue
		}
		out = append(out, applianceFigures{name: id, disk: d, totals: t.totals})
	}
	for id, t := range a.byID {
		if now.Sub(t.lastSeen) > forgetAfter {
			delete(a.byID, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}
