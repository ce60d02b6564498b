package replay

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// simStore is an in-memory test Store: it keeps real bytes, and which keys it
// holds is decided by the simulator's lease model at the trace time set by
// BeforeRequest, so it evicts exactly like Simulate.
type simStore struct {
	mu   sync.Mutex
	m    *leaseModel      // guarded by mu
	data map[int64][]byte // guarded by mu
	now  int64            // guarded by mu: virtual ns
	ops  map[string]int   // guarded by mu: calls per method
}

var _ Store = (*simStore)(nil)

func newSimStore(o SimOptions) *simStore {
	o = o.withDefaults()
	s := &simStore{data: map[int64][]byte{}, ops: map[string]int{}}
	s.m = newLeaseModel(o.CapacityBlocks, o.Lease, o.HighWatermark, o.EvictionRatio)
	s.m.onEvict = func(id int64) { delete(s.data, id) }
	return s
}

func keyID(k string) (int64, error) {
	if !strings.HasPrefix(k, "blk-") {
		return 0, kverr.New(kverr.InvalidKey, k, "not a block key")
	}
	return strconv.ParseInt(k[4:], 10, 64)
}

func (s *simStore) setNow(ns int64) { s.mu.Lock(); s.now = ns; s.mu.Unlock() }

func (s *simStore) BatchExist(_ context.Context, keys []string) ([]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops["exist"]++
	out := make([]bool, len(keys))
	for i, k := range keys {
		id, err := keyID(k)
		if err != nil {
			return nil, err
		}
		out[i] = s.m.contains(id)
	}
	return out, nil
}

func (s *simStore) BatchGet(_ context.Context, keys []string) ([][]byte, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops["get"]++
	vals, errs := make([][]byte, len(keys)), make([]error, len(keys))
	for i, k := range keys {
		id, err := keyID(k)
		if err != nil || !s.m.contains(id) {
			errs[i] = kverr.New(kverr.ObjectNotFound, k, "absent")
			continue
		}
		s.m.read(id, s.now)
		vals[i] = append([]byte(nil), s.data[id]...)
	}
	return vals, errs
}

func (s *simStore) BatchPut(_ context.Context, keys []string, values [][]byte) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops["put"]++
	errs := make([]error, len(keys))
	for i, k := range keys {
		id, err := keyID(k)
		switch {
		case err != nil:
			errs[i] = err
		case s.m.contains(id): // already stored: not an error
		case !s.m.insert(id, s.now):
			errs[i] = kverr.New(kverr.NoAvailableHandle, k, "all leased")
		default:
			s.data[id] = append([]byte(nil), values[i]...)
		}
	}
	return errs
}

func (s *simStore) evictions(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.evictions(), nil
}

