package master

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// turnoverModel is the reference: the time of every eviction, oldest first.
type turnoverModel struct{ at []int64 }

func (r *turnoverModel) record(at int64, n int) {
	for ; n > 0; n-- {
		r.at = append(r.at, at)
	}
}

// lifetime is now minus the time of the capacity-th most recent eviction,
// when the Turnover's ring still reaches back that far (exact is false
// otherwise: the Turnover then extrapolates).
func (r *turnoverModel) lifetime(now int64, capacity int) (l time.Duration, ok bool) {
	if capacity <= 0 || len(r.at) < capacity {
		return 0, false
	}
	return time.Duration(max(now-r.at[len(r.at)-capacity], 0)), true
}

func TestTurnoverLifetime(t *testing.T) {
	var tu Turnover
	if _, ok := tu.Lifetime(100, 10); ok {
		t.Fatal("lifetime known before any eviction")
	}
	sec := int64(time.Second)
	tu.Record(1*sec, 4)
	tu.Record(2*sec, 0) // ignored
	tu.Record(3*sec, 4)
	if _, ok := tu.Lifetime(4*sec, 10); ok {
		t.Fatal("lifetime known after 8 of 10 evictions")
	}
	tu.Record(5*sec, 4) // evictions 0-3 at 1 s, 4-7 at 3 s, 8-11 at 5 s
	for _, c := range []struct {
		capacity int
		want     time.Duration
	}{{1, 1 * time.Second}, {4, time.Second}, {5, 3 * time.Second}, {8, 3 * time.Second}, {9, 5 * time.Second}, {12, 5 * time.Second}} {
		if l, ok := tu.Lifetime(6*sec, c.capacity); !ok || l != c.want {
			t.Errorf("capacity %d: lifetime %v %v, want %v", c.capacity, l, ok, c.want)
		}
	}
	if _, ok := tu.Lifetime(6*sec, 13); ok {
		t.Error("lifetime known for a capacity above all evictions")
	}
	if l, _ := tu.Lifetime(0, 4); l != 0 {
		t.Errorf("a clock behind the last pass gives %v, want 0", l)
	}

	// Past the ring: extrapolated from the rate over the remembered passes.
	var long Turnover
	for i := int64(0); i < 3*turnoverPasses; i++ {
		long.Record(i*sec, 1)
	}
	// The ring holds passes at 128..191 s (64 evictions over 64 s at 192 s).
	if l, ok := long.Lifetime(192*sec, 2*turnoverPasses); !ok || l != 128*time.Second {
		t.Errorf("extrapolated lifetime %v %v, want 128s", l, ok)
	}
	if l, ok := long.Lifetime(192*sec, 10); !ok || l != 10*time.Second {
		t.Errorf("lifetime %v %v, want 10s", l, ok)
	}
}

// FuzzTurnover checks Turnover against the list of every eviction time
// wherever the ring reaches back far enough, and that extrapolation only
// ever lengthens the exact span it can see.
func FuzzTurnover(f *testing.F) {
	f.Add([]byte{3, 1, 0, 5, 2, 7, 1, 1, 9, 4})
	f.Add([]byte{255, 255, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4})
	f.Add(make([]byte, 300))
	f.Fuzz(func(t *testing.T, data []byte) {
		var tu Turnover
		var ref turnoverModel
		now := int64(0)
		passes := 0
		for len(data) >= 2 {
			now += int64(data[0]) * int64(time.Millisecond)
			n := int(data[1] % 40)
			data = data[2:]
			tu.Record(now, n)
			ref.record(now, n)
			if n > 0 {
				passes++
			}
			for _, capacity := range []int{1, 7, 50, 400} {
				got, ok := tu.Lifetime(now+1, capacity)
				want, wok := ref.lifetime(now+1, capacity)
				if ok != wok {
					t.Fatalf("capacity %d after %d evictions: ok %v, want %v", capacity, len(ref.at), ok, wok)
				}
				if !ok {
					continue
				}
				// Exact when the capacity-th most recent eviction lies in a
				// remembered pass.
				reach := len(ref.at) - int(tu.total-tu.passes[(tu.next-tu.n+turnoverPasses)%turnoverPasses].before)
				if len(ref.at)-capacity >= reach && got != want {
					t.Fatalf("capacity %d: lifetime %v, want %v", capacity, got, want)
				}
				if got < 0 || got > time.Duration(math.MaxInt64/2) {
					t.Fatalf("lifetime %v out of range", got)
				}
			}
		}
		_ = passes
	})
}

