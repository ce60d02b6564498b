package master

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// diskAppliance announces node A with an SSD tier and registers objects on it.
func diskAppliance(t *testing.T, m *Master, objs ...DiskObject) {
	t.Helper()
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Endpoint: "A:7", Disk: &DiskStats{Capacity: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	errs, err := m.RegisterDiskObjects(ctx, "A", objs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("register %s: %v", objs[i].Key, e)
		}
	}
}

func diskObj(key string, bucket, off uint64) DiskObject {
	return DiskObject{Key: key, Size: 64, Length: 64, Bucket: bucket, Offset: off}
}

// take calls TakeRemovals for A, acknowledging through ack of outbox.
func take(t *testing.T, m *Master, outbox, ack uint64) (uint64, []DiskRemoval) {
	t.Helper()
	ob, rs, err := m.TakeRemovals(ctx, "A", outbox, ack, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return ob, rs
}

// takeSome takes A's removals until some arrive (a removal running in
// another goroutine queues them).
func takeSome(t *testing.T, m *Master) (uint64, []DiskRemoval) {
	t.Helper()
	for {
		if ob, rs := take(t, m, 0, 0); len(rs) > 0 {
			return ob, rs
		}
	}
}

func TestRemoveWaitsForDiskAck(t *testing.T) {
	m, _ := newTest(t, Config{OffloadMode: OffloadOff})
	diskAppliance(t, m, diskObj("k", 1, 0), diskObj("other", 1, 4096))
	done := make(chan error, 1)
	go func() { done <- m.Remove(ctx, "", "k", false) }()
	ob, rs := takeSome(t, m)
	if len(rs) != 1 || rs[0].Key != "k" || rs[0].Cutoff {
		t.Fatalf("removals %+v", rs)
	}
	select {
	case err := <-done:
		t.Fatalf("Remove returned %v before the appliance acknowledged", err)
	case <-time.After(50 * time.Millisecond):
	}
	if exists(t, m, "k") {
		t.Fatal("removed object still exists while the SSD delete is pending")
	}
	// The copy cannot come back while the removal is pending.
	errs, _ := m.RegisterDiskObjects(ctx, "A", []DiskObject{diskObj("k", 1, 0)})
	wantCode(t, errs[0], kverr.ObjectNotFound)
	// Delivered again until acknowledged; a stale outbox id acknowledges nothing.
	if _, again := take(t, m, ob+1, rs[0].Seq); len(again) != 1 {
		t.Fatalf("unacknowledged removal not handed out again: %+v", again)
	}
	if _, rest := take(t, m, ob, rs[0].Seq); len(rest) != 0 {
		t.Fatalf("acknowledged removal handed out again: %+v", rest)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Acknowledged: a fresh copy of the key registers again.
	errs, _ = m.RegisterDiskObjects(ctx, "A", []DiskObject{diskObj("k", 2, 0)})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
}

func TestRemoveUnconfirmed(t *testing.T) {
	m, _ := newTest(t, Config{OffloadMode: OffloadOff, RemoveSyncTimeout: 30 * time.Millisecond})
	diskAppliance(t, m, diskObj("k", 1, 0))
	err := m.Remove(ctx, "", "k", false)
	wantCode(t, err, kverr.UnavailableInCurrentStatus)
	if !strings.Contains(err.Error(), "A") || ctrOf(m, "removals_unconfirmed") != 1 {
		t.Fatalf("error does not name the appliance: %v", err)
	}
	if exists(t, m, "k") {
		t.Fatal("object still exists")
	}
	if _, rs := take(t, m, 0, 0); len(rs) != 1 {
		t.Fatalf("removal not kept for the appliance: %+v", rs)
	}
}

func TestRemoveAllSendsOneCutoff(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff})
	var objs []DiskObject
	for i := range 100 {
		objs = append(objs, diskObj("x/"+string(rune('a'+i%26))+strings.Repeat("z", i/26), 1, uint64(i)*4096))
	}
	objs = append(objs, diskObj("y/1", 2, 0))
	diskAppliance(t, m, objs...)
	if _, err := m.GetReplicaList(ctx, "reader", "", objs[3].Key); err != nil { // leased: kept
		t.Fatal(err)
	}
	fc.Advance(time.Millisecond)
	type res struct {
		n   int
		err error
	}
	done := make(chan res, 1)
	go func() {
		n, err := m.RemoveByRegex(ctx, "", "^x/", false)
		done <- res{n, err}
	}()
	ob, rs := takeSome(t, m)
	if len(rs) != 1 || !rs[0].Cutoff || rs[0].Pattern != "^x/" || len(rs[0].Keep) != 1 ||
		rs[0].Keep[0] != (DiskLocation{1, 3 * 4096}) {
		t.Fatalf("removals %+v", rs)
	}
	// While pending, a registration of a matching copy is refused.
	errs, _ := m.RegisterDiskObjects(ctx, "A", []DiskObject{diskObj("x/new", 3, 0)})
	wantCode(t, errs[0], kverr.ObjectNotFound)
	take(t, m, ob, rs[0].Seq)
	r := <-done
	if r.err != nil || r.n != 99 {
		t.Fatalf("RemoveByRegex: %d, %v", r.n, r.err)
	}
	if !exists(t, m, "y/1") || !exists(t, m, objs[3].Key) {
		t.Fatal("non-matching or leased object removed")
	}
}

