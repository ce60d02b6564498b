package master

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/clock"
	"github.com/kvtier/kvtier/kverr"
)

// appliance announces node A with one MEMORY segment and an SSD tier.
func appliance(t *testing.T, m *Master, slots int) HeartbeatReply {
	t.Helper()
	r, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Endpoint: "A:7",
		Segments: []Segment{{Name: "A/0", Size: 640, Endpoint: "A:7"}},
		Disk:     &DiskStats{Capacity: 1 << 30, Used: 10, Objects: 1}, OffloadSlots: slots})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func info(t *testing.T, m *Master, key string) ObjectInfo {
	t.Helper()
	i, err := m.GetObject(ctx, "", key)
	if err != nil {
		t.Fatalf("GetObject %s: %v", key, err)
	}
	return i
}

func TestOffloadImmediateThenEvict(t *testing.T) {
	m, fc := newTest(t, Config{})
	appliance(t, m, 0)
	fill(t, m, 10, nil) // segment full: 10 × 64
	if ctrOf(m, "offloads_queued") != 10 || !info(t, m, "k00").OffloadPending {
		t.Fatal("PutEnd did not queue offloads")
	}
	readAll(t, m, fc, 10) // k00 has the oldest lease
	fc.Advance(DefaultLeaseTTL)
	rep := m.EvictNow(ctx)
	if rep.FreedObjects != 0 || rep.AwaitingOffload != 10 || ctrOf(m, "eviction_shortfall_awaiting_offload") != 10 {
		t.Fatalf("a MEMORY replica with a pending offload was evicted: %+v", rep)
	}
	r := appliance(t, m, 3)
	if len(r.Offload) != 3 || r.Offload[0].Key != "k00" || r.Offload[0].Size != 64 ||
		r.Offload[0].Source.Segment != "A/0" || r.Offload[0].Source.Type != Memory {
		t.Fatalf("tasks %+v", r.Offload)
	}
	// Being replicated: a removal waits for the copy, here past its deadline.
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	err := m.Remove(short, "", "k00", true)
	cancel()
	wantCode(t, err, kverr.ReplicaIsNotReady)
	if !strings.Contains(err.Error(), "did not land within") || !exists(t, m, "k00") {
		t.Fatalf("a removal that timed out waiting for the SSD copy: %v (the object must stay)", err)
	}
	if err := m.OffloadDone(ctx, OffloadResult{Client: "A", Key: "k00", OK: true, Bucket: 1, Offset: 4096, Length: 64}); err != nil {
		t.Fatal(err)
	}
	if err := m.OffloadDone(ctx, OffloadResult{Client: "A", Key: "k01", OK: false, Error: "disk full"}); err != nil {
		t.Fatal(err)
	}
	if info(t, m, "k01").OffloadPending || ctrOf(m, "offloads_failed") != 1 || ctrOf(m, "offloads_completed") != 1 {
		t.Fatal("failure must release the pin and be counted")
	}
	i := info(t, m, "k00")
	if len(i.Replicas) != 2 || i.Replicas[1].Type != LocalDisk || i.Replicas[1].State != Complete ||
		i.Replicas[1].Segment != "A/ssd" || i.Replicas[1].Endpoint != "A:7" || i.Replicas[1].Bucket != 1 || i.Replicas[1].Offset != 4096 {
		t.Fatalf("disk replica %+v", i.Replicas)
	}
	// k00 has a disk copy: evicting removes only its MEMORY replica. k01 gets
	// a new task instead of being evicted.
	rep = m.EvictNow(ctx)
	if rep.FreedObjects != 1 {
		t.Fatalf("%+v", rep)
	}
	l, err := m.GetReplicaList(ctx, "r", "", "k00")
	if err != nil || len(l.Replicas) != 1 || l.Replicas[0].Type != LocalDisk {
		t.Fatalf("evicted object must stay readable from SSD: %+v %v", l, err)
	}
	if ctrOf(m, "get_hits_disk") != 1 {
		t.Fatal("disk hit not counted")
	}
	// A dispatched task that never finishes times out and releases its pin.
	fc.Advance(DefaultOffloadTimeout)
	appliance(t, m, 0)
	m.Reap(ctx)
	if info(t, m, "k02").OffloadPending {
		t.Fatal("timed-out task still pins")
	}
}

