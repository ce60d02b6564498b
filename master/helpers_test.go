package master

import (
	"context"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/clock"
	"github.com/kvtier/kvtier/kverr"
)

var ctx = context.Background()

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newTest returns a master on a fake clock; invariants are checked at cleanup.
func newTest(t testing.TB, cfg Config) (*Master, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake(t0)
	cfg.Clock = fc
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := m.CheckInvariants(); err != nil {
			t.Errorf("invariants at cleanup: %v", err)
		}
	})
	return m, fc
}

func mountMem(t testing.TB, m *Master, client, name string, size uint64) {
	t.Helper()
	if err := m.MountSegment(ctx, client, Segment{Name: name, Endpoint: client + ":1", Size: size}); err != nil {
		t.Fatalf("mount %s: %v", name, err)
	}
}

func putReq(client, key string, size uint64) PutRequest {
	return PutRequest{Client: client, Key: key, Size: size, Config: PutConfig{Replicas: 1}}
}

// put stores key completely (PutStart + PutEnd) and returns its replicas.
func put(t testing.TB, m *Master, client, key string, size uint64) []Replica {
	t.Helper()
	return putCfg(t, m, client, key, size, PutConfig{Replicas: 1})
}

func putCfg(t testing.TB, m *Master, client, key string, size uint64, pc PutConfig) []Replica {
	t.Helper()
	reps, err := m.PutStart(ctx, PutRequest{Client: client, Key: key, Size: size, Config: pc})
	if err != nil {
		t.Fatalf("PutStart %s: %v", key, err)
	}
	if err := m.PutEnd(ctx, client, "", key); err != nil {
		t.Fatalf("PutEnd %s: %v", key, err)
	}
	return reps
}

func wantCode(t testing.TB, err error, c kverr.Code) {
	t.Helper()
	if kverr.CodeOf(err) != c {
		t.Fatalf("got %v (code %v), want %v", err, kverr.CodeOf(err), c)
	}
}

func ctrOf(m *Master, name string) uint64 { return m.Stats(ctx).Counters[name] }

func exists(t testing.TB, m *Master, key string) bool {
	t.Helper()
	ok, err := m.Exist(ctx, "", key)
	if err != nil {
		t.Fatalf("Exist %s: %v", key, err)
	}
	return ok
}

func segUsed(m *Master, name string) uint64 {
	for _, s := range m.ListSegments(ctx) {
		if s.Segment.Name == name {
			return s.Used
		}
	}
	return 1<<64 - 1
}

func segState(m *Master, name string) SegmentState {
	for _, s := range m.ListSegments(ctx) {
		if s.Segment.Name == name {
			return s.State
		}
	}
	return 0
}

func checkInv(t testing.TB, m *Master) {
	t.Helper()
	if err := m.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func contextWithCancel() (context.Context, context.CancelFunc) { return context.WithCancel(ctx) }

// diskNodeGone makes appliance A hold key on its SSD only, mounts B's
// memory, and lets A fall silent past TTL and grace (B beats) until the
// reaper declares it gone: key is no longer listed.
func diskNodeGone(t *testing.T, m *Master, fc *clock.Fake, key string) {
	t.Helper()
	diskAppliance(t, m, diskObj(key, 1, 0))
	mountMem(t, m, "B", "B/0", 1<<20)
	fc.Advance(DefaultClientTTL + DefaultClientGrace + time.Second)
	m.Heartbeat(ctx, HeartbeatRequest{Client: "B", Endpoint: "B:1"})
	m.Reap(ctx)
	if exists(t, m, key) {
		t.Fatalf("the gone appliance's disk-only object %s is still listed", key)
	}
}
