package replay

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"
)

var (
	tracesOnce sync.Once
	convTrace  *Trace
	synTrace   *Trace
	tracesErr  error
)

func traces(t *testing.T) (*Trace, *Trace) {
	t.Helper()
	tracesOnce.Do(func() {
		convTrace, tracesErr = LoadTrace(convPath)
		if tracesErr == nil {
			synTrace, tracesErr = LoadTrace(synPath)
		}
	})
	if tracesErr != nil {
		t.Fatal(tracesErr)
	}
	return convTrace, synTrace
}

// TestExactLRUReproducesReadme checks the reference table of shared/traces/README.md.
func TestExactLRUReproducesReadme(t *testing.T) {
	conv, syn := traces(t)
	want := map[*Trace]map[int]float64{
		conv: {1000: 0.0445, 5000: 0.1104, 10000: 0.2112, 50000: 0.3546, 100000: 0.3637},
		syn:  {1000: 0.0825, 5000: 0.2791, 10000: 0.4235, 50000: 0.6396, 100000: 0.6396},
	}
	for tr, table := range want {
		for c, w := range table {
			r, err := Simulate(tr, SimOptions{CapacityBlocks: c, Policy: PolicyLRU, Window: -1})
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Total.PrefixHitRate; got < w-0.002 || got > w+0.002 {
				t.Errorf("%s at %d: lru %.4f, README %.4f", tr.Name, c, got, w)
			}
		}
	}
}

func TestFrequencyBeatsPlainOnConversation(t *testing.T) {
	conv, _ := traces(t)
	p, err := Simulate(conv, SimOptions{CapacityBlocks: 5000, Policy: PolicyPlain})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Simulate(conv, SimOptions{CapacityBlocks: 5000, Policy: PolicyFrequency})
	if err != nil {
		t.Fatal(err)
	}
	if f.Total.PrefixHitRate < 0.16 {
		t.Errorf("frequency at 5000 blocks: %.4f < 0.16", f.Total.PrefixHitRate)
	}
	if f.Total.PrefixHitRate <= p.Total.PrefixHitRate {
		t.Errorf("frequency %.4f does not beat plain %.4f", f.Total.PrefixHitRate, p.Total.PrefixHitRate)
	}
	if f.Total.Evictions == 0 || len(f.Windows) < 10 {
		t.Errorf("evictions %d, windows %d: the cache never filled?", f.Total.Evictions, len(f.Windows))
	}
	// Windows add up to the total.
	var sum Counters
	for _, w := range f.Windows {
		sum.add(w.Counters)
	}
	if sum != f.Total.Counters {
		t.Errorf("windows sum %+v != total %+v", sum, f.Total.Counters)
	}
}

// TestDefaultPolicyNeverBelowPlain is the acceptance sweep for the default
// (1,500 and 3,000 blocks are where a fixed 60 s edge of two reads over one
// fell to or near plain on the synthetic trace).
func TestDefaultPolicyNeverBelowPlain(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: 32 full-trace simulations")
	}
	conv, syn := traces(t)
	caps := []int{1000, 1500, 2000, 3000, 5000, 10000, 20000, 50000}
	for _, tr := range []*Trace{conv, syn} {
		s, err := Sweep(tr, caps, []string{PolicyPlain, PolicyFrequency}, SimOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range caps {
			if f, p := s.Rates[PolicyFrequency][i], s.Rates[PolicyPlain][i]; f < p {
				t.Errorf("%s at %d: frequency %.4f below plain %.4f", tr.Name, c, f, p)
			}
		}
	}
}

func TestSweepOutputs(t *testing.T) {
	conv, _ := traces(t)
	sample := &Trace{Name: "sample", Records: conv.Records[:2000]}
	s, err := Sweep(sample, []int{100, 1000, 10000}, nil, SimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Rates) != 3 {
		t.Fatalf("policies %v", s.Policies)
	}
	for p, rates := range s.Rates {
		for i := 1; i < len(rates); i++ {
			if rates[i]+1e-9 < rates[i-1] && p == PolicyLRU { // LRU is a stack algorithm
				t.Errorf("lru hit rate fell with capacity: %v", rates)
			}
		}
	}
	var md, js, svg bytes.Buffer
	if err := s.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(md.Bytes(), []byte("| 1000 |")) {
		t.Errorf("markdown:\n%s", md.String())
	}
	if err := s.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back SweepResult
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Rates[PolicyLRU]) != 3 {
		t.Fatalf("json round trip: %v %+v", err, back)
	}
	if err := s.WriteSVG(&svg); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&svg)
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("svg: %v", err)
		}
	}
}