func TestOffloadQueueFullKeepsData(t *testing.T) {
	m, fc := newTest(t, Config{OffloadQueueLimit: 2})
	appliance(t, m, 0)
	fill(t, m, 10, nil)
	if ctrOf(m, "offloads_skipped_queue_full") != 8 || info(t, m, "k05").OffloadPending {
		t.Fatalf("skips %d", ctrOf(m, "offloads_skipped_queue_full"))
	}
	fc.Advance(time.Second)
	rep := m.EvictNow(ctx)
	if rep.FreedObjects != 0 || len(present(m, 10)) != 10 {
		t.Fatalf("queue full must keep the data: %+v", rep)
	}
}

func TestOffloadOnEvict(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOnEvict})
	appliance(t, m, 0)
	fill(t, m, 10, nil)
	readAll(t, m, fc, 10)
	if ctrOf(m, "offloads_queued") != 0 {
		t.Fatal("on-evict queued at PutEnd")
	}
	fc.Advance(DefaultLeaseTTL)
	rep := m.EvictNow(ctx) // target 64 bytes: only k00 gets a task instead
	if rep.FreedObjects != 0 || rep.AwaitingOffload != 1 || !info(t, m, "k00").OffloadPending || ctrOf(m, "offloads_queued") != 1 {
		t.Fatalf("%+v", rep)
	}
	r := appliance(t, m, 8)
	if len(r.Offload) != 1 || r.Offload[0].Key != "k00" {
		t.Fatalf("tasks %+v", r.Offload)
	}
	for _, task := range r.Offload {
		if err := m.OffloadDone(ctx, OffloadResult{Client: "A", Key: task.Key, OK: true, Bucket: 1, Length: 64}); err != nil {
			t.Fatal(err)
		}
	}
	rep = m.EvictNow(ctx)
	if rep.FreedObjects != 1 {
		t.Fatalf("after the disk copy: %+v", rep)
	}
	if i := info(t, m, "k00"); len(i.Replicas) != 1 || i.Replicas[0].Type != LocalDisk {
		t.Fatalf("k00 %+v", i.Replicas)
	}
}

func TestForceEvictAndOffloadOff(t *testing.T) {
	m, fc := newTest(t, Config{ForceEvict: true})
	appliance(t, m, 0)
	fill(t, m, 10, nil)
	fc.Advance(time.Second)
	if rep := m.EvictNow(ctx); rep.FreedObjects != 1 {
		t.Fatalf("force evict: %+v", rep)
	}
	if len(present(m, 10)) != 9 {
		t.Fatal("memory-only object must disappear when evicted")
	}
	m2, _ := newTest(t, Config{OffloadMode: OffloadOff})
	appliance(t, m2, 0)
	fill(t, m2, 3, nil)
	if r := appliance(t, m2, 10); len(r.Offload) != 0 || ctrOf(m2, "offloads_queued") != 0 {
		t.Fatal("offload off queued tasks")
	}
}

func TestOffloadOnlyToNodesWithSSD(t *testing.T) {
	m, _ := newTest(t, Config{})
	mountMem(t, m, "B", "B/0", 1<<20) // no heartbeat with a disk tier
	put(t, m, "w", "k", 100)
	if ctrOf(m, "offloads_queued") != 0 {
		t.Fatal("task for a node without SSD")
	}
	wantCode(t, m.OffloadDone(ctx, OffloadResult{Client: "zz", Key: "k", OK: true, Length: 100}), kverr.ClientNotFound)
}

