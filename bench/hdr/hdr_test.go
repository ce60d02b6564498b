package hdr

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

func exact(vals []int64, q float64) int64 {
	s := append([]int64(nil), vals...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	r := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(r, 0)]
}

func checkClose(t *testing.T, name string, got, want int64) {
	t.Helper()
	tol := float64(want)/100 + 1 // bucket width is < 1/128 of the value
	if math.Abs(float64(got-want)) > tol {
		t.Errorf("%s: got %d, want %d ±%.0f", name, got, want, tol)
	}
}

func TestQuantilesKnownDistributions(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	dists := map[string]func() int64{
		"uniform 1..1e6":   func() int64 { return 1 + rng.Int64N(1_000_000) },
		"exponential 50µs": func() int64 { return int64(rng.ExpFloat64() * 50_000) },
		"lognormal":        func() int64 { return int64(math.Exp(rng.NormFloat64()*1.5 + 12)) },
		"small ints":       func() int64 { return rng.Int64N(100) },
	}
	for name, gen := range dists {
		var h Histogram
		vals := make([]int64, 200_000)
		for i := range vals {
			vals[i] = gen()
			h.Record(vals[i])
		}
		for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
			checkClose(t, name, h.Quantile(q), exact(vals, q))
		}
		if h.Count() != uint64(len(vals)) || h.Min() != exact(vals, 0) || h.Max() != exact(vals, 1) {
			t.Errorf("%s: count %d min %d max %d", name, h.Count(), h.Min(), h.Max())
		}
	}
	// Uniform 1..1e6: analytic quantiles.
	var h Histogram
	for v := int64(1); v <= 1_000_000; v++ {
		h.Record(v)
	}
	checkClose(t, "uniform p50", h.Quantile(0.5), 500_000)
	checkClose(t, "uniform p99", h.Quantile(0.99), 990_000)
	checkClose(t, "uniform p99.9", h.Quantile(0.999), 999_000)
	if m := h.Mean(); math.Abs(m-500_000.5) > 1e-6 {
		t.Errorf("mean %v", m)
	}
}

func TestEdgesAndMerge(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram not zero")
	}
	h.Record(-5) // clamped to 0
	h.Record(math.MaxInt64)
	if h.Min() != 0 || h.Max() != math.MaxInt64 || h.Quantile(1) != math.MaxInt64 || h.Quantile(0) != 0 {
		t.Errorf("extremes: min %d max %d", h.Min(), h.Max())
	}
	if q := h.Quantile(math.NaN()); q != 0 {
		t.Errorf("NaN quantile = %d", q)
	}
	var a, b Histogram
	for i := int64(0); i < 1000; i++ {
		a.Record(i)
		b.Record(i + 1000)
	}
	a.Merge(&b)
	if a.Count() != 2000 || a.Min() != 0 || a.Max() != 1999 {
		t.Errorf("merged count %d min %d max %d", a.Count(), a.Min(), a.Max())
	}
	checkClose(t, "merged p50", a.Quantile(0.5), 999)
	a.Reset()
	if a.Count() != 0 {
		t.Error("reset")
	}
}

func TestIndexBoundsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 100_000; i++ {
		v := rng.Uint64() >> uint(rng.IntN(64))
		v &= math.MaxInt64
		idx := index(v)
		if idx < 0 || idx >= nBuckets {
			t.Fatalf("index(%d) = %d out of range", v, idx)
		}
		lo, hi := bounds(idx)
		if v < lo || v > hi {
			t.Fatalf("value %d not in bucket %d [%d,%d]", v, idx, lo, hi)
		}
		if v >= sub && float64(hi-lo) > float64(lo)/sub {
			t.Fatalf("bucket %d too wide: [%d,%d]", idx, lo, hi)
		}
	}
}

func TestRecordDoesNotAllocate(t *testing.T) {
	var h Histogram
	if n := testing.AllocsPerRun(1000, func() { h.Record(123456) }); n != 0 {
		t.Errorf("Record allocates %v times", n)
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	for i := 0; b.Loop(); i++ {
		h.Record(int64(i))
	}
}
