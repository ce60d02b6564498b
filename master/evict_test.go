package master

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// fill puts n 64-byte objects k00..k(n-1) and reads object i at t0+i ms (so
// k00 has the oldest lease), then moves past every lease.
func fill(t *testing.T, m *Master, n int, pc func(i int) PutConfig) {
	t.Helper()
	for i := 0; i < n; i++ {
		c := PutConfig{Replicas: 1}
		if pc != nil {
			c = pc(i)
		}
		putCfg(t, m, "w", fmt.Sprintf("k%02d", i), 64, c)
	}
}

func readAll(t *testing.T, m *Master, fc interface{ Advance(time.Duration) }, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		fc.Advance(time.Millisecond)
		if _, err := m.GetReplicaList(ctx, "r", "", fmt.Sprintf("k%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

func present(m *Master, n int) (out []int) {
	for i := 0; i < n; i++ {
		if ok, _ := m.Exist(ctx, "", fmt.Sprintf("k%02d", i)); ok {
			out = append(out, i)
		}
	}
	return out
}

func TestEvictOldestLeaseFirstExactRatio(t *testing.T) {
	m, fc := newTest(t, Config{LeasePolicy: PolicyPlain, OffloadMode: OffloadOff})
	mountMem(t, m, "a", "a/0", 6400)
	fill(t, m, 95, nil) // 6080 of 6400 bytes: above 90%
	readAll(t, m, fc, 95)
	if rep := m.EvictNow(ctx); rep.FreedObjects != 0 || !rep.Short || rep.Leased != 95 {
		t.Fatalf("leased objects evicted: %+v", rep)
	}
	if ctrOf(m, "eviction_shortfall_leased") != 95 {
		t.Fatal("shortfall reason not counted")
	}
	fc.Advance(DefaultLeaseTTL)
	rep := m.EvictNow(ctx)
	if rep.Target != 320 || rep.FreedBytes != 320 || rep.FreedObjects != 5 || rep.Short {
		t.Fatalf("report %+v: want exactly 5%% of capacity", rep)
	}
	if p := present(m, 95); p[0] != 5 || len(p) != 90 {
		t.Fatalf("evicted the wrong objects; first present %d, %d left", p[0], len(p))
	}
	if ctrOf(m, "evictions") != 5 || ctrOf(m, "evicted_bytes") != 320 {
		t.Fatal("counters")
	}
	if rep := m.EvictNow(ctx); rep.Target != 0 {
		t.Fatalf("below the watermark a pass must do nothing: %+v", rep)
	}
	if m.LastEviction().FreedObjects != 5 {
		t.Fatal("LastEviction")
	}
}

func TestEvictLeasedNeverAndUnreadFirst(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff})
	mountMem(t, m, "a", "a/0", 6400)
	fill(t, m, 95, nil)
	fc.Advance(time.Second)
	for i := 0; i < 90; i++ { // k00..k89 leased now; k90..k94 never read
		m.GetReplicaList(ctx, "r", "", fmt.Sprintf("k%02d", i))
	}
	rep := m.EvictNow(ctx)
	if rep.FreedObjects != 5 {
		t.Fatalf("%+v", rep)
	}
	if p := present(m, 95); len(p) != 90 || p[89] != 89 {
		t.Fatalf("a leased object was evicted: %v", p)
	}
}

func TestEvictSoftPinSecondPassHardPinNever(t *testing.T) {
	m, fc := newTest(t, Config{LeasePolicy: PolicyPlain, OffloadMode: OffloadOff})
	mountMem(t, m, "a", "a/0", 6400)
	fill(t, m, 95, func(i int) PutConfig {
		switch {
		case i < 10:
			return PutConfig{Replicas: 1, HardPin: true}
		case i < 92:
			return PutConfig{Replicas: 1, SoftPin: true}
		}
		return PutConfig{Replicas: 1}
	})
	readAll(t, m, fc, 95)
	fc.Advance(DefaultLeaseTTL)
	rep := m.EvictNow(ctx)
	// 3 unpinned (192 bytes) are not enough: the second pass takes the two
	// oldest soft-pinned (k10, k11); hard-pinned k00..k09 stay.
	if !rep.SecondPass || rep.FreedObjects != 5 || rep.Pinned != 10 {
		t.Fatalf("%+v", rep)
	}
	p := present(m, 95)
	if len(p) != 90 || p[9] != 9 || p[10] != 12 || p[89] != 91 {
		t.Fatalf("present %v", p)
	}
	// Only hard-pinned objects left: nothing can go.
	m2, fc2 := newTest(t, Config{OffloadMode: OffloadOff})
	mountMem(t, m2, "a", "a/0", 6400)
	fill(t, m2, 95, func(int) PutConfig { return PutConfig{Replicas: 1, HardPin: true} })
	fc2.Advance(time.Hour)
	if rep := m2.EvictNow(ctx); rep.FreedObjects != 0 || rep.Pinned != 95 || !rep.Short {
		t.Fatalf("%+v", rep)
	}
	if ctrOf(m2, "eviction_shortfall_pinned") != 95 {
		t.Fatal("pinned shortfall not counted")
	}
	// Soft pins expire: then they are ordinary candidates.
	m3, fc3 := newTest(t, Config{OffloadMode: OffloadOff, SoftPinTTL: time.Minute})
	mountMem(t, m3, "a", "a/0", 6400)
	fill(t, m3, 95, func(int) PutConfig { return PutConfig{Replicas: 1, SoftPin: true} })
	fc3.Advance(2 * time.Minute)
	if rep := m3.EvictNow(ctx); rep.SecondPass || rep.FreedObjects != 5 {
		t.Fatalf("expired soft pins: %+v", rep)
	}
}

func TestEvictInFlightCounted(t *testing.T) {
	m, _ := newTest(t, Config{OffloadMode: OffloadOff})
	mountMem(t, m, "a", "a/0", 640)
	for i := 0; i < 10; i++ {
		if _, err := m.PutStart(ctx, putReq("w", fmt.Sprint(i), 64)); err != nil {
			t.Fatal(err)
		}
	}
	rep := m.EvictNow(ctx)
	if rep.InFlight != 10 || rep.FreedObjects != 0 || ctrOf(m, "eviction_shortfall_in_flight") != 10 {
		t.Fatalf("%+v", rep)
	}
}

func TestLeasePolicyOrder(t *testing.T) {
	for _, pol := range []string{PolicyPlain, PolicyFrequency} {
		m, fc := newTest(t, Config{LeasePolicy: pol, OffloadMode: OffloadOff})
		mountMem(t, m, "a", "a/0", 1280) // 20 slots; 19 used > 90%; target one object
		fill(t, m, 19, func(i int) PutConfig { return PutConfig{Replicas: 1, HardPin: i >= 2} })
		for i := 0; i < 10; i++ {
			m.GetReplicaList(ctx, "r", "", "k00") // hot
		}
		fc.Advance(2 * time.Second)
		m.GetReplicaList(ctx, "r", "", "k01") // one-off, read later
		fc.Advance(time.Minute)
		if rep := m.EvictNow(ctx); rep.FreedObjects != 1 {
			t.Fatalf("%s: %+v", pol, rep)
		}
		hotKept := exists(t, m, "k00")
		if hotKept != (pol == PolicyFrequency) {
			t.Fatalf("%s: hot object kept=%v", pol, hotKept)
		}
	}
	f := FrequencyPolicy{Bonus: time.Second, MaxBonus: 5 * time.Second}
	if f.EvictionKey(100, 3) != 100+int64(3*time.Second) || f.EvictionKey(100, 1000) != 100+int64(5*time.Second) {
		t.Fatal("frequency bonus")
	}
	if (PlainPolicy{}).EvictionKey(100, 50) != 100 {
		t.Fatal("plain")
	}
}

func TestAllocFailureEvictsThenRetries(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff})
	mountMem(t, m, "a", "a/0", 640)
	fill(t, m, 10, nil)
	fc.Advance(time.Second)
	if _, err := m.PutStart(ctx, putReq("w", "new", 64)); err != nil {
		t.Fatalf("put into a full segment of expired objects: %v", err)
	}
	if ctrOf(m, "evictions") == 0 || ctrOf(m, "eviction_passes") != 1 {
		t.Fatal("no synchronous pass")
	}
	// Everything leased: the pass frees nothing and the put fails cleanly.
	m2, _ := newTest(t, Config{OffloadMode: OffloadOff})
	mountMem(t, m2, "a", "a/0", 640)
	fill(t, m2, 10, nil)
	for i := 0; i < 10; i++ {
		m2.GetReplicaList(ctx, "r", "", fmt.Sprintf("k%02d", i))
	}
	_, err := m2.PutStart(ctx, putReq("w", "new", 64))
	wantCode(t, err, kverr.NoAvailableHandle)
}