func TestDropBucketAndRegister(t *testing.T) {
	m, _ := newTest(t, Config{OffloadMode: OffloadOff})
	appliance(t, m, 0)
	put(t, m, "w", "mem", 64)
	errs, err := m.RegisterDiskObjects(ctx, "A", []DiskObject{
		{Key: "mem", Size: 64, Bucket: 1, Length: 64},      // exists: replica added
		{Key: "diskonly", Size: 50, Bucket: 1, Length: 50}, // absent: created
		{Key: "mem", Size: 99, Bucket: 2, Length: 99},      // other size
		{Key: "b2", Size: 10, Bucket: 2, Length: 10},
		{Key: "", Size: 10, Length: 10},
	})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[1] != nil || !kverr.Is(errs[2], kverr.ObjectAlreadyExists) || errs[3] != nil || !kverr.Is(errs[4], kverr.InvalidKey) {
		t.Fatalf("results %v", errs)
	}
	if i := info(t, m, "diskonly"); !i.Complete || len(i.Replicas) != 1 || i.Replicas[0].Type != LocalDisk {
		t.Fatalf("diskonly %+v", i)
	}
	if len(info(t, m, "mem").Replicas) != 2 {
		t.Fatal("replica not added")
	}
	// Registering again is idempotent.
	m.RegisterDiskObjects(ctx, "A", []DiskObject{{Key: "mem", Size: 64, Bucket: 1, Length: 64}})
	if len(info(t, m, "mem").Replicas) != 2 {
		t.Fatal("duplicate disk replica")
	}
	_, err = m.RegisterDiskObjects(ctx, "ghost", nil)
	wantCode(t, err, kverr.ClientNotFound)

	if err := m.DropBucket(ctx, "A", 1); err != nil {
		t.Fatal(err)
	}
	if exists(t, m, "diskonly") {
		t.Fatal("object with no replica left survived DropBucket")
	}
	if i := info(t, m, "mem"); len(i.Replicas) != 1 || i.Replicas[0].Type != Memory {
		t.Fatalf("mem %+v", i.Replicas)
	}
	if !exists(t, m, "b2") || ctrOf(m, "disk_buckets_dropped") != 1 {
		t.Fatal("other bucket touched")
	}
}

func TestGoneNodeDropsDiskReplicas(t *testing.T) {
	m, fc := newTest(t, Config{OffloadMode: OffloadOff})
	appliance(t, m, 0)
	mountMem(t, m, "B", "B/0", 1<<20)
	m.RegisterDiskObjects(ctx, "A", []DiskObject{{Key: "d", Size: 5, Bucket: 1, Length: 5}})
	put(t, m, "w", "x", 5)
	for i := 0; i < 5; i++ {
		fc.Advance(DefaultClientTTL)
		m.Heartbeat(ctx, HeartbeatRequest{Client: "B"})
		m.Reap(ctx)
	}
	if exists(t, m, "d") {
		t.Fatal("disk replica of a gone node kept")
	}
	if !exists(t, m, "x") {
		t.Fatal("object on B lost")
	}
}

func TestHeartbeatCarriesSettings(t *testing.T) {
	m, _ := newTest(t, Config{})
	r := appliance(t, m, 0)
	if r.Settings.OffloadMode != OffloadImmediate || r.Settings.SSDPolicy != "fifo" || r.Settings.SSDHighWatermark != DefaultSSDHighWatermark {
		t.Fatalf("settings %+v", r.Settings)
	}
	pol, mode, capy := "lru", OffloadOnEvict, uint64(1<<40)
	if _, err := m.UpdateTiers(ctx, TierUpdate{SSDPolicy: &pol, OffloadMode: &mode, SSDCapacity: &capy}); err != nil {
		t.Fatal(err)
	}
	r = appliance(t, m, 0)
	if r.Settings.SSDPolicy != "lru" || r.Settings.OffloadMode != OffloadOnEvict || r.Settings.SSDCapacity != 1<<40 {
		t.Fatalf("settings %+v", r.Settings)
	}
	ts := m.GetTiers(ctx).Stats
	if ts[2].Tier != "disk" || ts[2].Capacity != 1<<30 || ts[2].Used != 10 {
		t.Fatalf("disk tier stats %+v", ts)
	}
	put(t, m, "w", "k", 64)
	if ctrOf(m, "offloads_queued") != 0 {
		t.Fatal("mode switch to on-evict ignored at PutEnd")
	}
}

