package metrics

import (
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

func appl(id string, st kvtierpb.ClientState, written, read, evicted uint64) *kvtierpb.ClientInfo {
	return &kvtierpb.ClientInfo{ClientId: id, State: st,
		Disk: &kvtierpb.DiskTierStats{Capacity: 100, BytesWritten: written, BytesRead: read, EvictedBuckets: evicted}}
}

func TestApplianceCountersSurviveRestarts(t *testing.T) {
	a := newApplianceCounters()
	now := time.Unix(1000, 0)
	live := kvtierpb.ClientState_LIVE
	got := a.observe([]*kvtierpb.ClientInfo{appl("a", live, 100, 10, 1), appl("b", live, 5, 0, 0), {ClientId: "gpu"}}, now)
	if len(got) != 2 || got[0].totals[ctrWritten] != 100 || got[1].totals[ctrWritten] != 5 {
		t.Fatalf("first: %+v", got)
	}
	got = a.observe([]*kvtierpb.ClientInfo{appl("a", live, 150, 12, 1), appl("b", live, 5, 0, 0)}, now.Add(time.Second))
	if got[0].totals[ctrWritten] != 150 || got[0].totals[ctrRead] != 12 {
		t.Fatalf("growth: %+v", got[0])
	}
	// a restarts: its own counters start again from zero.
	got = a.observe([]*kvtierpb.ClientInfo{appl("a", live, 30, 1, 0), appl("b", live, 7, 0, 0)}, now.Add(2*time.Second))
	if got[0].totals[ctrWritten] != 180 || got[0].totals[ctrRead] != 13 || got[0].totals[ctrEvicted] != 1 {
		t.Fatalf("after a restart: %+v", got[0].totals)
	}
	// b departs: its series are no longer exported.
	got = a.observe([]*kvtierpb.ClientInfo{appl("a", live, 40, 1, 0), appl("b", kvtierpb.ClientState_GONE, 7, 0, 0)}, now.Add(3*time.Second))
	if len(got) != 1 || got[0].name != "a" || got[0].totals[ctrWritten] != 190 {
		t.Fatalf("after b left: %+v", got)
	}
	// Entries unseen for a day are forgotten.
	a.observe(nil, now.Add(25*time.Hour))
	if len(a.byID) != 0 {
		t.Fatalf("stale entries kept: %v", a.byID)
	}
}

// FuzzApplianceCounters: whatever sequence of reports (restarts at any
// point), every total only grows.
func FuzzApplianceCounters(f *testing.F) {
	f.Add([]byte{10, 20, 5, 0, 255, 3})
	f.Fuzz(func(t *testing.T, seq []byte) {
		a := newApplianceCounters()
		var prev [numCtrs]uint64
		for i, v := range seq {
			got := a.observe([]*kvtierpb.ClientInfo{appl("x", kvtierpb.ClientState_LIVE, uint64(v)*1000, uint64(v), uint64(v%7))}, time.Unix(int64(i), 0))
			for k := range prev {
				if got[0].totals[k] < prev[k] {
					t.Fatalf("step %d counter %d went from %d to %d", i, k, prev[k], got[0].totals[k])
				}
			}
			prev = got[0].totals
		}
	})
}
