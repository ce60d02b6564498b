package master

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/clock"
)

// runEvictor starts m.Run and returns what stops it and waits for it.
func runEvictor(t *testing.T, m *Master) (stop func()) {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(c); close(done) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its context ended")
		}
	}
	t.Cleanup(stop)
	return stop
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// The background evictor starts below the high watermark (less half the
// eviction ratio) and frees down to there, so puts keep finding room
// without evicting inline.
func TestBackgroundEvictorKeepsHeadroom(t *testing.T) {
	m, err := New(Config{Clock: clock.Real{}, EvictInterval: time.Millisecond, OffloadMode: OffloadOff,
		HighWatermark: 0.9, EvictionRatio: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "a", "a/0", 6400)
	runEvictor(t, m)
	trigger := uint64(0.85 * 6400)
	for i := 0; i < 1000; i++ {
		put(t, m, "w", fmt.Sprint(i), 64) // 10 times DRAM: never refused
		if i%50 == 49 {
			// The evictor catches up with the puts: use goes back below
			// the trigger, not just below the high watermark.
			waitUntil(t, "use below the trigger", func() bool { _, u := m.memoryUsage(); return u <= trigger })
			if _, u := m.memoryUsage(); i > 100 && u < trigger-uint64(0.1*6400)-64 {
				t.Fatalf("evicted far below the target: use %d", u)
			}
		}
	}
	if ctrOf(m, "evictions") < 1000-100 {
		t.Fatalf("evictions %d for 1000 puts into room for 100", ctrOf(m, "evictions"))
	}
	if err := m.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestBackgroundEvictorWakesOnFill: below the trigger the evictor does not
// tick; an allocation taking a segment past its share of the trigger wakes
// it at once. With EvictInterval an hour, only that wake-up can bring use
// back below the trigger within the test's wait; and an idle evictor makes
// no passes.
func TestBackgroundEvictorWakesOnFill(t *testing.T) {
	m, err := New(Config{Clock: clock.Real{}, EvictInterval: time.Hour, OffloadMode: OffloadOff,
		HighWatermark: 0.9, EvictionRatio: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "a", "a/0", 6400)
	mountMem(t, m, "b", "b/0", 6400)
	runEvictor(t, m)
	trigger := uint64(0.85 * 2 * 6400)
	for i := range 400 { // twice DRAM
		put(t, m, "w", fmt.Sprint(i), 64)
		if _, u := m.memoryUsage(); u > trigger+64 {
			// At most one put past the trigger before the evictor wakes,
			// plus what lands while it runs.
			waitUntil(t, "use back below the trigger", func() bool { _, u := m.memoryUsage(); return u <= trigger })
		}
	}
	if n := ctrOf(m, "evictions"); n < 400-200 {
		t.Fatalf("evictions %d for 400 puts into room for 200", n)
	}
	if _, u := m.memoryUsage(); u > trigger+64 {
		t.Fatalf("use %d above the trigger %d after the puts", u, trigger)
	}
	if err := m.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// Leased, hard-pinned and in-flight objects stay through any number of
// background passes; soft-pinned ones too while the others suffice.
func TestBackgroundEvictorKeepsProtected(t *testing.T) {
	m, fc := newTest(t, Config{EvictInterval: time.Millisecond, OffloadMode: OffloadOff, LeaseTTL: time.Hour})
	mountMem(t, m, "a", "a/0", 6400)
	put(t, m, "w", "leased", 64)
	if _, err := m.GetReplicaList(ctx, "r", "", "leased"); err != nil {
		t.Fatal(err)
	}
	putCfg(t, m, "w", "hard", 64, PutConfig{Replicas: 1, HardPin: true})
	putCfg(t, m, "w", "soft", 64, PutConfig{Replicas: 1, SoftPin: true, SoftPinTTL: time.Hour})
	if _, err := m.PutStart(ctx, putReq("w", "inflight", 64)); err != nil {
		t.Fatal(err)
	}
	fc.Advance(time.Second) // the others are younger than the protected ones
	runEvictor(t, m)
	for i := 0; i < 500; i++ {
		fc.Advance(time.Millisecond)
		put(t, m, "w", fmt.Sprint(i), 64)
	}
	waitUntil(t, "evictions", func() bool { return ctrOf(m, "evictions") >= 400 })
	for _, k := range []string{"leased", "hard", "soft"} {
		if !exists(t, m, k) {
			t.Errorf("%s was evicted", k)
		}
	}
	if err := m.PutEnd(ctx, "w", "", "inflight"); err != nil {
		t.Errorf("the in-flight put lost its space: %v", err)
	}
}

// Run's evictor stops when its context ends: use above the trigger is left
// alone after that.
func TestBackgroundEvictorStops(t *testing.T) {
	m, err := New(Config{Clock: clock.Real{}, EvictInterval: time.Millisecond, OffloadMode: OffloadOff})
	if err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "a", "a/0", 6400)
	stop := runEvictor(t, m)
	stop()
	for i := 0; i < 95; i++ { // 95 %: above the watermark, no allocation fails
		put(t, m, "w", fmt.Sprint(i), 64)
	}
	passes := ctrOf(m, "eviction_passes")
	time.Sleep(50 * time.Millisecond)
	if p := ctrOf(m, "eviction_passes"); p != passes || ctrOf(m, "evictions") != 0 {
		t.Fatalf("passes ran after Run returned: %d -> %d, %d evictions", passes, p, ctrOf(m, "evictions"))
	}
}

// A candidate a scan kept for later passes is evicted only if a fresh scan
// would pick it: one read after the scan (its lease since expired) has a
// later order key and stays, while the ones after it go.
func TestEvictCacheSkipsReadSinceScan(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff, LeaseTTL: 100 * time.Millisecond, LeasePolicy: PolicyPlain,
		HighWatermark: 0.9, EvictionRatio: 0.05})
	mountMem(t, m, "a", "a/0", 6400)
	for i := 0; i < 95; i++ {
		fc.Advance(time.Millisecond)
		put(t, m, "w", fmt.Sprint(i), 64)
	}
	rep := m.EvictNow(ctx) // scans: evicts 0-4, keeps the next ones
	if rep.FreedObjects != 5 || exists(t, m, "4") || !exists(t, m, "5") {
		t.Fatalf("first pass: %+v", rep)
	}
	if len(m.evc.cands) == 0 {
		t.Fatal("the scan kept no candidates")
	}
	if _, err := m.GetReplicaList(ctx, "r", "", "5"); err != nil {
		t.Fatal(err)
	}
	fc.Advance(200 * time.Millisecond) // lease over; still within evictCacheTTL
	for i := 95; i < 100; i++ {
		put(t, m, "w", fmt.Sprint(i), 64)
	}
	rep = m.EvictNow(ctx)
	if rep.FreedObjects == 0 {
		t.Fatalf("second pass: %+v", rep)
	}
	if !exists(t, m, "5") {
		t.Error("5 was read after the scan, yet the kept candidate was evicted")
	}
	if exists(t, m, "6") {
		t.Error("6 should have gone before 5")
	}
}

// Under the frequency policy (the default), whose pass policy follows the
// DRAM lifetime, consecutive passes keep using the candidates one scan
// selected while the lifetime bound moves by less than a quarter
// (nearPolicy); the lifetime measured anew at every pass once made every
// pass of a full store scan every object.
func TestEvictCacheKeptAcrossLifetimeDrift(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff, LeaseTTL: 100 * time.Millisecond, HighWatermark: 0.9, EvictionRatio: 0.05})
	mountMem(t, m, "a", "a/0", 200*64)
	// Turn the tier over steadily, so that passes have a lifetime.
	for i := 0; i < 600; i++ {
		put(t, m, "w", fmt.Sprintf("warm%03d", i), 64)
		if i%10 == 9 {
			fc.Advance(50 * time.Millisecond)
			m.EvictNow(ctx)
		}
	}
	m.evictMu.Lock()
	life, known := m.turnover.Lifetime(m.now().UnixNano(), m.turnoverCap)
	m.evictMu.Unlock()
	if !known {
		t.Fatal("test premise: no lifetime after turning the tier over")
	}
	pass := func(i int, after time.Duration) {
		t.Helper()
		for j := 0; j < 10; j++ {
			put(t, m, "w", fmt.Sprintf("p%d-%d", i, j), 64)
		}
		fc.Advance(after)
		if rep := m.EvictNow(ctx); rep.FreedObjects == 0 {
			t.Fatalf("pass %d freed nothing: %+v", i, rep)
		}
	}
	// Passes a little irregular, as they are, all within the kept
	// candidates' life (1/evictCacheLifetimeDiv of the tier's lifetime).
	step := life / evictCacheLifetimeDiv / 8
	scans := m.ctr.get(cEvictionScans)
	for i := 0; i < 4; i++ {
		pass(i, step+time.Duration(i)*step/4)
	}
	if n := m.ctr.get(cEvictionScans) - scans; n > 1 {
		t.Fatalf("4 passes scanned %d times: want at most 1 (the others from the kept candidates)", n)
	}
	// Kept candidates older than that part of the lifetime are a scan
	// older than the objects they order: the next pass scans.
	scans = m.ctr.get(cEvictionScans)
	pass(4, life/evictCacheLifetimeDiv+time.Millisecond)
	if n := m.ctr.get(cEvictionScans) - scans; n != 1 {
		t.Fatalf("a pass after the kept candidates' life scanned %d times, want 1 (lifetime %v)", n, life)
	}
}

func TestNearPolicy(t *testing.T) {
	f := FrequencyPolicy{Bonus: time.Second, MaxBonus: time.Minute, Extra: 8 * time.Second}
	with := func(extra time.Duration) FrequencyPolicy { g := f; g.Extra = extra; return g }
	for _, c := range []struct {
		kept, pol LeasePolicy
		want      bool
	}{
		{f, f, true}, {PlainPolicy{}, PlainPolicy{}, true},
		{f, with(9 * time.Second), true}, {f, with(7 * time.Second), true},
		{f, with(11 * time.Second), false}, {f, with(5 * time.Second), false},
		{f, FrequencyPolicy{Bonus: 2 * time.Second, MaxBonus: time.Minute, Extra: 8 * time.Second}, false},
		{f, with(0), false}, {with(0), f, false}, {f, PlainPolicy{}, false},
	} {
		if got := nearPolicy(c.kept, c.pol); got != c.want {
			t.Errorf("nearPolicy(%+v, %+v) = %v, want %v", c.kept, c.pol, got, c.want)
		}
	}
}
