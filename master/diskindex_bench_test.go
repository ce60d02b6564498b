package master

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// diskMaster returns a master whose appliance A holds unrelated SSD-only
// objects in buckets 1.. (8192 a bucket).
func diskMaster(tb testing.TB, unrelated int) *Master {
	tb.Helper()
	m, err := New(Config{OffloadMode: OffloadOff, MaxObjects: unrelated + 1<<20})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "A", Endpoint: "A:7", Disk: &DiskStats{Capacity: 1 << 40}}); err != nil {
		tb.Fatal(err)
	}
	objs := make([]DiskObject, 0, 4096)
	for i := 0; i < unrelated; i++ {
		objs = append(objs, DiskObject{Key: fmt.Sprintf("unrelated/%08d", i), Size: 4096, Length: 4096,
			Bucket: 1 + uint64(i/8192), Offset: uint64(i%8192) * 4096})
		if len(objs) == cap(objs) || i == unrelated-1 {
			if _, err := m.RegisterDiskObjects(ctx, "A", objs); err != nil {
				tb.Fatal(err)
			}
			objs = objs[:0]
		}
	}
	return m
}

// fillBucket registers n objects of bucket b on A.
func fillBucket(tb testing.TB, m *Master, b uint64, n int) {
	objs := make([]DiskObject, n)
	for i := range objs {
		objs[i] = DiskObject{Key: fmt.Sprintf("victim/%d", i), Size: 4096, Length: 4096, Bucket: b, Offset: uint64(i) * 4096}
	}
	errs, err := m.RegisterDiskObjects(ctx, "A", objs)
	if err != nil || errs[0] != nil {
		tb.Fatal(err, errs[0])
	}
}

// BenchmarkDropBucket: dropping one bucket of 64 objects beside 10k or 1M
// unrelated SSD objects, through the disk index (DropBucket) and through
// the scan of every object it replaced (dropReplicas with the same
// predicate), alternated in every iteration so both see the same load.
// Reported: index-ns and scan-ns per drop, and their ratio.
//
//	go test -run '^$' -bench DropBucket -benchtime 200x ./master/
func BenchmarkDropBucket(b *testing.B) {
	for _, unrelated := range []int{10_000, 1_000_000} {
		m := diskMaster(b, unrelated)
		c := m.clients.get("A")
		const victim = 1 << 30
		b.Run(fmt.Sprintf("unrelated=%d", unrelated), func(b *testing.B) {
			var idx, scan time.Duration
			for range b.N {
				fillBucket(b, m, victim, 64)
				t0 := time.Now()
				if err := m.DropBucket(ctx, "A", victim); err != nil {
					b.Fatal(err)
				}
				idx += time.Since(t0)
				fillBucket(b, m, victim, 64)
				t0 = time.Now()
				m.dropReplicas(func(r *replica) bool { return r.disk == c && r.bucket == victim })
				scan += time.Since(t0)
				// The scan left the index entries behind: drop them too.
				m.dropDisk(c, victim, dropBucket)
			}
			b.ReportMetric(float64(idx.Nanoseconds())/float64(b.N), "index-ns/drop")
			b.ReportMetric(float64(scan.Nanoseconds())/float64(b.N), "scan-ns/drop")
			b.ReportMetric(float64(scan)/float64(idx), "scan/index")
		})
		if err := m.CheckInvariants(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDiskIndexMemory measures the heap the disk index takes per SSD-only
// object (logged; it fails only past a generous bound).
func TestDiskIndexMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 200k objects")
	}
	const n = 200_000
	m := diskMaster(t, n)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	with := heap()
	for i := range m.shards {
		m.shards[i].disk = make(map[diskRef]map[string]struct{})
	}
	without := heap()
	per := float64(with-without) / n
	t.Logf("disk index: %.1f heap bytes per SSD object (%d objects, 8192 a bucket)", per, n)
	if per > 80 {
		t.Fatalf("disk index takes %.1f bytes per object", per)
	}
	runtime.KeepAlive(m)
}