// TestTakeOffload: the long-poll dispatch validates its input, waits for a
// first task (returning none when the wait ends first or ctx ends), hands
// out a task the moment a PutEnd queues it, and never hands a task out
// twice (neither to itself nor to a heartbeat).
func TestTakeOffload(t *testing.T) {
	m, _ := newTest(t, Config{})
	for _, tc := range []struct {
		client string
		slots  int
		wait   time.Duration
		code   kverr.Code
	}{
		{"", 1, time.Millisecond, kverr.InvalidParams},
		{"A", 0, time.Millisecond, kverr.InvalidParams},
		{"A", MaxTakeOffloadSlots + 1, time.Millisecond, kverr.InvalidParams},
		{"A", 1, 0, kverr.InvalidParams},
		{"A", 1, MaxTakeOffloadWait + time.Millisecond, kverr.InvalidParams},
		{"A", 1, time.Millisecond, kverr.ClientNotFound}, // before its first beat
	} {
		tasks, err := m.TakeOffload(ctx, tc.client, tc.slots, tc.wait)
		wantCode(t, err, tc.code)
		if tasks != nil {
			t.Fatalf("%+v: tasks %v with an error", tc, tasks)
		}
	}
	appliance(t, m, 0)

	start := time.Now()
	tasks, err := m.TakeOffload(ctx, "A", 4, 50*time.Millisecond)
	if err != nil || len(tasks) != 0 || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("nothing queued: got %v, %v after %v; want no task after the whole wait", tasks, err, time.Since(start))
	}
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancel)
	start = time.Now()
	if tasks, err := m.TakeOffload(cctx, "A", 4, 5*time.Second); err != nil || len(tasks) != 0 || time.Since(start) > 4*time.Second {
		t.Fatalf("cancelled wait: %v, %v after %v", tasks, err, time.Since(start))
	}

	type result struct {
		tasks []OffloadTask
		err   error
		took  time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		tasks, err := m.TakeOffload(ctx, "A", 8, 5*time.Second)
		done <- result{tasks, err, time.Since(start)}
	}()
	time.Sleep(20 * time.Millisecond) // most likely waiting by now; either way it must see the puts
	fill(t, m, 3, nil)
	r := <-done
	if r.err != nil || len(r.tasks) == 0 || r.took > 4*time.Second {
		t.Fatalf("a queued task must end the wait at once: %+v", r)
	}
	seen := map[string]int{}
	for _, tk := range r.tasks {
		seen[tk.Key]++
	}
	for len(seen) < 3 {
		more, err := m.TakeOffload(ctx, "A", 8, time.Second)
		if err != nil || len(more) == 0 {
			t.Fatalf("queued tasks not handed out: have %v, got %v %v", seen, more, err)
		}
		for _, tk := range more {
			seen[tk.Key]++
			if tk.Source.Segment != "A/0" || tk.Size != 64 {
				t.Fatalf("task %+v", tk)
			}
		}
	}
	for _, k := range []string{"k00", "k01", "k02"} {
		if seen[k] != 1 {
			t.Fatalf("task %s handed out %d times (%v)", k, seen[k], seen)
		}
	}
	if r := appliance(t, m, 16); len(r.Offload) != 0 {
		t.Fatalf("a heartbeat got tasks TakeOffload already handed out: %v", r.Offload)
	}
	if err := m.OffloadDone(ctx, OffloadResult{Client: "A", Key: "k00", OK: true, Bucket: 1, Offset: 0, Length: 64}); err != nil {
		t.Fatal(err)
	}
	if i := info(t, m, "k00"); i.OffloadPending || len(i.Replicas) != 2 || i.Replicas[1].Type != LocalDisk {
		t.Fatalf("OffloadDone after TakeOffload: %+v", i)
	}
}