func TestSelectByWeight(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		n := r.IntN(200)
		c := make([]Candidate, n)
		var total uint64
		for i := range c {
			c[i] = Candidate{Key: int64(r.IntN(50)), Bytes: uint64(1 + r.IntN(100)), Ref: int32(i)}
			total += c[i].Bytes
		}
		target := uint64(r.IntN(int(total) + 50))
		k := SelectByWeight(c, target)
		var sum uint64
		var maxIn int64 = -1
		for _, x := range c[:k] {
			sum += x.Bytes
			maxIn = max(maxIn, x.Key)
		}
		if target > 0 && sum < target && k != n {
			t.Fatalf("trial %d: selected %d bytes < target %d", trial, sum, target)
		}
		if k > 0 && (sum-c[k-1].Bytes >= target || c[k-1].Key != maxIn) {
			t.Fatalf("trial %d: selection of %d not minimal", trial, k)
		}
		if target == 0 && k != 0 {
			t.Fatal("target 0 selects nothing")
		}
		for _, x := range c[k:] {
			if x.Key < maxIn {
				t.Fatalf("trial %d: left out key %d below selected max %d", trial, x.Key, maxIn)
			}
		}
	}
}

func TestSoftPinStartsAtPutEndNotRenewed(t *testing.T) {
	m, fc := newTest(t, Config{})
	mountMem(t, m, "a", "a/0", 1<<20)
	if _, err := m.PutStart(ctx, PutRequest{Client: "w", Key: "s", Size: 10, Config: PutConfig{Replicas: 1, SoftPin: true, SoftPinTTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	fc.Advance(10 * time.Second)
	if err := m.PutEnd(ctx, "w", "", "s"); err != nil {
		t.Fatal(err)
	}
	want := t0.Add(10*time.Second + time.Minute)
	if d := info(t, m, "s").SoftPinDeadline; !d.Equal(want) {
		t.Fatalf("soft pin deadline %v want %v", d, want)
	}
	fc.Advance(30 * time.Second)
	m.GetReplicaList(ctx, "r", "", "s")
	if d := info(t, m, "s").SoftPinDeadline; !d.Equal(want) {
		t.Fatalf("a read renewed the soft pin: %v", d)
	}
	// Hard-pinned objects are never evicted but can be removed.
	putCfg(t, m, "w", "h", 10, PutConfig{Replicas: 1, HardPin: true})
	if err := m.Remove(ctx, "", "h", false); err != nil {
		t.Fatalf("remove hard-pinned: %v", err)
	}
}