func TestOffloadDoneRefusedWhileRemovalPending(t *testing.T) {
	m, _ := newTest(t, Config{RemoveSyncTimeout: 20 * time.Millisecond})
	appliance(t, m, 0)
	put(t, m, "w", "k", 64)
	r := appliance(t, m, 1)
	if len(r.Offload) != 1 {
		t.Fatalf("tasks %+v", r.Offload)
	}
	if err := m.OffloadDone(ctx, OffloadResult{Client: "A", Key: "k", OK: true, Bucket: 1, Length: 64}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, m.Remove(ctx, "", "k", true), kverr.UnavailableInCurrentStatus) // not acknowledged
	// Put again (same bytes): the SSD tier answers "already stored" at the
	// old location, which the pending removal will delete.
	put(t, m, "w", "k", 64)
	r = appliance(t, m, 1)
	if len(r.Offload) != 1 {
		t.Fatalf("tasks %+v", r.Offload)
	}
	wantCode(t, m.OffloadDone(ctx, OffloadResult{Client: "A", Key: "k", OK: true, Bucket: 1, Length: 64}), kverr.ObjectNotFound)
	if i := info(t, m, "k"); len(i.Replicas) != 1 || i.Replicas[0].Type != Memory || i.OffloadPending {
		t.Fatalf("copy under a pending removal became a replica: %+v", i)
	}
}