func TestSimOptionsValidate(t *testing.T) {
	conv, _ := traces(t)
	for _, o := range []SimOptions{
		{CapacityBlocks: 0},
		{CapacityBlocks: 10, Policy: "arc"},
		{CapacityBlocks: 10, HighWatermark: 1.5},
		{CapacityBlocks: 10, EvictionRatio: -0.1},
		{CapacityBlocks: 10, Speed: -1},
		{CapacityBlocks: 10, Lease: LeasePolicy{LeaseTTL: -time.Second}},
	} {
		if _, err := Simulate(conv, o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func TestSelectSmallest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		n := 1 + rng.IntN(300)
		c := make([]candidate, n)
		for i := range c {
			c[i] = candidate{key: int64(rng.IntN(20)), id: int64(i)}
		}
		k := rng.IntN(n + 1)
		sorted := append([]candidate(nil), c...)
		sort.Slice(sorted, func(i, j int) bool { return less(sorted[i], sorted[j]) })
		selectSmallest(c, k)
		got := append([]candidate(nil), c[:k]...)
		sort.Slice(got, func(i, j int) bool { return less(got[i], got[j]) })
		for i := range got {
			if got[i] != sorted[i] {
				t.Fatalf("trial %d n %d k %d: got %v want %v", trial, n, k, got, sorted[:k])
			}
		}
	}
}

func TestLeaseModelRules(t *testing.T) {
	p := LeasePolicy{Kind: PolicyFrequency, LeaseTTL: 10, FrequencyBonus: 100, FrequencyMaxBonus: 250, History: 8}
	m := newLeaseModel(10, p, 0.9, 0.2) // evict 2 when above 9
	m.history = newHistoryTable(8)
	for id := int64(0); id < 9; id++ {
		if !m.insert(id, 0) {
			t.Fatal("insert refused")
		}
	}
	m.read(0, 5) // deadline 15, reads 1: leased until 15
	m.read(1, 5)
	m.read(1, 5) // reads 2
	if m.insert(9, 6); m.len() != 8 || m.contains(0) == false || m.contains(1) == false {
		t.Fatalf("after pass: len %d, 0 present %v, 1 present %v", m.len(), m.contains(0), m.contains(1))
	}
	if m.contains(2) || m.contains(3) {
		t.Error("lowest keys (2, 3) not evicted first")
	}
	// Reinserting an evicted key restores its count + 1 from the history.
	m.history.put(2, 4)
	m.remove(2)
	m.insert(2, 7)
	if e := m.ents[m.idx[2]]; e.reads != 5 {
		t.Errorf("reads after history = %d, want 5", e.reads)
	}
	// Key: bonus capped.
	if k := p.Key(100, 1); k != 200 {
		t.Errorf("key(100,1) = %d", k)
	}
	if k := p.Key(100, 7); k != 350 {
		t.Errorf("key(100,7) = %d, want capped 350", k)
	}
	if k := (LeasePolicy{Kind: PolicyPlain, FrequencyBonus: 5}).Key(100, 7); k != 100 {
		t.Errorf("plain key = %d", k)
	}
	// Everything leased: the pass frees nothing, the insert is refused.
	full := newLeaseModel(2, p, 1, 0.5)
	full.insert(1, 0)
	full.insert(2, 0)
	full.read(1, 0)
	full.read(2, 0)
	if full.insert(3, 1) {
		t.Error("insert succeeded with every object leased")
	}
	if full.shortfall == 0 {
		t.Error("shortfall not counted")
	}
}

// TestHistoryTableReRemembered: an id taken and evicted again is remembered
// at its new place; the FIFO reaching its old (stale) slot must not forget it.
func TestHistoryTableReRemembered(t *testing.T) {
	g := newHistoryTable(3)
	g.put(1, 5)
	if r, ok := g.take(1); !ok || r != 5 {
		t.Fatalf("take(1) = %d,%v", r, ok)
	}
	g.put(1, 6) // new place; slot 0 is stale
	g.put(2, 1)
	g.put(3, 1) // overwrites the stale slot 0
	if r, ok := g.take(1); !ok || r != 6 {
		t.Fatalf("re-remembered id lost: %d,%v", r, ok)
	}
	g.put(4, 1) // overwrites slot 1 (a hole now)
	g.put(5, 1) // overwrites slot 2: 2 leaves
	if _, ok := g.take(2); ok {
		t.Fatal("2 outlived the limit")
	}
	for _, id := range []int64{3, 4, 5} {
		if _, ok := g.take(id); !ok {
			t.Fatalf("%d forgotten within the limit", id)
		}
	}
}
