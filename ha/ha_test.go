package ha

import (
	"context"
	"errors"
	"fmt"
	"github.com/kvtier/kvtier/ha/hatest"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvtier/kvtier/internal/clock"
	"github.com/kvtier/kvtier/kverr"
)

// testTTL is the session TTL used by tests: etcd's minimum with its default
// raft timing (100 ms tick, 1 s election) is 2 s.
const testTTL = 2 * time.Second

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startEtcd runs a real single-member etcd server on loopback ports with its
// data in a temp dir, and returns its client endpoint and an idempotent stop.
func startEtcd(t *testing.T) (stop func(), endpoint string) { return hatest.StartEtcd(t) }

func testConfig(ep, name string) Config {
	return Config{
		Endpoints:   []string{ep},
		Name:        name,
		Advertise:   "127.0.0.1:" + name,
		Prefix:      "/kvtier/test/master",
		SessionTTL:  testTTL,
		DialTimeout: 2 * time.Second,
	}
}

func mustCampaign(t *testing.T, cfg Config) *Leadership {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := Campaign(ctx, cfg)
	if err != nil {
		t.Fatalf("Campaign(%s): %v", cfg.Name, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func assertLeader(t *testing.T, ep, prefix, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := Leader(ctx, []string{ep}, prefix)
	if err != nil {
		t.Fatalf("Leader: %v", err)
	}
	if got != want {
		t.Fatalf("Leader = %q, want %q", got, want)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string, limit time.Duration) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(limit):
		t.Fatalf("%s not closed after %s", what, limit)
	}
}

// candidates counts the keys under prefix: one per live campaigning master.
func candidates(t *testing.T, ep, prefix string) int64 {
	t.Helper()
	cli, err := dial(context.Background(), []string{ep}, 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer cli.Close()
	resp, err := cli.Get(context.Background(), prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("count: %v", err)
	}
	return resp.Count
}

// waitCandidates polls until n keys are under prefix (the standby has put
// its key and is blocked waiting).
func waitCandidates(t *testing.T, ep, prefix string, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for candidates(t, ep, prefix) != n {
		if time.Now().After(deadline) {
			t.Fatalf("never saw %d candidates under %s", n, prefix)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type result struct {
	l   *Leadership
	err error
}

// campaignAsync starts a standby's Campaign and returns its result channel.
func campaignAsync(t *testing.T, ctx context.Context, cfg Config) <-chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := Campaign(ctx, cfg)
		ch <- result{l, err}
	}()
	t.Cleanup(func() {
		select {
		case r := <-ch:
			if r.l != nil {
				r.l.Close()
			}
		default:
		}
	})
	return ch
}

func TestSingleCandidateBecomesLeader(t *testing.T) {
	_, ep := startEtcd(t)
	cfg := testConfig(ep, "a")
	assertLeader(t, ep, cfg.Prefix, "")
	a := mustCampaign(t, cfg)
	if a.Epoch() <= 0 || !strings.HasPrefix(a.Key(), cfg.Prefix+"/") {
		t.Fatalf("key %q epoch %d", a.Key(), a.Epoch())
	}
	if isClosed(a.Lost()) {
		t.Fatal("Lost closed right after election")
	}
	assertLeader(t, ep, cfg.Prefix, cfg.Advertise)
	// Another prefix is another election.
	assertLeader(t, ep, "/other", "")

	if err := a.Resign(context.Background()); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	if !isClosed(a.Lost()) {
		t.Fatal("Lost not closed after Resign")
	}
	assertLeader(t, ep, cfg.Prefix, "")
	if err := a.Resign(context.Background()); err != nil {
		t.Fatalf("second Resign: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestStandbyBlocksUntilResign(t *testing.T) {
	_, ep := startEtcd(t)
	a := mustCampaign(t, testConfig(ep, "a"))
	cfgB := testConfig(ep, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bc := campaignAsync(t, ctx, cfgB)

	waitCandidates(t, ep, cfgB.Prefix, 2)
	if isClosed(a.Lost()) {
		t.Fatal("leader's Lost closed while still leader (after its Campaign ctx ended)")
	}
	select {
	case r := <-bc:
		t.Fatalf("standby returned while leader alive: %+v", r)
	default:
	}
	assertLeader(t, ep, cfgB.Prefix, "127.0.0.1:a")

	if err := a.Resign(context.Background()); err != nil {
		t.Fatalf("Resign: %v", err)
	}
	r := <-bc
	if r.err != nil {
		t.Fatalf("standby Campaign: %v", r.err)
	}
	defer r.l.Close()
	if r.l.Epoch() <= a.Epoch() {
		t.Fatalf("new epoch %d not above old %d", r.l.Epoch(), a.Epoch())
	}
	assertLeader(t, ep, cfgB.Prefix, cfgB.Advertise)
	if isClosed(r.l.Lost()) {
		t.Fatal("new leader's Lost closed")
	}
}

func TestRevokedLeaseFailsOver(t *testing.T) {
	_, ep := startEtcd(t)
	a := mustCampaign(t, testConfig(ep, "a"))
	cfgB := testConfig(ep, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bc := campaignAsync(t, ctx, cfgB)
	waitCandidates(t, ep, cfgB.Prefix, 2)

	// An operator (or etcd itself on expiry) revokes the leader's lease.
	cli, err := dial(context.Background(), []string{ep}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Revoke(context.Background(), a.sess.Lease()); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	waitClosed(t, a.Lost(), "old leader's Lost", 2*testTTL+10*time.Second)
	r := <-bc
	if r.err != nil {
		t.Fatalf("standby Campaign: %v", r.err)
	}
	defer r.l.Close()
	assertLeader(t, ep, cfgB.Prefix, cfgB.Advertise)
}

func TestDeadClientFailsOverAfterTTL(t *testing.T) {
	_, ep := startEtcd(t)
	a := mustCampaign(t, testConfig(ep, "a"))
	cfgB := testConfig(ep, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bc := campaignAsync(t, ctx, cfgB)
	waitCandidates(t, ep, cfgB.Prefix, 2)

	// The leader's process "dies": its etcd client goes away without a
	// resign, so its key lives until the lease TTL runs out.
	start := time.Now()
	a.cli.Close()
	waitClosed(t, a.Lost(), "dead leader's Lost", 2*testTTL+10*time.Second)
	r := <-bc
	if r.err != nil {
		t.Fatalf("standby Campaign: %v", r.err)
	}
	defer r.l.Close()
	t.Logf("failover after client death took %s (TTL %s)", time.Since(start), testTTL)
	assertLeader(t, ep, cfgB.Prefix, cfgB.Advertise)
	if err := a.Close(); err == nil {
		t.Log("Close after client death returned nil")
	}
}

func TestEtcdGoneLosesLeadership(t *testing.T) {
	stopEtcd, ep := startEtcd(t)
	a := mustCampaign(t, testConfig(ep, "a"))
	start := time.Now()
	go stopEtcd() // graceful shutdown takes seconds; the member is gone at once
	waitClosed(t, a.Lost(), "Lost after etcd stopped", 2*testTTL+20*time.Second)
	t.Logf("Lost %s after stopping etcd (TTL %s)", time.Since(start), testTTL)
	start = time.Now()
	err := a.Close() // bounded by DialTimeout even with etcd down
	t.Logf("Close with etcd down: %v after %s", err, time.Since(start))
}

func TestCancelledCampaignLeavesNoKey(t *testing.T) {
	_, ep := startEtcd(t)
	a := mustCampaign(t, testConfig(ep, "a"))
	cfgB := testConfig(ep, "b")
	ctx, cancel := context.WithCancel(context.Background())
	bc := campaignAsync(t, ctx, cfgB)
	waitCandidates(t, ep, cfgB.Prefix, 2)
	cancel()
	r := <-bc
	if !errors.Is(r.err, context.Canceled) || r.l != nil {
		t.Fatalf("cancelled Campaign = %v, %v; want context.Canceled", r.l, r.err)
	}
	if n := candidates(t, ep, cfgB.Prefix); n != 1 {
		t.Fatalf("%d candidates after cancel, want 1", n)
	}
	if isClosed(a.Lost()) {
		t.Fatal("leader lost leadership because a standby gave up")
	}
	assertLeader(t, ep, cfgB.Prefix, "127.0.0.1:a")
}

func TestBadConfigRefused(t *testing.T) {
	good := Config{Endpoints: []string{"http://127.0.0.1:1"}, Name: "m", Advertise: "127.0.0.1:5000"}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config refused: %v", err)
	}
	cases := map[string]func(*Config){
		"no endpoints":    func(c *Config) { c.Endpoints = nil },
		"blank endpoint":  func(c *Config) { c.Endpoints = []string{" "} },
		"empty name":      func(c *Config) { c.Name = "" },
		"empty advertise": func(c *Config) { c.Advertise = "" },
		"relative prefix": func(c *Config) { c.Prefix = "kvtier" },
		"trailing slash":  func(c *Config) { c.Prefix = "/kvtier/" },
		"negative ttl":    func(c *Config) { c.SessionTTL = -time.Second },
		"negative dial":   func(c *Config) { c.DialTimeout = -time.Second },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := good
			cfg.Endpoints = append([]string(nil), good.Endpoints...)
			mutate(&cfg)
			if err := cfg.Validate(); !kverr.Is(err, kverr.InvalidParams) {
				t.Fatalf("Validate = %v, want INVALID_PARAMS", err)
			}
			l, err := Campaign(context.Background(), cfg)
			if l != nil || !kverr.Is(err, kverr.InvalidParams) {
				t.Fatalf("Campaign = %v, %v, want INVALID_PARAMS", l, err)
			}
		})
	}
	if _, err := Leader(context.Background(), nil, ""); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("Leader(no endpoints) = %v", err)
	}
	if _, err := Leader(context.Background(), []string{"http://127.0.0.1:1"}, "x/"); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("Leader(bad prefix) = %v", err)
	}
}

func TestUnreachableEtcdClearError(t *testing.T) {
	ep := fmt.Sprintf("http://127.0.0.1:%d", freePort(t)) // nothing listens
	cfg := testConfig(ep, "a")
	cfg.DialTimeout = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := Campaign(ctx, cfg)
	if l != nil || err == nil {
		t.Fatalf("Campaign against nothing = %v, %v", l, err)
	}
	if !kverr.Is(err, kverr.RPCFail) || !strings.Contains(err.Error(), ep) ||
		!strings.Contains(err.Error(), "unreachable within 300ms") {
		t.Fatalf("unclear error: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("gave up only at the caller's deadline, not at DialTimeout")
	}
	_, err = Leader(ctx, []string{ep}, "")
	if !kverr.Is(err, kverr.RPCFail) || !strings.Contains(err.Error(), ep) {
		t.Fatalf("Leader against nothing: %v", err)
	}
}

func TestRefreshOverdue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ttl := 3 * time.Second
	for _, c := range []struct {
		since time.Duration
		want  bool
	}{{0, false}, {time.Second, false}, {2*time.Second - 1, false}, {2 * time.Second, true}, {time.Minute, true}} {
		if got := refreshOverdue(t0.Add(c.since), t0, ttl); got != c.want {
			t.Errorf("refreshOverdue(+%s, ttl %s) = %v, want %v", c.since, ttl, got, c.want)
		}
	}
}

// TestStaleRefreshLosesLeadershipEarly drives the leader's clock forward
// (a fake clock: the one way to make refreshes look late while etcd is
// healthy) and checks the leader steps down on its own, before etcd would
// expire its lease.
func TestStaleRefreshLosesLeadershipEarly(t *testing.T) {
	_, ep := startEtcd(t)
	fake := clock.NewFake(time.Unix(1_000_000, 0))
	cfg := testConfig(ep, "a")
	cfg.Clock = fake
	a := mustCampaign(t, cfg)
	deadline := time.Now().Add(20 * time.Second)
	for !isClosed(a.Lost()) {
		if time.Now().After(deadline) {
			t.Fatal("Lost never closed although refreshes looked a TTL late")
		}
		// A refresh landing between Advance and the monitor's tick resets
		// the reference, so keep advancing until a tick sees the gap.
		fake.Advance(a.ttl)
		time.Sleep(a.ttl / 10)
	}
	// etcd still holds the key: the leader stepped down first.
	if n := candidates(t, ep, cfg.Prefix); n != 1 {
		t.Fatalf("%d keys under prefix after early step-down, want the lease still alive (1)", n)
	}
}

func TestTTLSeconds(t *testing.T) {
	for in, want := range map[time.Duration]int{
		time.Nanosecond: 1, time.Second: 1, 1500 * time.Millisecond: 2, 5 * time.Second: 5,
	} {
		if got := ttlSeconds(in); got != want {
			t.Errorf("ttlSeconds(%s) = %d, want %d", in, got, want)
		}
	}
}

// FuzzConfigValidate checks Validate never panics and that what it accepts
// has the required fields and a well-formed prefix.
func FuzzConfigValidate(f *testing.F) {
	f.Add("http://127.0.0.1:2379", "m1", "127.0.0.1:5000", "", int64(0), int64(0))
	f.Add("", "", "", "/", int64(-1), int64(-1))
	f.Add("x", "n", "a", "/kvtier/master", int64(time.Second), int64(time.Second))
	f.Fuzz(func(t *testing.T, ep, name, adv, prefix string, ttl, dial int64) {
		var eps []string
		if ep != "" {
			eps = strings.Split(ep, ",")
		}
		cfg := Config{Endpoints: eps, Name: name, Advertise: adv, Prefix: prefix,
			SessionTTL: time.Duration(ttl), DialTimeout: time.Duration(dial)}
		err := cfg.Validate()
		if err != nil {
			if !kverr.Is(err, kverr.InvalidParams) {
				t.Fatalf("Validate error without INVALID_PARAMS: %v", err)
			}
			return
		}
		d := cfg.withDefaults()
		if len(d.Endpoints) == 0 || strings.TrimSpace(d.Name) == "" || strings.TrimSpace(d.Advertise) == "" ||
			!strings.HasPrefix(d.Prefix, "/") || strings.HasSuffix(d.Prefix, "/") ||
			d.SessionTTL <= 0 || d.DialTimeout <= 0 || d.Logger == nil {
			t.Fatalf("accepted bad config: %+v", d)
		}
	})
}
