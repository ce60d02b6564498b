package master

import (
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// TestHeartbeatCachedReads: reads a client served from its lease cache
// count as reads and move the last read (and so the lease) to when the
// latest happened, never backwards; objects gone are skipped.
func TestHeartbeatCachedReads(t *testing.T) {
	m, fc := newTest(t, Config{LeaseTTL: 5 * time.Second})
	mountMem(t, m, "A", "A/0", 1<<20)
	put(t, m, "A", "k", 4096)
	if _, err := m.GetReplicaList(ctx, "B", "", "k"); err != nil {
		t.Fatal(err)
	}
	read := t0
	fc.Advance(3 * time.Second)
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "B", CachedReads: []CachedRead{
		{Key: "k", Count: 4, LastReadAge: time.Second},
		{Key: "gone", Count: 9},
	}}); err != nil {
		t.Fatal(err)
	}
	info, err := m.GetObject(ctx, "", "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.ReadCount != 5 {
		t.Fatalf("read count %d, want 1 + 4 cached", info.ReadCount)
	}
	if want := read.Add(2*time.Second + 5*time.Second); !info.LeaseDeadline.Equal(want) {
		t.Fatalf("lease deadline %v, want %v (latest cached read + TTL)", info.LeaseDeadline, want)
	}
	if got := ctrOf(m, "cached_reads"); got != 4 {
		t.Fatalf("cached_reads counter %d, want 4", got)
	}
	// An older report does not move the last read backwards.
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "B", CachedReads: []CachedRead{{Key: "k", Count: 1, LastReadAge: 3 * time.Second}}}); err != nil {
		t.Fatal(err)
	}
	if info2, _ := m.GetObject(ctx, "", "k"); !info2.LeaseDeadline.Equal(info.LeaseDeadline) || info2.ReadCount != 6 {
		t.Fatalf("after an older report: deadline %v (was %v), count %d", info2.LeaseDeadline, info.LeaseDeadline, info2.ReadCount)
	}
}

// TestHeartbeatCachedReadsRefused: a bad entry refuses the whole beat
// before anything changes (not even the announced segment).
func TestHeartbeatCachedReadsRefused(t *testing.T) {
	m, _ := newTest(t, Config{})
	mountMem(t, m, "A", "A/0", 1<<20)
	put(t, m, "A", "k", 4096)
	many := make([]CachedRead, MaxCachedReads+1)
	for i := range many {
		many[i] = CachedRead{Key: "k", Count: 1}
	}
	for name, rs := range map[string][]CachedRead{
		"empty key":  {{Key: "k", Count: 1}, {Key: "", Count: 1}},
		"zero count": {{Key: "k", Count: 0}},
		"long key":   {{Key: strings.Repeat("x", 1<<20), Count: 1}},
		"negative":   {{Key: "k", Count: 1, LastReadAge: -time.Second}},
		"too many":   many,
	} {
		_, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "B", Segments: []Segment{{Name: "B/0", Endpoint: "B:1", Size: 1 << 20}}, CachedReads: rs})
		if c := kverr.CodeOf(err); c != kverr.InvalidParams && c != kverr.InvalidKey {
			t.Fatalf("%s: %v, want INVALID_PARAMS or INVALID_KEY", name, err)
		}
		if info, _ := m.GetObject(ctx, "", "k"); info.ReadCount != 0 {
			t.Fatalf("%s: read count %d after a refused beat", name, info.ReadCount)
		}
		if segs := m.ListSegments(ctx); len(segs) != 1 {
			t.Fatalf("%s: refused beat changed the segments: %d", name, len(segs))
		}
	}
}