// TestFrequencyKeyExtraBound pins the formula with a lifetime bound:
// min(r×Bonus, MaxBonus, Bonus + (r−1)×Extra), without overflow.
func TestFrequencyKeyExtraBound(t *testing.T) {
	p := FrequencyPolicy{Bonus: 270 * time.Second, MaxBonus: 330 * time.Second, Extra: 10 * time.Second}
	for reads, want := range map[uint32]time.Duration{0: 0, 1: 270 * time.Second, 2: 280 * time.Second, 3: 290 * time.Second,
		7: 330 * time.Second, 1 << 31: 330 * time.Second, math.MaxUint32: 330 * time.Second} {
		if got := p.EvictionKey(1000, reads) - 1000; got != int64(want) {
			t.Errorf("reads %d: bonus %v, want %v", reads, time.Duration(got), want)
		}
	}
	// Extra larger than Bonus: r×Bonus is the tighter bound.
	q := FrequencyPolicy{Bonus: time.Second, MaxBonus: time.Hour, Extra: time.Minute}
	if got := q.EvictionKey(0, 5); got != int64(5*time.Second) {
		t.Errorf("bonus %v, want 5s", time.Duration(got))
	}
	// ForLifetime sets Extra = FrequencyExtraLifetimes × lifetime, at least 1 ns.
	r := FrequencyPolicy{Bonus: 270 * time.Second, MaxBonus: 330 * time.Second}
	if got := r.ForLifetime(40 * time.Second).(FrequencyPolicy).Extra; got != time.Duration(FrequencyExtraLifetimes*float64(40*time.Second)) {
		t.Errorf("Extra %v", got)
	}
	if got := r.ForLifetime(0).(FrequencyPolicy); got.Extra != 1 || got.EvictionKey(0, 2) != int64(270*time.Second)+1 {
		t.Errorf("a zero lifetime: %+v", got)
	}
}

// TestEvictionBoundsExtraByLifetime: once the master has measured its DRAM
// lifetime, a second read earns at most FrequencyExtraLifetimes lifetimes
// over a first read. An object read twice whose reads are older than that,
// compared with one read once, goes first; with the configured bounds alone
// (330 s for two reads, 270 s for one) it would stay.
func TestEvictionBoundsExtraByLifetime(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff})
	mountMem(t, m, "a", "a/0", 20*64) // 20 objects; above 18 a pass frees 1
	// Turn the tier over: one one-off put a second, one eviction a second:
	// a lifetime of 20 s.
	for i := 0; i < 100; i++ {
		put(t, m, "w", fmt.Sprintf("old%03d", i), 64)
		m.EvictNow(ctx)
		fc.Advance(time.Second)
	}
	lifetime := func() time.Duration {
		m.evictMu.Lock()
		defer m.evictMu.Unlock()
		l, ok := m.turnover.Lifetime(m.now().UnixNano(), m.turnoverCap)
		if !ok {
			t.Fatal("no lifetime after 80 evictions")
		}
		return l
	}
	if l := lifetime(); l != 20*time.Second {
		t.Fatalf("lifetime %v, want 20s", l)
	}
	var keep []string // the 18 old objects left, leased below so they are no candidates
	for i := 0; i < 100; i++ {
		if k := fmt.Sprintf("old%03d", i); exists(t, m, k) {
			keep = append(keep, k)
		}
	}
	if err := m.Remove(ctx, "", keep[0], false); err != nil {
		t.Fatal(err)
	}
	keep = keep[1:]
	put(t, m, "w", "twice", 64)
	put(t, m, "w", "once", 64)
	m.GetReplicaList(ctx, "r", "", "twice")
	m.GetReplicaList(ctx, "r", "", "twice")
	// "once" is read gap later: more than the bound on a second read's
	// extra at the pass below (lifetime then ≈ 20 s + gap + 6 s), less
	// than MaxBonus − Bonus.
	x := FrequencyExtraLifetimes
	gap := time.Duration(2*x*float64(26*time.Second)/(1-x)) + time.Second
	fc.Advance(gap)
	m.GetReplicaList(ctx, "r", "", "once")
	fc.Advance(DefaultLeaseTTL + time.Second)
	for _, k := range keep {
		m.GetReplicaList(ctx, "r", "", k)
	}
	extra := time.Duration(x * float64(lifetime()))
	if gap <= extra || gap >= DefaultFrequencyMaxBonus-DefaultFrequencyBonus {
		t.Fatalf("test premise: gap %v, extra %v", gap, extra)
	}
	if rep := m.EvictNow(ctx); rep.FreedObjects != 1 || rep.Candidates != 2 {
		t.Fatalf("pass %+v: want 1 of 2 candidates freed", rep)
	}
	if exists(t, m, "twice") || !exists(t, m, "once") {
		t.Fatalf("twice kept %v, once kept %v: want twice evicted (gap %v, extra %v)", exists(t, m, "twice"), exists(t, m, "once"), gap, extra)
	}
}
