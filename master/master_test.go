package master

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

func TestPutVisibleOnlyAfterPutEnd(t *testing.T) {
	m, fc := newTest(t, Config{})
	mountMem(t, m, "a", "a/0", 1<<20)
	reps, err := m.PutStart(ctx, PutRequest{Client: "w", Key: "k", Size: 100, CRC32C: 7, HasChecksum: true, Config: PutConfig{Replicas: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 1 || reps[0].State != Processing || reps[0].Type != Memory || reps[0].Segment != "a/0" || reps[0].Endpoint != "a:1" || reps[0].Length != 100 {
		t.Fatalf("replicas %+v", reps)
	}
	if reps[0].Offset%memoryAlign != 0 {
		t.Fatalf("offset %d not 64-aligned", reps[0].Offset)
	}
	_, err = m.GetReplicaList(ctx, "r", "", "k")
	wantCode(t, err, kverr.ReplicaIsNotReady)
	if exists(t, m, "k") {
		t.Fatal("Exist true before PutEnd")
	}
	if err := m.PutEnd(ctx, "w", "", "k"); err != nil {
		t.Fatal(err)
	}
	info, _ := m.GetObject(ctx, "", "k")
	if !info.LeaseDeadline.IsZero() {
		t.Fatalf("PutEnd granted a lease: %v", info.LeaseDeadline)
	}
	fc.Advance(time.Second)
	l, err := m.GetReplicaList(ctx, "r", "", "k")
	if err != nil {
		t.Fatal(err)
	}
	if l.Size != 100 || l.CRC32C != 7 || !l.HasChecksum || len(l.Replicas) != 1 || l.Replicas[0].State != Complete {
		t.Fatalf("list %+v", l)
	}
	if want := t0.Add(time.Second + DefaultLeaseTTL); !l.LeaseDeadline.Equal(want) {
		t.Fatalf("lease deadline %v want %v", l.LeaseDeadline, want)
	}
	_, err = m.GetReplicaList(ctx, "r", "", "missing")
	wantCode(t, err, kverr.ObjectNotFound)
}

// longTTL keeps mount-only clients alive across large fake-clock jumps.
var longTTL = Config{ClientTTL: 1000 * time.Hour}

func TestPutStartExistingKey(t *testing.T) {
	m, fc := newTest(t, longTTL)
	mountMem(t, m, "a", "a/0", 1<<20)
	put(t, m, "w1", "done", 100)
	_, err := m.PutStart(ctx, putReq("w2", "done", 100))
	wantCode(t, err, kverr.ObjectAlreadyExists)
	_, err = m.PutStart(ctx, putReq("w2", "done", 200))
	wantCode(t, err, kverr.ObjectAlreadyExists)
	if !strings.Contains(err.Error(), "different size") {
		t.Fatalf("reason missing: %v", err)
	}
	if _, err := m.PutStart(ctx, putReq("w1", "fly", 1000)); err != nil {
		t.Fatal(err)
	}
	used := segUsed(m, "a/0")
	fc.Advance(DefaultPutDiscardTimeout - time.Millisecond)
	_, err = m.PutStart(ctx, putReq("w2", "fly", 1000))
	wantCode(t, err, kverr.ObjectAlreadyExists)
	if got := ctrOf(m, "puts_already_exists"); got != 3 {
		t.Fatalf("puts_already_exists=%d", got)
	}
	fc.Advance(time.Millisecond)
	// Takeover: the new writer gets fresh space; the old reservation stays.
	if _, err := m.PutStart(ctx, putReq("w2", "fly", 1000)); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	if got := segUsed(m, "a/0"); got != used+1024 {
		t.Fatalf("used %d after takeover, want %d (old reservation kept)", got, used+1024)
	}
	wantCode(t, m.PutEnd(ctx, "w1", "", "fly"), kverr.IllegalClient)
	if err := m.PutEnd(ctx, "w2", "", "fly"); err != nil {
		t.Fatal(err)
	}
	checkInv(t, m)
	fc.Set(t0.Add(DefaultPutReleaseTimeout - time.Second))
	m.Reap(ctx)
	if got := segUsed(m, "a/0"); got != used+1024 {
		t.Fatalf("reservation freed before the release timeout: used %d", got)
	}
	fc.Set(t0.Add(DefaultPutReleaseTimeout))
	m.Reap(ctx)
	if got := segUsed(m, "a/0"); got != used {
		t.Fatalf("used %d after release, want %d", got, used)
	}
}

func TestAbandonedPutReclaimed(t *testing.T) {
	m, fc := newTest(t, longTTL)
	mountMem(t, m, "a", "a/0", 1<<20)
	if _, err := m.PutStart(ctx, putReq("dead", "k", 500)); err != nil {
		t.Fatal(err)
	}
	fc.Advance(DefaultPutReleaseTimeout - time.Nanosecond)
	m.Reap(ctx)
	if _, err := m.GetObject(ctx, "", "k"); err != nil {
		t.Fatalf("reclaimed too early: %v", err)
	}
	fc.Advance(time.Nanosecond)
	m.Reap(ctx)
	if _, err := m.GetObject(ctx, "", "k"); !kverr.Is(err, kverr.ObjectNotFound) {
		t.Fatalf("not reclaimed: %v", err)
	}
	if segUsed(m, "a/0") != 0 || ctrOf(m, "abandoned_puts_reclaimed") != 1 {
		t.Fatalf("used %d reclaimed %d", segUsed(m, "a/0"), ctrOf(m, "abandoned_puts_reclaimed"))
	}
	put(t, m, "new", "k", 500) // writable again
}

func TestQuotaAndObjectCount(t *testing.T) {
	m, _ := newTest(t, Config{TenantQuota: map[string]uint64{"small": 1000}, MaxObjects: 3})
	mountMem(t, m, "a", "a/0", 1<<20)
	if _, err := m.PutStart(ctx, PutRequest{Client: "w", Tenant: "small", Key: "x", Size: 800, Config: PutConfig{Replicas: 1}}); err != nil {
		t.Fatal(err)
	}
	_, err := m.PutStart(ctx, PutRequest{Client: "w", Tenant: "small", Key: "y", Size: 300, Config: PutConfig{Replicas: 1}})
	wantCode(t, err, kverr.QuotaExceeded)
	if _, err := m.PutStart(ctx, PutRequest{Client: "w", Tenant: "big", Key: "y", Size: 300, Config: PutConfig{Replicas: 1}}); err != nil {
		t.Fatalf("other tenant: %v", err)
	}
	if err := m.PutRevoke(ctx, "w", "small", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PutStart(ctx, PutRequest{Client: "w", Tenant: "small", Key: "y", Size: 300, Config: PutConfig{Replicas: 1}}); err != nil {
		t.Fatalf("after revoke: %v", err)
	}
	if _, err := m.PutStart(ctx, putReq("w", "z", 10)); err != nil {
		t.Fatal(err)
	}
	_, err = m.PutStart(ctx, putReq("w", "zz", 10))
	wantCode(t, err, kverr.ObjectCountExceeded)
	if ctrOf(m, "puts_rejected_quota") != 1 || ctrOf(m, "puts_rejected_object_count") != 1 {
		t.Fatalf("counters %v", m.Stats(ctx).Counters)
	}
	if m.Stats(ctx).Objects != 3 {
		t.Fatalf("objects %d", m.Stats(ctx).Objects)
	}
}

func TestReplicaPlacement(t *testing.T) {
	m, _ := newTest(t, Config{})
	mountMem(t, m, "A", "A/0", 1<<20)
	mountMem(t, m, "A", "A/1", 1<<20)
	mountMem(t, m, "B", "B/0", 1<<20)
	reps := putCfg(t, m, "w", "two", 100, PutConfig{Replicas: 2})
	if len(reps) != 2 || reps[0].Node == reps[1].Node {
		t.Fatalf("two replicas not on distinct nodes: %+v", reps)
	}
	reps = putCfg(t, m, "w", "three", 100, PutConfig{Replicas: 3})
	segs := map[string]bool{}
	for _, r := range reps {
		segs[r.Segment] = true
	}
	if len(reps) != 3 || len(segs) != 3 {
		t.Fatalf("three replicas not on distinct segments: %+v", reps)
	}
	reps = putCfg(t, m, "w", "four", 100, PutConfig{Replicas: 4})
	if len(reps) != 3 || ctrOf(m, "puts_partial_alloc") != 1 {
		t.Fatalf("partial: %d replicas, counter %d", len(reps), ctrOf(m, "puts_partial_alloc"))
	}
	reps = putCfg(t, m, "w", "pref", 100, PutConfig{Replicas: 1, PreferredSegment: "A/1"})
	if reps[0].Segment != "A/1" {
		t.Fatalf("preferred segment ignored: %+v", reps)
	}
	_, err := m.PutStart(ctx, PutRequest{Client: "w", Key: "p2", Size: 100, Config: PutConfig{Replicas: 1, PreferredSegment: "nope"}})
	wantCode(t, err, kverr.SegmentNotFound)
	// Preferred but full: placed elsewhere.
	mountMem(t, m, "C", "C/small", 128)
	reps = putCfg(t, m, "w", "p3", 1000, PutConfig{Replicas: 1, PreferredSegment: "C/small"})
	if reps[0].Segment == "C/small" {
		t.Fatal("placed on a segment without room")
	}
	_, err = m.PutStart(ctx, putReq("w", "huge", 10<<20))
	wantCode(t, err, kverr.NoAvailableHandle)
	if ctrOf(m, "puts_rejected_no_space") != 1 {
		t.Fatal("no-space not counted")
	}
}

func TestPutEndRevokeOnlyWriter(t *testing.T) {
	m, _ := newTest(t, Config{})
	mountMem(t, m, "a", "a/0", 1<<20)
	if _, err := m.PutStart(ctx, putReq("w", "k", 1000)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, m.PutEnd(ctx, "other", "", "k"), kverr.IllegalClient)
	wantCode(t, m.PutRevoke(ctx, "other", "", "k"), kverr.IllegalClient)
	wantCode(t, m.PutEnd(ctx, "w", "", "nokey"), kverr.ObjectNotFound)
	if err := m.PutRevoke(ctx, "w", "", "k"); err != nil {
		t.Fatal(err)
	}
	if segUsed(m, "a/0") != 0 || ctrOf(m, "puts_revoked") != 1 {
		t.Fatal("revoke did not free")
	}
	put(t, m, "w2", "k", 1000)
	wantCode(t, m.PutRevoke(ctx, "w2", "", "k"), kverr.UnavailableInCurrentStatus)
}

func TestLeaseAndRemove(t *testing.T) {
	m, fc := newTest(t, Config{})
	mountMem(t, m, "a", "a/0", 1<<20)
	put(t, m, "w", "fresh", 100)
	if err := m.Remove(ctx, "", "fresh", false); err != nil {
		t.Fatalf("fresh object carries no lease: %v", err)
	}
	put(t, m, "w", "k", 100)
	for i := 0; i < 100; i++ {
		if !exists(t, m, "k") {
			t.Fatal("missing")
		}
	}
	if info, _ := m.GetObject(ctx, "", "k"); info.ReadCount != 0 || !info.LeaseDeadline.IsZero() {
		t.Fatalf("Exist touched the lease: %+v", info)
	}
	if _, err := m.GetReplicaList(ctx, "r", "", "k"); err != nil {
		t.Fatal(err)
	}
	fc.Advance(3 * time.Second)
	if _, err := m.GetReplicaList(ctx, "r", "", "k"); err != nil { // extends to t+8s
		t.Fatal(err)
	}
	fc.Advance(4 * time.Second)
	wantCode(t, m.Remove(ctx, "", "k", false), kverr.ObjectHasLease)
	fc.Advance(time.Second)
	if err := m.Remove(ctx, "", "k", false); err != nil {
		t.Fatalf("lease should have expired: %v", err)
	}
	put(t, m, "w", "k2", 100)
	m.GetReplicaList(ctx, "r", "", "k2")
	wantCode(t, m.Remove(ctx, "", "k2", false), kverr.ObjectHasLease)
	if err := m.Remove(ctx, "", "k2", true); err != nil {
		t.Fatalf("force: %v", err)
	}
	if _, err := m.PutStart(ctx, putReq("w", "inflight", 100)); err != nil {
		t.Fatal(err)
	}
	wantCode(t, m.Remove(ctx, "", "inflight", true), kverr.ReplicaIsNotReady)
	wantCode(t, m.Remove(ctx, "", "nothing", true), kverr.ObjectNotFound)
}

func TestRemoveByRegexAndAll(t *testing.T) {
	m, _ := newTest(t, Config{})
	mountMem(t, m, "a", "a/0", 1<<20)
	for i := 0; i < 10; i++ {
		put(t, m, "w", fmt.Sprintf("x%d", i), 100)
	}
	put(t, m, "w", "y0", 100)
	m.GetReplicaList(ctx, "r", "", "x1") // leased
	if _, err := m.PutStart(ctx, putReq("w", "x99", 100)); err != nil {
		t.Fatal(err)
	}
	_, err := m.RemoveByRegex(ctx, "", "x(", false)
	wantCode(t, err, kverr.InvalidParams)
	n, err := m.RemoveByRegex(ctx, "", "^x", false)
	if err != nil || n != 9 {
		t.Fatalf("removed %d, %v; want 9", n, err)
	}
	n, _ = m.RemoveByRegex(ctx, "", "^x", true)
	if n != 1 {
		t.Fatalf("forced: removed %d, want 1 (in-flight kept)", n)
	}
	if _, err := m.GetObject(ctx, "", "x99"); err != nil {
		t.Fatal("in-flight object removed")
	}
	put(t, m, "w", "other-tenant", 100)
	if _, err := m.PutStart(ctx, PutRequest{Client: "w", Tenant: "t2", Key: "z", Size: 1, Config: PutConfig{Replicas: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := m.PutEnd(ctx, "w", "t2", "z"); err != nil {
		t.Fatal(err)
	}
	n, _ = m.RemoveAll(ctx, "", false)
	if n != 2 {
		t.Fatalf("RemoveAll %d want 2", n)
	}
	if ok, _ := m.Exist(ctx, "t2", "z"); !ok {
		t.Fatal("RemoveAll crossed tenants")
	}
}

func TestTenantsAreSeparate(t *testing.T) {
	m, _ := newTest(t, Config{})
	mountMem(t, m, "a", "a/0", 1<<20)
	put(t, m, "w", "k", 100)
	if ok, _ := m.Exist(ctx, "t2", "k"); ok {
		t.Fatal("key visible in another tenant")
	}
	if ok, _ := m.Exist(ctx, "default", "k"); !ok {
		t.Fatal("empty tenant is not 'default'")
	}
	if _, err := m.PutStart(ctx, PutRequest{Client: "w", Tenant: "t2", Key: "k", Size: 200, Config: PutConfig{Replicas: 1}}); err != nil {
		t.Fatal(err)
	}
}

func TestMountRules(t *testing.T) {
	m, _ := newTest(t, Config{})
	mountMem(t, m, "a", "a/0", 1<<20)
	put(t, m, "w", "k", 100)
	mountMem(t, m, "a", "a/0", 1<<20) // idempotent
	if l, err := m.GetReplicaList(ctx, "r", "", "k"); err != nil || len(l.Replicas) != 1 {
		t.Fatalf("remount lost replicas: %v", err)
	}
	err := m.MountSegment(ctx, "a", Segment{Name: "a/0", Size: 2 << 20})
	wantCode(t, err, kverr.SegmentAlreadyExists)
	err = m.MountSegment(ctx, "b", Segment{Name: "a/0", Size: 1 << 20})
	wantCode(t, err, kverr.SegmentAlreadyExists)
	if s := m.ListSegments(ctx); len(s) != 1 || s[0].Segment.Size != 1<<20 || s[0].Replicas != 1 {
		t.Fatalf("conflicting mount changed state: %+v", s)
	}
	wantCode(t, m.UnmountSegment(ctx, "a", "nope", 0), kverr.SegmentNotFound)
	wantCode(t, m.UnmountSegment(ctx, "b", "a/0", 0), kverr.IllegalClient)
}

func TestUnmountDropsReplicas(t *testing.T) {
	m, _ := newTest(t, Config{})
	mountMem(t, m, "A", "A/0", 1<<20)
	mountMem(t, m, "B", "B/0", 1<<20)
	putCfg(t, m, "w", "both", 100, PutConfig{Replicas: 2})
	putCfg(t, m, "w", "one", 100, PutConfig{Replicas: 1, PreferredSegment: "A/0"})
	if err := m.UnmountSegment(ctx, "A", "A/0", 0); err != nil {
		t.Fatal(err)
	}
	if exists(t, m, "one") {
		t.Fatal("object with no replica left still exists")
	}
	l, err := m.GetReplicaList(ctx, "r", "", "both")
	if err != nil || len(l.Replicas) != 1 || l.Replicas[0].Segment != "B/0" {
		t.Fatalf("surviving replica: %+v %v", l, err)
	}
	if m.Stats(ctx).Objects != 1 {
		t.Fatal("object count")
	}
}

func TestDrainSegment(t *testing.T) {
	m, fc := newTest(t, Config{})
	mountMem(t, m, "A", "A/0", 1<<20)
	mountMem(t, m, "B", "B/0", 1<<20)
	putCfg(t, m, "w", "k", 100, PutConfig{Replicas: 2})
	if err := m.UnmountSegment(ctx, "A", "A/0", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if segState(m, "A/0") != SegDraining {
		t.Fatal("not draining")
	}
	for i := 0; i < 5; i++ {
		r := putCfg(t, m, "w", fmt.Sprintf("n%d", i), 100, PutConfig{Replicas: 2})
		if len(r) != 1 || r[0].Segment != "B/0" {
			t.Fatalf("allocation on a draining segment: %+v", r)
		}
	}
	l, err := m.GetReplicaList(ctx, "r", "", "k")
	if err != nil || len(l.Replicas) != 2 || l.Replicas[1].Segment != "A/0" {
		t.Fatalf("draining replica must be served, listed last: %+v", l.Replicas)
	}
	// Heartbeats re-announcing the segment do not undo the drain.
	m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Segments: []Segment{{Name: "A/0", Size: 1 << 20}}})
	fc.Advance(10 * time.Second)
	m.Reap(ctx)
	if segState(m, "A/0") != 0 {
		t.Fatal("drained segment still mounted")
	}
	m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Segments: []Segment{{Name: "A/0", Size: 1 << 20}}})
	if segState(m, "A/0") != 0 {
		t.Fatal("heartbeat remounted a drained segment")
	}
	l, _ = m.GetReplicaList(ctx, "r", "", "k")
	if len(l.Replicas) != 1 {
		t.Fatalf("replicas %+v", l.Replicas)
	}
	mountMem(t, m, "A", "A/0", 1<<20) // explicit mount brings it back
}

func TestClientGraceAndGone(t *testing.T) {
	m, fc := newTest(t, Config{})
	hb := func(id string, segs ...Segment) HeartbeatReply {
		r, err := m.Heartbeat(ctx, HeartbeatRequest{Client: id, Endpoint: id + ":1", Segments: segs})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	segA := Segment{Name: "A/0", Size: 1 << 20, Endpoint: "A:1"}
	if r := hb("A", segA); r.Known {
		t.Fatal("first beat reported known")
	}
	mountMem(t, m, "B", "B/0", 1<<20)
	putCfg(t, m, "w", "k", 100, PutConfig{Replicas: 2})
	putCfg(t, m, "w", "onlyA", 100, PutConfig{Replicas: 1, PreferredSegment: "A/0"})
	if _, err := m.PutStart(ctx, PutRequest{Client: "A", Key: "inflight", Size: 100, Config: PutConfig{Replicas: 1, PreferredSegment: "B/0"}}); err != nil {
		t.Fatal(err)
	}
	fc.Advance(DefaultClientTTL + time.Second)
	hb("B")
	m.Reap(ctx)
	if segState(m, "A/0") != SegGrace {
		t.Fatalf("state %v want GRACE", segState(m, "A/0"))
	}
	r := putCfg(t, m, "w", "new", 100, PutConfig{Replicas: 1, PreferredSegment: "A/0"})
	if r[0].Segment != "B/0" {
		t.Fatal("allocated on a GRACE segment")
	}
	// A suspect node's replicas are kept but not handed out: reads use the
	// surviving replica, or miss with the node named.
	l, err := m.GetReplicaList(ctx, "r", "", "k")
	if err != nil || len(l.Replicas) != 1 || l.Replicas[0].Segment != "B/0" {
		t.Fatalf("GRACE replica handed out: %+v %v", l.Replicas, err)
	}
	if exists(t, m, "onlyA") {
		t.Fatal("exist says yes for an object whose only replica is on a suspect node")
	}
	if _, err := m.GetReplicaList(ctx, "r", "", "onlyA"); !kverr.Is(err, kverr.ObjectNotFound) || !strings.Contains(err.Error(), "A") {
		t.Fatalf("read of a suspect node's only replica: %v", err)
	}
	// Comes back: remount, replicas kept.
	if r := hb("A", segA); !r.Known {
		t.Fatal("known client reported unknown")
	}
	if segState(m, "A/0") != SegMounted || !exists(t, m, "onlyA") {
		t.Fatal("return from grace")
	}
	if l, _ := m.GetReplicaList(ctx, "r", "", "k"); len(l.Replicas) != 2 {
		t.Fatalf("replicas after return from grace: %+v", l.Replicas)
	}
	// Silent past TTL+grace: gone.
	fc.Advance(DefaultClientTTL + DefaultClientGrace + time.Second)
	hb("B")
	m.Reap(ctx)
	if segState(m, "A/0") != 0 || exists(t, m, "onlyA") {
		t.Fatal("gone client's segment not unmounted")
	}
	if _, err := m.GetObject(ctx, "", "inflight"); !kverr.Is(err, kverr.ObjectNotFound) {
		t.Fatalf("gone client's in-flight put not revoked: %v", err)
	}
	if l, _ := m.GetReplicaList(ctx, "r", "", "k"); len(l.Replicas) != 1 {
		t.Fatal("replica on B lost")
	}
	cl := m.ListClients(ctx)
	if len(cl) != 2 || cl[0].ID != "A" || cl[0].State != ClientGone {
		t.Fatalf("clients %+v", cl)
	}
	if r := hb("A", segA); r.Known || segState(m, "A/0") != SegMounted {
		t.Fatal("a gone client that returns is unknown and remounts")
	}
	// An explicit mount also counts as a sign of life.
	fc.Advance(DefaultClientTTL + DefaultClientGrace + time.Second)
	m.Reap(ctx)
	mountMem(t, m, "A", "A/1", 1<<20)
	m.Reap(ctx)
	if segState(m, "A/1") != SegMounted || m.ListClients(ctx)[0].State != ClientLive {
		t.Fatal("mount did not revive the client")
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	m, _ := newTest(t, Config{})
	mountMem(t, m, "a", "a/0", 1<<20)
	if _, err := m.PutStart(ctx, putReq("w", "inflight", 10)); err != nil {
		t.Fatal(err)
	}
	put(t, m, "w", "k", 100)
	key4k := strings.Repeat("k", 4096)
	put(t, m, "w", key4k, 10)
	snapshot := func() string {
		st := m.Stats(ctx)
		return fmt.Sprint(st.Objects, st.Tiers, m.ListSegments(ctx))
	}
	before := snapshot()
	cases := []struct {
		name string
		err  error
		code kverr.Code
	}{
		{"empty key", func() error { _, e := m.PutStart(ctx, putReq("w", "", 10)); return e }(), kverr.InvalidKey},
		{"long key", func() error { _, e := m.PutStart(ctx, putReq("w", key4k+"x", 10)); return e }(), kverr.InvalidKey},
		{"size 0", func() error { _, e := m.PutStart(ctx, putReq("w", "s0", 0)); return e }(), kverr.InvalidParams},
		{"replicas 0", func() error {
			_, e := m.PutStart(ctx, PutRequest{Client: "w", Key: "r0", Size: 1})
			return e
		}(), kverr.InvalidParams},
		{"replicas > max", func() error {
			_, e := m.PutStart(ctx, PutRequest{Client: "w", Key: "r9", Size: 1, Config: PutConfig{Replicas: DefaultMaxReplicas + 1}})
			return e
		}(), kverr.InvalidParams},
		{"unknown segment", func() error {
			_, e := m.PutStart(ctx, PutRequest{Client: "w", Key: "u", Size: 1, Config: PutConfig{Replicas: 1, PreferredSegment: "zz"}})
			return e
		}(), kverr.SegmentNotFound},
		{"mount other size", m.MountSegment(ctx, "a", Segment{Name: "a/0", Size: 5}), kverr.SegmentAlreadyExists},
		{"mount size 0", m.MountSegment(ctx, "a", Segment{Name: "a/1"}), kverr.InvalidParams},
		{"mount no name", m.MountSegment(ctx, "a", Segment{Size: 100}), kverr.InvalidParams},
		{"putend other", m.PutEnd(ctx, "x", "", "inflight"), kverr.IllegalClient},
		{"bad regex", func() error { _, e := m.RemoveByRegex(ctx, "", "[", true); return e }(), kverr.InvalidParams},
		{"soft pin ttl", func() error {
			_, e := m.PutStart(ctx, PutRequest{Client: "w", Key: "sp", Size: 1, Config: PutConfig{Replicas: 1, SoftPin: true, SoftPinTTL: 25 * time.Hour}})
			return e
		}(), kverr.InvalidParams},
		{"no client", func() error { _, e := m.PutStart(ctx, putReq("", "nc", 1)); return e }(), kverr.InvalidParams},
		{"long tenant", func() error { _, e := m.Exist(ctx, strings.Repeat("t", 300), "k"); return e }(), kverr.InvalidParams},
		{"negative grace", m.UnmountSegment(ctx, "a", "a/0", -1), kverr.InvalidParams},
		{"list limit", func() error { _, e := m.ListObjects(ctx, ListOptions{Limit: 10001}); return e }(), kverr.InvalidParams},
		{"bad tiers", func() error { h := 1.5; _, e := m.UpdateTiers(ctx, TierUpdate{HighWatermark: &h}); return e }(), kverr.InvalidParams},
		{"bad policy", func() error { p := "lfu"; _, e := m.UpdateTiers(ctx, TierUpdate{LeasePolicy: &p}); return e }(), kverr.InvalidParams},
		{"drop bucket unknown", m.DropBucket(ctx, "ghost", 1), kverr.ClientNotFound},
	}
	for _, c := range cases {
		if kverr.CodeOf(c.err) != c.code {
			t.Errorf("%s: got %v, want %v", c.name, c.err, c.code)
		}
		if c.err != nil && !strings.Contains(c.err.Error(), c.code.String()) {
			t.Errorf("%s: error text lacks the code: %v", c.name, c.err)
		}
	}
	if after := snapshot(); after != before {
		t.Fatalf("bad input changed state:\n%s\n%s", before, after)
	}
	if tr := m.GetTiers(ctx); tr.Dram.HighWatermark != DefaultHighWatermark || tr.Dram.LeasePolicy != DefaultLeasePolicy {
		t.Fatalf("bad tier update applied: %+v", tr.Dram)
	}
}

func TestReplicaOrderByType(t *testing.T) {
	m, _ := newTest(t, Config{})
	if err := m.MountSegment(ctx, "N", Segment{Name: "N/nof", Type: NOF, Size: 1 << 20, NQN: "nqn.x", NSID: 1, TargetAddr: "127.0.0.1:4420", BlockSize: 4096}); err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "M", "M/0", 1<<20)
	m.Heartbeat(ctx, HeartbeatRequest{Client: "D", Endpoint: "D:9", Disk: &DiskStats{Capacity: 1 << 30}})
	reps := putCfg(t, m, "w", "k", 5000, PutConfig{Replicas: 1, NOFReplicas: 1})
	var nof Replica
	for _, r := range reps {
		if r.Type == NOF {
			nof = r
		}
	}
	if nof.Offset%4096 != 0 || nof.NQN != "nqn.x" || nof.TargetAddr != "127.0.0.1:4420" {
		t.Fatalf("NOF replica %+v", nof)
	}
	if used := segUsed(m, "N/nof"); used != 8192 {
		t.Fatalf("NOF allocation not block aligned: used %d", used)
	}
	if errs, err := m.RegisterDiskObjects(ctx, "D", []DiskObject{{Key: "k", Size: 5000, Bucket: 3, Offset: 0, Length: 5000}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	l, err := m.GetReplicaList(ctx, "r", "", "k")
	if err != nil {
		t.Fatal(err)
	}
	got := []ReplicaType{}
	for _, r := range l.Replicas {
		got = append(got, r.Type)
	}
	if fmt.Sprint(got) != "[MEMORY NOF LOCAL_DISK]" {
		t.Fatalf("order %v", got)
	}
	d := l.Replicas[2]
	if d.Segment != "D/ssd" || d.Node != "D" || d.Endpoint != "D:9" || d.Bucket != 3 {
		t.Fatalf("disk replica %+v", d)
	}
	if ctrOf(m, "get_hits_memory") != 1 {
		t.Fatal("hit counter")
	}
}

func TestListObjects(t *testing.T) {
	m, _ := newTest(t, Config{})
	mountMem(t, m, "a", "a/0", 1<<20)
	for i := 0; i < 25; i++ {
		put(t, m, "w", fmt.Sprintf("p/%02d", i), 10)
	}
	put(t, m, "w", "q/0", 10)
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		p, err := m.ListObjects(ctx, ListOptions{Prefix: "p/", Cursor: cursor, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range p.Objects {
			got = append(got, o.Key)
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
		if pages > 5 {
			t.Fatal("cursor does not advance")
		}
	}
	if len(got) != 25 || got[0] != "p/00" || got[24] != "p/24" {
		t.Fatalf("listed %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i-1] >= got[i] {
			t.Fatal("not in order")
		}
	}
	p, _ := m.ListObjects(ctx, ListOptions{AllTenants: true})
	if len(p.Objects) != 26 {
		t.Fatalf("all tenants: %d", len(p.Objects))
	}
}

func TestEventsBoundedAndSampled(t *testing.T) {
	m, _ := newTest(t, Config{PutEventSample: 4})
	mountMem(t, m, "a", "a/0", 1<<20)
	sub := m.Subscribe(2)
	defer sub.Close()
	for i := 0; i < 40; i++ {
		put(t, m, "w", fmt.Sprint(i), 10)
	}
	if err := m.Remove(ctx, "", "0", false); err != nil {
		t.Fatal(err)
	}
	n := 0
	for len(sub.C()) > 0 {
		<-sub.C()
		n++
	}
	// 10 sampled puts + 1 remove into a buffer of 2: 9 dropped.
	if n != 2 || sub.Dropped() != 9 || ctrOf(m, "events_dropped") != 9 {
		t.Fatalf("received %d dropped %d counter %d", n, sub.Dropped(), ctrOf(m, "events_dropped"))
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	bad := []Config{
		{HighWatermark: 1.5}, {EvictionRatio: -1}, {LeasePolicy: "x"}, {OffloadMode: "sometimes"},
		{SSDPolicy: "mru"}, {MaxKeyLen: 100}, {LeaseTTL: -1}, {SoftPinTTL: 48 * time.Hour},
		{PutDiscardTimeout: time.Hour}, {TenantQuota: map[string]uint64{"": 1}},
	}
	for _, c := range bad {
		if err := c.Validate(); !kverr.Is(err, kverr.InvalidParams) {
			t.Errorf("%+v: %v", c, err)
		}
		if _, err := New(c); err == nil {
			t.Errorf("New accepted %+v", c)
		}
	}
	m, _ := New(Config{})
	if m.Config().LeasePolicy != PolicyFrequency || m.Config().MaxKeyLen != 4096 {
		t.Fatal("defaults")
	}
}

func TestAllocator(t *testing.T) {
	a := newAllocator(1000, 64) // usable 960
	if a.total != 960 {
		t.Fatal(a.total)
	}
	o1, l1, _ := a.alloc(100) // 128
	o2, _, _ := a.alloc(64)
	o3, _, _ := a.alloc(200) // 256
	if l1 != 128 || o2 != 128 || o3 != 192 {
		t.Fatal(o1, l1, o2, o3)
	}
	if !a.release(o2, 64) || a.release(o2, 64) {
		t.Fatal("double free must be refused")
	}
	// Best fit: a 64-byte request takes the 64-byte hole, not the tail.
	if o, _, _ := a.alloc(60); o != 128 {
		t.Fatalf("best fit chose %d", o)
	}
	a.release(128, 64)
	a.release(o1, 128)
	a.release(o3, 256)
	if a.free != 960 || a.bySize.Len() != 1 || a.largest() != 960 {
		t.Fatalf("not coalesced: free %d extents %d", a.free, a.bySize.Len())
	}
	if _, _, ok := a.alloc(961); ok {
		t.Fatal("over-allocation")
	}
}
