package master

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// TestConcurrentOps runs putters, readers, removers, evictions, heartbeats,
// mounts and unmounts at once (run it with -race). Every result must carry
// an expected code, every successful read must be consistent, and the
// invariants must hold at the end; after a forced RemoveAll no byte stays
// allocated. Twice: removals that wait for nothing, and removals that wait
// (briefly) for copies being made and for confirmations nobody sends.
func TestConcurrentOps(t *testing.T) {
	t.Run("no-waits", func(t *testing.T) { concurrentOps(t, -1) })
	t.Run("waits", func(t *testing.T) { concurrentOps(t, 2*time.Millisecond) })
}

func concurrentOps(t *testing.T, removeWait time.Duration) {
	m, fc := newTest(t, Config{ClientTTL: time.Hour, HighWatermark: 0.5, RemoveSyncTimeout: removeWait})
	for n := 0; n < 4; n++ {
		for s := 0; s < 2; s++ {
			mountMem(t, m, fmt.Sprintf("n%d", n), fmt.Sprintf("n%d/%d", n, s), 64<<10)
		}
	}
	m.Heartbeat(ctx, HeartbeatRequest{Client: "n0", Disk: &DiskStats{Capacity: 1 << 30}})
	const workers = 8
	iters := 1500
	if testing.Short() {
		iters = 300
	}
	var wg sync.WaitGroup
	var bad atomic.Value
	fail := func(format string, a ...any) { bad.CompareAndSwap(nil, fmt.Sprintf(format, a...)) }
	allowed := func(op string, err error, codes ...kverr.Code) {
		if err == nil {
			return
		}
		c := kverr.CodeOf(err)
		for _, x := range codes {
			if c == x {
				return
			}
		}
		fail("%s: unexpected %v", op, err)
	}
	var gets atomic.Int64
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			me := fmt.Sprintf("c%d", w)
			var pending []OffloadTask // dispatched to this worker, not yet reported
			for i := 0; i < iters; i++ {
				key := fmt.Sprintf("k%d", r.IntN(64)) // shared keys: collisions on purpose
				if r.IntN(4) == 0 {
					key = fmt.Sprintf("%s-%d", me, i) // private keys
				}
				size := uint64(1 + r.IntN(4096))
				switch op := r.IntN(10); op {
				case 0, 1, 2:
					_, err := m.PutStart(ctx, PutRequest{Client: me, Key: key, Size: size, Config: PutConfig{Replicas: 1 + r.IntN(3)}})
					allowed("PutStart", err, kverr.ObjectAlreadyExists, kverr.NoAvailableHandle)
					if err == nil {
						if r.IntN(5) == 0 {
							// Like PutEnd: a force Remove by another worker may have
							// ended this put and a third one started the key anew.
							allowed("PutRevoke", m.PutRevoke(ctx, me, "", key), kverr.ObjectNotFound, kverr.IllegalClient)
						} else {
							allowed("PutEnd", m.PutEnd(ctx, me, "", key), kverr.ObjectNotFound, kverr.IllegalClient)
						}
					}
				case 3, 4:
					l, err := m.GetReplicaList(ctx, me, "", key)
					allowed("Get", err, kverr.ObjectNotFound, kverr.ReplicaIsNotReady)
					if err == nil {
						gets.Add(1)
						for _, rp := range l.Replicas {
							if rp.State != Complete || rp.Length != l.Size {
								fail("Get %s: replica %+v size %d", key, rp, l.Size)
							}
						}
					}
				case 5:
					_, err := m.Exist(ctx, "", key)
					allowed("Exist", err)
				case 6:
					// UNAVAILABLE: removed, its SSD copy's deletion unconfirmed
					// (n0 takes no removals) when removals wait.
					allowed("Remove", m.Remove(ctx, "", key, r.IntN(2) == 0), kverr.ObjectNotFound, kverr.ObjectHasLease, kverr.ReplicaIsNotReady, kverr.UnavailableInCurrentStatus)
				case 7:
					m.EvictNow(ctx)
					fc.Advance(time.Duration(r.IntN(3000)) * time.Millisecond)
				case 8:
					seg := fmt.Sprintf("x%d", w%2)
					if r.IntN(2) == 0 {
						allowed("Mount", m.MountSegment(ctx, "xnode", Segment{Name: seg, Size: 32 << 10}))
					} else {
						allowed("Unmount", m.UnmountSegment(ctx, "xnode", seg, 0), kverr.SegmentNotFound)
					}
				case 9:
					res, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "n0", OffloadSlots: 4, Disk: &DiskStats{Capacity: 1 << 30}})
					allowed("Heartbeat", err)
					// Half the tasks end at once, the others at this
					// worker's next heartbeat: removals meet copies being made.
					done := pending
					pending = nil
					for _, task := range res.Offload {
						if r.IntN(2) == 0 {
							pending = append(pending, task)
						} else {
							done = append(done, task)
						}
					}
					for _, task := range done {
						allowed("OffloadDone", m.OffloadDone(ctx, OffloadResult{Client: "n0", Tenant: task.Tenant, Key: task.Key, OK: r.IntN(4) != 0, Bucket: 1, Length: task.Size}),
							kverr.ObjectNotFound, kverr.ReplicaIsNotReady)
					}
					if r.IntN(20) == 0 {
						allowed("DropBucket", m.DropBucket(ctx, "n0", 1))
					}
					m.Reap(ctx)
				}
			}
		}(w)
	}
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Fatal(b)
	}
	checkInv(t, m)
	if gets.Load() == 0 {
		t.Fatal("no successful read: the test exercised nothing")
	}
	// Quiesce: finish or revoke what is in flight, then remove everything.
	fc.Advance(DefaultPutReleaseTimeout + DefaultOffloadTimeout)
	m.Reap(ctx)
	m.Heartbeat(ctx, HeartbeatRequest{Client: "n0", Disk: &DiskStats{Capacity: 1 << 30}})
	if n, _ := m.RemoveAll(ctx, "", true); m.Stats(ctx).Objects != 0 {
		t.Fatalf("RemoveAll removed %d, %d objects left", n, m.Stats(ctx).Objects)
	}
	for _, s := range m.ListSegments(ctx) {
		if s.Used != 0 || s.Replicas != 0 {
			t.Fatalf("segment %s still holds %d bytes / %d replicas", s.Segment.Name, s.Used, s.Replicas)
		}
	}
}