func TestRemoveByRegexBounds(t *testing.T) {
	m, _ := newTest(t, Config{})
	mountMem(t, m, "A", "A/0", 1<<20)
	for _, k := range []string{"a1", "a2", "b1"} {
		put(t, m, "w", k, 64)
	}
	_, err := m.RemoveByRegex(ctx, "", strings.Repeat("a", MaxRemovePattern+1), false)
	wantCode(t, err, kverr.InvalidParams)
	if !strings.Contains(err.Error(), "at most") {
		t.Fatalf("unclear reason: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	n, err := m.RemoveByRegex(cctx, "", "^a", false)
	if err == nil || n != 0 || !exists(t, m, "a1") {
		t.Fatalf("cancelled RemoveByRegex: %d, %v", n, err)
	}
	if n, err := m.RemoveByRegex(ctx, "", "^a", false); n != 2 || err != nil {
		t.Fatalf("RemoveByRegex: %d, %v", n, err)
	}
}

// A cancelled bulk remove still makes what it removed durable on SSD: one
// delete per removed key replaces the withdrawn cutoff.
func TestCancelledRemoveAllQueuesDeletes(t *testing.T) {
	m, _ := newTest(t, Config{OffloadMode: OffloadOff, RemoveSyncTimeout: 10 * time.Millisecond})
	diskAppliance(t, m, diskObj("a", 1, 0))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	m.RemoveAll(cctx, "", false)
	if _, rs := take(t, m, 0, 0); len(rs) != 0 {
		t.Fatalf("cancelled before any shard: nothing removed, nothing queued, got %+v", rs)
	}
	if !exists(t, m, "a") {
		t.Fatal("removed after cancel")
	}
}

func TestIdentityRestartSameDisk(t *testing.T) {
	m, _ := newTest(t, Config{})
	inc1 := Identity{Incarnation: "i1", DiskID: "d"}
	if err := m.MountSegmentAs(ctx, "A", inc1, Segment{Name: "A/0", Endpoint: "A:1", Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	put(t, m, "w", "k", 64)
	// Restarted at once (no silence) with the same SSD directory, new port.
	inc2 := Identity{Incarnation: "i2", DiskID: "d"}
	if err := m.MountSegmentAs(ctx, "A", inc2, Segment{Name: "A/0", Endpoint: "A:2", Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if exists(t, m, "k") {
		t.Fatal("the old incarnation's MEMORY object survived its restart")
	}
	segs := m.ListSegments(ctx)
	if len(segs) != 1 || segs[0].Segment.Endpoint != "A:2" || segs[0].State != SegMounted {
		t.Fatalf("segments %+v", segs)
	}
	reps := put(t, m, "w", "k", 64) // a re-put works
	if reps[0].Endpoint != "A:2" {
		t.Fatalf("re-put to the old address: %+v", reps)
	}
	if ctrOf(m, "appliance_restarts") != 1 {
		t.Fatal("restart not counted")
	}
	// The old incarnation is refused now.
	_, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Endpoint: "A:1", Identity: Identity{Incarnation: "i1", DiskID: "other"}})
	wantCode(t, err, kverr.IllegalClient)
}

func TestIdentityLiveConflict(t *testing.T) {
	m, fc := newTest(t, Config{})
	if err := m.MountSegmentAs(ctx, "A", Identity{Incarnation: "i1"}, Segment{Name: "A/0", Endpoint: "h:1", Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	put(t, m, "w", "k", 64)
	err := m.MountSegmentAs(ctx, "A", Identity{Incarnation: "i2"}, Segment{Name: "A/0", Endpoint: "h:2", Size: 1 << 20})
	wantCode(t, err, kverr.IllegalClient)
	for _, s := range []string{"i1", "i2", "h:1", "h:2"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("refusal does not name %s: %v", s, err)
		}
	}
	if !exists(t, m, "k") || m.ListSegments(ctx)[0].Segment.Endpoint != "h:1" {
		t.Fatal("a refused mount changed the holder")
	}
	// The refused one cleaning up cannot unmount the holder's segment.
	wantCode(t, m.UnmountSegmentAs(ctx, "A", "i2", "A/0", 0), kverr.IllegalClient)
	// The holder goes silent (kill -9): after RestartTakeover the newcomer takes over.
	fc.Advance(DefaultRestartTakeover)
	if err := m.MountSegmentAs(ctx, "A", Identity{Incarnation: "i2"}, Segment{Name: "A/0", Endpoint: "h:2", Size: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if exists(t, m, "k") || m.ListSegments(ctx)[0].Segment.Endpoint != "h:2" {
		t.Fatal("takeover did not replace the old incarnation")
	}
	// Nodes without an incarnation (GPU nodes, CLI) are never refused.
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Endpoint: "h:2"}); err != nil {
		t.Fatal(err)
	}
}

func TestRemountCancelsDrain(t *testing.T) {
	m, fc := newTest(t, Config{})
	mountMem(t, m, "A", "A/0", 1<<20)
	put(t, m, "w", "k", 64)
	if err := m.UnmountSegment(ctx, "A", "A/0", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if segState(m, "A/0") != SegDraining {
		t.Fatal("not draining")
	}
	mountMem(t, m, "A", "A/0", 1<<20)
	if segState(m, "A/0") != SegMounted {
		t.Fatalf("remount left state %v", segState(m, "A/0"))
	}
	for range 4 { // past the drain's grace, the owner heartbeating
		fc.Advance(5 * time.Second)
		m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Endpoint: "A:1"})
		m.Reap(ctx)
	}
	if segState(m, "A/0") != SegMounted || !exists(t, m, "k") {
		t.Fatal("the old drain unmounted a remounted segment")
	}
	put(t, m, "w", "k2", 64) // takes allocations again
	// A heartbeat's re-announcement does not cancel an operator's drain.
	if err := m.UnmountSegment(ctx, "", "A/0", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Endpoint: "A:1", Segments: []Segment{{Name: "A/0", Endpoint: "A:1", Size: 1 << 20}}})
	if segState(m, "A/0") != SegDraining {
		t.Fatal("heartbeat cancelled a drain")
	}
}

// A key removed while an appliance with an SSD tier is gone is removed
// from its SSD when it comes back, before its copy could be re-registered.
func TestRemoveWhileApplianceGone(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff})
	diskNodeGone(t, m, fc, "k")
	put(t, m, "w", "k", 64) // k again, in B's memory
	start := time.Now()
	if err := m.Remove(ctx, "", "k", false); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > time.Second {
		t.Fatal("Remove waited for a gone appliance")
	}
	// A comes back: its copy of k cannot be registered, and the removal is
	// handed to it.
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Endpoint: "A:7", Disk: &DiskStats{Capacity: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	errs, _ := m.RegisterDiskObjects(ctx, "A", []DiskObject{diskObj("k", 1, 0)})
	wantCode(t, errs[0], kverr.ObjectNotFound)
	if _, rs := take(t, m, 0, 0); len(rs) != 1 || rs[0].Key != "k" {
		t.Fatalf("removals for the returning appliance: %+v", rs)
	}
	// Past the cap, per-key removals collapse into one cutoff.
	for i := range goneQueueCap + 10 {
		m.rmq.addGone("Z", "", fmt.Sprint(i))
	}
	m.rmq.mu.Lock()
	n := len(m.rmq.byNode["Z"].pending)
	m.rmq.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d removals queued for a gone node past the cap", n)
	}
}

// A removal that no appliance confirms answers within one
// RemoveSyncTimeout, naming every appliance that did not confirm: A
// holds an SSD copy of the key and B (a DRAM directory holder with a
// record it never took) holds up the DRAM barrier. Each wait with a bound
// of its own made it two bounds (10 s by default, a client's whole
// RPCTimeout: bench's clean-up after losing an appliance saw "context
// deadline exceeded" instead of this answer).
func TestRemoveUnconfirmedWithinOneBound(t *testing.T) {
	const bound = 300 * time.Millisecond
	m, _ := newTest(t, Config{OffloadMode: OffloadOff, RemoveSyncTimeout: bound, DramSyncTimeout: 20 * time.Millisecond})
	diskAppliance(t, m, diskObj("k", 1, 0))
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "B", DramDirectory: true}); err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "B", "B/mem0", 1<<20)
	put(t, m, "w", "on-b", 100) // its commit record is never taken: B is silent
	start := time.Now()
	err := m.Remove(ctx, "", "k", false)
	took := time.Since(start)
	wantCode(t, err, kverr.UnavailableInCurrentStatus)
	if !strings.Contains(err.Error(), "appliance A") || !strings.Contains(err.Error(), "appliance B") {
		t.Fatalf("the answer does not name both unconfirming appliances: %v", err)
	}
	if took >= 2*bound-50*time.Millisecond {
		t.Fatalf("the removal answered after %v: two bounds of %v, one after the other", took, bound)
	}
	if exists(t, m, "k") {
		t.Fatal("object still exists")
	}
}
