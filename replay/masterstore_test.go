package replay

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/clock"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// masterStore drives a real master (in process, on a fake clock set to the
// trace time) as the replay's Store: BatchExist, BatchGetReplicaList and
// BatchPutStart+BatchPutEnd. No bytes move: a read returns the block's
// payload regenerated from its id once the master granted the read, which
// is all a replay of the master's eviction policy needs.
type masterStore struct {
	m      *master.Master
	clk    *tickClock
	t0     time.Time
	client string
	bb     int
}

var _ Store = (*masterStore)(nil)

func newMasterStore(t testing.TB, capBlocks, blockBytes int, cfg master.Config) *masterStore {
	t.Helper()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := &tickClock{}
	clk.base.Store(t0.UnixNano())
	cfg.Clock = clk
	m, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.MountSegment(context.Background(), "c1", master.Segment{Name: "dram", Endpoint: "c1:1", Size: uint64(capBlocks * blockBytes)}); err != nil {
		t.Fatal(err)
	}
	return &masterStore{m: m, clk: clk, t0: t0, client: "c1", bb: blockBytes}
}

func (s *masterStore) setTrace(ms int64) {
	s.clk.base.Store(s.t0.Add(time.Duration(ms) * time.Millisecond).UnixNano())
	s.clk.ticks.Store(0)
}

// tickClock is the trace's clock as a real store sees it at high speed:
// the trace time of the current request plus one nanosecond per reading, so
// successive operations within a request are ordered as on a wall clock
// (a stopped fake clock would make every block of a request tie).
type tickClock struct {
	base  atomic.Int64 // unix ns of the current request's trace time
	ticks atomic.Int64 // readings since
}

var _ clock.Clock = (*tickClock)(nil)

func (c *tickClock) Now() time.Time { return time.Unix(0, c.base.Load()+c.ticks.Add(1)) }

func (s *masterStore) BatchExist(ctx context.Context, keys []string) ([]bool, error) {
	ok, errs := s.m.BatchExist(ctx, "", keys)
	for _, e := range errs {
		if e != nil {
			return nil, e
		}
	}
	return ok, nil
}

func (s *masterStore) BatchGet(ctx context.Context, keys []string) ([][]byte, []error) {
	res := s.m.BatchGetReplicaList(ctx, s.client, "", keys)
	vals, errs := make([][]byte, len(keys)), make([]error, len(keys))
	for i, r := range res {
		if r.Err != nil {
			errs[i] = r.Err
			continue
		}
		id, err := strconv.ParseInt(keys[i][4:], 10, 64)
		if err != nil {
			errs[i] = err
			continue
		}
		vals[i] = make([]byte, s.bb)
		FillPayload(id, vals[i])
	}
	return vals, errs
}

func (s *masterStore) BatchPut(ctx context.Context, keys []string, values [][]byte) []error {
	reqs := make([]master.PutRequest, len(keys))
	for i, k := range keys {
		reqs[i] = master.PutRequest{Key: k, Size: uint64(len(values[i])), Config: master.PutConfig{Replicas: 1}}
	}
	res := s.m.BatchPutStart(ctx, s.client, "", reqs)
	errs := make([]error, len(keys))
	var started []string
	var at []int
	for i, r := range res {
		switch {
		case kverr.CodeOf(r.Err) == kverr.ObjectAlreadyExists:
		case r.Err != nil:
			errs[i] = r.Err
		default:
			started = append(started, keys[i])
			at = append(at, i)
		}
	}
	for j, e := range s.m.BatchPutEnd(ctx, s.client, "", started) {
		errs[at[j]] = e
	}
	s.m.EvictNow(ctx) // the background evictor, run after every request
	return errs
}

func (s *masterStore) evictions(ctx context.Context) (int64, error) {
	return int64(s.m.Stats(ctx).Counters["evictions"]), nil
}