// TestPutWaitsForOffloadsInFlight: a put that finds DRAM full of objects on
// their way to SSD waits (up to PutSpaceWait) for an offload to land, then
// evicts that object and succeeds; with no offload in flight it is refused
// at once, and an offload that never lands ends the wait at PutSpaceWait.
func TestPutWaitsForOffloadsInFlight(t *testing.T) {
	m, _ := newTest(t, Config{PutSpaceWait: 3 * time.Second})
	appliance(t, m, 0)
	fill(t, m, 10, nil) // segment full (10 × 64), every object queued for offload
	put := func(key string) error {
		_, err := m.PutStart(ctx, PutRequest{Client: "w", Key: key, Size: 64, Config: PutConfig{Replicas: 1}})
		return err
	}
	start := time.Now()
	wantCode(t, put("x"), kverr.NoAvailableHandle)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("refusal took %v with no offload in flight", d)
	}
	if tasks, err := m.TakeOffload(ctx, "A", 2, time.Second); err != nil || len(tasks) != 2 {
		t.Fatalf("take: %v %v", tasks, err)
	}
	done := make(chan error, 1)
	go func() { done <- put("y") }()
	select {
	case err := <-done:
		t.Fatalf("put with offloads in flight did not wait: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := m.OffloadDone(ctx, OffloadResult{Client: "A", Key: "k00", OK: true, Bucket: 1, Offset: 0, Length: 64}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("put after an offload landed: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("put still waiting after an offload landed")
	}
	if i := info(t, m, "k00"); len(i.Replicas) != 1 || i.Replicas[0].Type != LocalDisk {
		t.Fatalf("k00 should now live on SSD only: %+v", i.Replicas)
	}

	m2, _ := newTest(t, Config{PutSpaceWait: 100 * time.Millisecond})
	appliance(t, m2, 0)
	fill(t, m2, 10, nil)
	if tasks, err := m2.TakeOffload(ctx, "A", 1, time.Second); err != nil || len(tasks) != 1 {
		t.Fatalf("take: %v %v", tasks, err)
	}
	start = time.Now()
	_, err := m2.PutStart(ctx, PutRequest{Client: "w", Key: "z", Size: 64, Config: PutConfig{Replicas: 1}})
	wantCode(t, err, kverr.NoAvailableHandle)
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Fatalf("refusal after %v, want after the 100ms wait", d)
	}
}