// TestRunAgreesWithSimulate replays a trace sample through a real byte store
// evicting with the simulator's policy and compares with Simulate.
func TestRunAgreesWithSimulate(t *testing.T) {
	conv, syn := traces(t)
	for _, c := range []struct {
		tr     *Trace
		n, cap int
		policy string
	}{{conv, 1500, 600, PolicyFrequency}, {conv, 1500, 600, PolicyPlain}, {syn, 600, 1500, PolicyFrequency}} {
		sample := &Trace{Name: "sample", Records: c.tr.Records[:c.n]}
		so := SimOptions{CapacityBlocks: c.cap, Policy: c.policy, BlockBytes: 256, Window: time.Minute}
		sim, err := Simulate(sample, so)
		if err != nil {
			t.Fatal(err)
		}
		st := newSimStore(so)
		rep, err := Run(context.Background(), sample, Options{
			BlockBytes: 256, Window: time.Minute, Evictions: st.evictions,
			BeforeRequest: func(_ int, rec *Record) { st.setNow(rec.Timestamp * int64(time.Millisecond)) },
		}, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		g, w := rep.Total, sim.Total
		if g.PrefixBlocks != w.PrefixBlocks || g.HitRequests != w.HitRequests || g.Blocks != w.Blocks || g.Evictions != w.Evictions || g.TokensSaved != w.TokensSaved {
			t.Errorf("%s/%s: replay %+v\n simulate %+v", c.tr.Name, c.policy, g.Counters, w.Counters)
		}
		if w.Evictions == 0 {
			t.Errorf("%s: sample never evicted; the comparison is vacuous", c.tr.Name)
		}
		if g.ReadErrors != 0 || g.BadPayloads != 0 {
			t.Errorf("read errors %d, bad payloads %d", g.ReadErrors, g.BadPayloads)
		}
		if g.BytesRead != g.PrefixBlocks*256 || g.P50US <= 0 || g.P999US < g.P50US {
			t.Errorf("bytes read %d, latency p50 %v p99.9 %v", g.BytesRead, g.P50US, g.P999US)
		}
		if len(rep.Windows) != len(sim.Windows) {
			t.Errorf("windows: replay %d, simulate %d", len(rep.Windows), len(sim.Windows))
		}
		for i := range rep.Windows {
			if i < len(sim.Windows) && rep.Windows[i].PrefixBlocks != sim.Windows[i].PrefixBlocks {
				t.Errorf("window %d: %d vs %d prefix blocks", i, rep.Windows[i].PrefixBlocks, sim.Windows[i].PrefixBlocks)
			}
		}
		if st.ops["exist"] != c.n {
			t.Errorf("exist calls %d, want one per request (%d)", st.ops["exist"], c.n)
		}
	}
}

// fakeFaultyStore is a fake: it corrupts or fails chosen keys, faults the
// real stores under test cannot be made to produce on demand.
type fakeFaultyStore struct {
	*simStore
	corrupt map[string]bool
	failGet map[string]bool
	failPut bool
}

func (f *fakeFaultyStore) BatchGet(ctx context.Context, keys []string) ([][]byte, []error) {
	vals, errs := f.simStore.BatchGet(ctx, keys)
	for i, k := range keys {
		if f.corrupt[k] && vals[i] != nil {
			vals[i][0] ^= 0xff
		}
		if f.failGet[k] {
			vals[i], errs[i] = nil, kverr.New(kverr.TransferFail, k, "injected")
		}
	}
	return vals, errs
}

func (f *fakeFaultyStore) BatchPut(ctx context.Context, keys []string, values [][]byte) []error {
	if f.failPut {
		errs := make([]error, len(keys))
		for i := range errs {
			errs[i] = errors.New("injected put failure")
		}
		return errs
	}
	return f.simStore.BatchPut(ctx, keys, values)
}

func TestRunCountsFaults(t *testing.T) {
	tr := &Trace{Records: []Record{
		{Timestamp: 0, InputLength: 1536, HashIDs: []int64{1, 2, 3}},
		{Timestamp: 1, InputLength: 1536, HashIDs: []int64{1, 2, 3}}, // block 2 corrupt
		{Timestamp: 2, InputLength: 1536, HashIDs: []int64{1, 2, 3}}, // block 1 fails
		{Timestamp: 3, InputLength: 1000, HashIDs: []int64{1, 9}},
	}}
	f := &fakeFaultyStore{simStore: newSimStore(SimOptions{CapacityBlocks: 100}), corrupt: map[string]bool{}, failGet: map[string]bool{}}
	ctx := context.Background()
	o := Options{BlockBytes: 100, Window: -1, BeforeRequest: func(i int, _ *Record) {
		switch i {
		case 1:
			f.corrupt["blk-2"] = true
		case 2:
			f.corrupt["blk-2"] = false
			f.failGet["blk-1"] = true
		case 3:
			f.failGet["blk-1"] = false
			f.failPut = true
		}
	}}
	rep, err := Run(ctx, tr, o, f, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Total
	// prefixes: 0, 1 (block 2 corrupt), 0 (block 1 fails), 1
	if c.PrefixBlocks != 2 || c.HitRequests != 2 || c.BadPayloads != 1 || c.ReadErrors != 1 {
		t.Errorf("counters %+v", c.Counters)
	}
	if c.PutsRejected != 1 { // block 9 in the last request
		t.Errorf("puts rejected %d, want 1", c.PutsRejected)
	}
	if c.TokensSaved != 512+512 {
		t.Errorf("tokens saved %d", c.TokensSaved)
	}
	if rep.Windows != nil {
		t.Errorf("windows present with Window < 0")
	}
	var txt, js bytes.Buffer
	if err := rep.WriteText(&txt); err != nil || !strings.Contains(txt.String(), "prefix-hit rate 0.1818") {
		t.Errorf("text report %v:\n%s", err, txt.String())
	}
	if err := rep.WriteJSON(&js); err != nil || !strings.Contains(js.String(), `"prefix_hit_rate": 0.18`) {
		t.Errorf("json report %v:\n%s", err, js.String())
	}
}

func TestRunHonoursSpeedAndCancel(t *testing.T) {
	tr := &Trace{Records: []Record{
		{Timestamp: 0, InputLength: 512, HashIDs: []int64{1}},
		{Timestamp: 1000, InputLength: 512, HashIDs: []int64{1}},
		{Timestamp: 2000, InputLength: 512, HashIDs: []int64{1}},
	}}
	st := newSimStore(SimOptions{CapacityBlocks: 10})
	start := time.Now()
	rep, err := Run(context.Background(), tr, Options{Speed: 20, BlockBytes: 8}, st, nil) // 2 s of trace in 100 ms
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Errorf("replay at speed 20 took %v, want >= 100ms", el)
	}
	if rep.Total.PrefixBlocks != 2 {
		t.Errorf("prefix blocks %d", rep.Total.PrefixBlocks)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err = Run(ctx, tr, Options{Speed: 0.001}, st, nil)
	if !errors.Is(err, context.Canceled) || rep == nil || rep.Total.Requests != 0 {
		t.Errorf("cancelled run: err %v, report %+v", err, rep)
	}
	if _, err := Run(context.Background(), tr, Options{BlockBytes: -1}, st, nil); err == nil {
		t.Error("negative block bytes accepted")
	}
}

func TestPayload(t *testing.T) {
	a, b := make([]byte, 100), make([]byte, 100)
	FillPayload(7, a)
	FillPayload(8, b)
	if bytes.Equal(a, b) {
		t.Fatal("payloads of different ids are equal")
	}
	scratch := make([]byte, 100)
	if !VerifyPayload(7, a, 100, scratch) || VerifyPayload(8, a, 100, scratch) || VerifyPayload(7, a[:99], 100, scratch) {
		t.Fatal("VerifyPayload wrong")
	}
}