// TestMasterAgreesWithSimulate replays trace samples through the master's
// own eviction code (in process, on a clock at trace time) and compares the
// prefix-hit rate with Simulate: the simulator must model the master. They
// differ only in tie-breaking and in when a pass runs (after each request
// here, after each insert in the simulator), so they agree within 0.01.
func TestMasterAgreesWithSimulate(t *testing.T) {
	conv, syn := traces(t)
	n := map[*Trace]int{conv: 2500, syn: 1000}
	if testing.Short() {
		n = map[*Trace]int{conv: 1500, syn: 600}
	}
	for _, c := range []struct {
		tr     *Trace
		cap    int
		policy string
	}{{conv, 1000, PolicyFrequency}, {conv, 1000, PolicyPlain}, {syn, 1000, PolicyFrequency}, {syn, 1000, PolicyPlain}} {
		sample := &Trace{Name: "sample", Records: c.tr.Records[:n[c.tr]]}
		st := newMasterStore(t, c.cap, 64, master.Config{LeasePolicy: c.policy})
		rep, err := Run(context.Background(), sample, Options{BlockBytes: 64, Window: -1, Evictions: st.evictions,
			BeforeRequest: func(_ int, rec *Record) { st.setTrace(rec.Timestamp) }}, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		sim, err := Simulate(sample, SimOptions{CapacityBlocks: c.cap, Policy: c.policy, Window: -1})
		if err != nil {
			t.Fatal(err)
		}
		g, w := rep.Total, sim.Total
		t.Logf("%s %d records, %d blocks, %s: master %.4f, simulate %.4f; evictions %d, %d",
			c.tr.Name, len(sample.Records), c.cap, c.policy, g.PrefixHitRate, w.PrefixHitRate, g.Evictions, w.Evictions)
		if d := g.PrefixHitRate - w.PrefixHitRate; d > 0.01 || d < -0.01 || w.Evictions == 0 {
			t.Errorf("%s/%s: master %.4f, simulate %.4f (evictions %d)", c.tr.Name, c.policy, g.PrefixHitRate, w.PrefixHitRate, w.Evictions)
		}
		if d := float64(g.Evictions-w.Evictions) / float64(w.Evictions); d > 0.02 || d < -0.02 {
			t.Errorf("%s/%s: master evicted %d, simulate %d", c.tr.Name, c.policy, g.Evictions, w.Evictions)
		}
		if g.ReadErrors != 0 || g.BadPayloads != 0 || g.PutsRejected != 0 {
			t.Errorf("read errors %d, bad payloads %d, puts rejected %d", g.ReadErrors, g.BadPayloads, g.PutsRejected)
		}
		if err := st.m.CheckInvariants(); err != nil {
			t.Error(err)
		}
	}
}

// TestMasterDefaultPolicyTarget is the acceptance figure through the
// master's eviction code: the default policy on conversation_trace at 5,000
// blocks reaches 0.16 (plain: 0.093 in the simulator, which agrees with the
// master for plain within 0.002 on this trace).
func TestMasterDefaultPolicyTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: a full-trace replay through the master")
	}
	conv, _ := traces(t)
	st := newMasterStore(t, 5000, 64, master.Config{})
	rep, err := Run(context.Background(), conv, Options{BlockBytes: 64, Window: -1,
		BeforeRequest: func(_ int, rec *Record) { st.setTrace(rec.Timestamp) }}, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Simulate(conv, SimOptions{CapacityBlocks: 5000, Policy: PolicyPlain, Window: -1})
	if err != nil {
		t.Fatal(err)
	}
	f, p := rep.Total.PrefixHitRate, plain.Total.PrefixHitRate
	t.Logf("conversation at 5,000 blocks through the master: default %.4f (plain simulated %.4f)", f, p)
	if f < 0.16 || f <= p {
		t.Errorf("default policy %.4f: want >= 0.16 and above plain %.4f", f, p)
	}
}

// TestMasterDefaultNotBelowPlainOnSynthetic is the other acceptance
// figure through the master's eviction code, at the capacities where the
// cache turns over fastest (a lifetime of ~10 s): the default policy is not
// below plain on synthetic_trace at 1,000 blocks (before the lifetime bound
// it was: 0.0742 vs 0.0752; 0.1039 vs 0.1063 at 1,500, not run here to
// keep the package's -race time down).
func TestMasterDefaultNotBelowPlainOnSynthetic(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: two full-trace replays through the master")
	}
	_, syn := traces(t)
	for _, c := range []int{1000} {
		rate := map[string]float64{}
		for _, pol := range []string{PolicyPlain, PolicyFrequency} {
			st := newMasterStore(t, c, 64, master.Config{LeasePolicy: pol})
			rep, err := Run(context.Background(), syn, Options{BlockBytes: 64, Window: -1,
				BeforeRequest: func(_ int, rec *Record) { st.setTrace(rec.Timestamp) }}, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			rate[pol] = rep.Total.PrefixHitRate
		}
		t.Logf("synthetic at %d blocks through the master: plain %.4f, default %.4f", c, rate[PolicyPlain], rate[PolicyFrequency])
		if rate[PolicyFrequency] < rate[PolicyPlain] {
			t.Errorf("at %d blocks: default %.4f below plain %.4f", c, rate[PolicyFrequency], rate[PolicyPlain])
		}
	}
}