// TestRemoveWaitsForOffload: a removal of an object whose SSD copy is being
// made (offload immediate: every fresh put) waits for the copy and removes
// it with the object, instead of failing REPLICA_IS_NOT_READY; a task that
// ends without a copy (timed out, its node gone) lets it go on at once.
func TestRemoveWaitsForOffload(t *testing.T) {
	m, fc := copiesBeingMade(t)
	removed := func(key string, force bool) <-chan error {
		done := make(chan error, 1)
		go func() { done <- m.Remove(ctx, "", key, force) }()
		return done
	}
	quiet := func(done <-chan error, what string) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("%s: removal returned %v before its copy landed", what, err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	// The copy lands: the removal takes it along and waits for the
	// appliance to delete it.
	done := removed("k00", false)
	quiet(done, "k00")
	if err := m.OffloadDone(ctx, OffloadResult{Client: "A", Key: "k00", OK: true, Bucket: 1, Offset: 0, Length: 64}); err != nil {
		t.Fatal(err)
	}
	ob, rs := takeSome(t, m)
	if len(rs) != 1 || rs[0].Key != "k00" || rs[0].Cutoff {
		t.Fatalf("removals sent to the appliance: %+v", rs)
	}
	take(t, m, ob, rs[len(rs)-1].Seq)
	if err := <-done; err != nil {
		t.Fatalf("Remove k00: %v", err)
	}
	if exists(t, m, "k00") {
		t.Fatal("k00 still exists")
	}

	// A leased object is refused at once, offload or not.
	if _, err := m.GetReplicaList(ctx, "reader", "", "k01"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wantCode(t, m.Remove(ctx, "", "k01", false), kverr.ObjectHasLease)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("OBJECT_HAS_LEASE took %v: it waited for the offload", d)
	}

	// Forced, and the task times out: the removal goes on without a copy.
	done = removed("k01", true)
	quiet(done, "k01")
	fc.Advance(DefaultOffloadTimeout + time.Second)
	appliance(t, m, 0)
	m.Reap(ctx)
	if err := <-done; err != nil {
		t.Fatalf("Remove k01 after its task timed out: %v", err)
	}
	// The late report of a removed object's copy is refused: the appliance
	// deletes what it wrote.
	wantCode(t, m.OffloadDone(ctx, OffloadResult{Client: "A", Key: "k01", OK: true, Bucket: 1, Offset: 4096, Length: 64}), kverr.ObjectNotFound)
	if exists(t, m, "k01") || !exists(t, m, "k02") {
		t.Fatal("k01 must be gone, k02 untouched")
	}
}

// TestRemoveAllWaitsForOffloads: a bulk remove right after puts whose SSD
// copies are being made (offload immediate) waits for those tasks and
// removes the objects with their copies, instead of skipping them; tasks
// dispatched after it started are not waited for.
func TestRemoveAllWaitsForOffloads(t *testing.T) {
	m, _ := copiesBeingMade(t)
	type res struct {
		n   int
		err error
	}
	done := make(chan res, 1)
	go func() {
		n, err := m.RemoveAll(ctx, "", false)
		done <- res{n, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("RemoveAll returned %+v while the copies were being made", r)
	case <-time.After(50 * time.Millisecond):
	}
	// A put whose copy starts after the call: not waited for, skipped.
	putCfg(t, m, "w", "late", 64, PutConfig{Replicas: 1})
	if r := appliance(t, m, 1); len(r.Offload) != 1 || r.Offload[0].Key != "late" {
		t.Fatalf("tasks %+v", r.Offload)
	}
	for i, ok := range []bool{true, true, false} {
		key := fmt.Sprintf("k%02d", i)
		res := OffloadResult{Client: "A", Key: key, OK: ok, Bucket: 1, Offset: uint64(i) * 4096, Length: 64}
		if !ok {
			res.Error = "disk full"
		}
		if err := m.OffloadDone(ctx, res); err != nil {
			t.Fatalf("OffloadDone %s: %v", key, err)
		}
	}
	ob, rs := takeSome(t, m)
	if len(rs) != 1 || !rs[0].Cutoff || len(rs[0].Keep) != 0 {
		t.Fatalf("removals sent to the appliance: %+v (want one cutoff keeping nothing)", rs)
	}
	take(t, m, ob, rs[0].Seq)
	r := <-done
	if r.err != nil || r.n != 3 {
		t.Fatalf("RemoveAll: %d, %v; want 3 removed", r.n, r.err)
	}
	for i := range 3 {
		if key := fmt.Sprintf("k%02d", i); exists(t, m, key) {
			t.Fatalf("%s survived RemoveAll", key)
		}
	}
	if !exists(t, m, "late") {
		t.Fatal("late (its copy dispatched after RemoveAll began) was removed: it is being copied")
	}
}

// copiesBeingMade is a master with offload immediate and appliance A whose
// three objects k00-k02 have their SSD copies dispatched, not reported.
func copiesBeingMade(t *testing.T) (*Master, *clock.Fake) {
	t.Helper()
	m, fc := newTest(t, Config{OffloadMode: OffloadImmediate})
	appliance(t, m, 0)
	fill(t, m, 3, nil)
	if r := appliance(t, m, 3); len(r.Offload) != 3 {
		t.Fatalf("tasks %+v", r.Offload)
	}
	return m, fc
}
