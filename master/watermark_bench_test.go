package master

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/clock"
)

// BenchmarkPutAtWatermark measures puts (PutStart + PutEnd) into a master
// whose DRAM sits at its high watermark, so that every put is paid for by an
// eviction, beside the same puts into an empty master, interleaved in one
// run (alternating rounds, 4 callers each) so both see the same machine
// load. The empty store is replaced by a fresh one before it reaches 80 %
// of its capacity, so it is measured while DRAM fills, never evicting. Both masters run their background evictor (Run). Target: full ≥
// 0.8 × empty in keys/s, for single and batch (128 keys) puts of 4 KiB and
// 1 MiB. The full store holds 65536 objects (256 MiB of 4 KiB objects,
// 64 GiB of 1 MiB ones: sizes are only numbers to the master).
//
//	go test -run '^$' -bench PutAtWatermark -benchtime 400x ./master/
func BenchmarkPutAtWatermark(b *testing.B) {
	for _, size := range []uint64{4 << 10, 1 << 20} {
		for _, batch := range []int{1, batchN} {
			b.Run(fmt.Sprintf("size=%s/batch=%d", sizeName(size), batch), func(b *testing.B) {
				benchPutAtWatermark(b, size, batch)
			})
		}
	}
}

func sizeName(n uint64) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

const wmObjects = 65536 // objects the full store holds at capacity

// wmMaster returns a running master with one MEMORY segment of capacity
// bytes and offload off, and what stops it (also called at cleanup).
func wmMaster(b *testing.B, capacity uint64) (*Master, func()) {
	b.Helper()
	m, err := New(Config{Clock: clock.Real{}, OffloadMode: OffloadOff, ClientTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.MountSegment(context.Background(), "app", Segment{Name: "app/0", Size: capacity, Endpoint: "app:1"}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	stop := func() { cancel(); <-done }
	b.Cleanup(stop)
	return m, stop
}

func benchPutAtWatermark(b *testing.B, size uint64, batch int) {
	const callers = 4
	callsPerRound := 16 // 64 keys a round
	if batch > 1 {
		callsPerRound = 1 // 512 keys a round
	}
	// The empty store has the full one's capacity and is replaced by a
	// fresh one (untimed) before it reaches 80 %: puts "while DRAM fills".
	empty, stopEmpty := wmMaster(b, wmObjects*size)
	full, _ := wmMaster(b, wmObjects*size)
	// Fill until the background evictor has run.
	var seq atomic.Uint64
	for i := 0; i%1024 != 0 || full.Stats(ctx).Counters["evictions"] == 0; i++ {
		if i == 2*wmObjects {
			b.Fatal("filled twice over and nothing was evicted")
		}
		k := benchKey("fill-", seq.Add(1))
		if _, err := full.PutStart(ctx, PutRequest{Client: "w", Key: k, Size: size, Config: PutConfig{Replicas: 1}}); err != nil {
			b.Fatal(err)
		}
		full.PutEnd(ctx, "w", "", k)
	}
	round := func(m *Master) time.Duration {
		var wg sync.WaitGroup
		var failed atomic.Value
		t := time.Now()
		for c := 0; c < callers; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reqs := make([]PutRequest, batch)
				keys := make([]string, batch)
				for call := 0; call < callsPerRound; call++ {
					for i := range reqs {
						keys[i] = benchKey("k-", seq.Add(1))
						reqs[i] = PutRequest{Client: "w", Key: keys[i], Size: size, Config: PutConfig{Replicas: 1}}
					}
					if batch == 1 {
						if _, err := m.PutStart(ctx, reqs[0]); err != nil {
							failed.Store(err)
							return
						}
						m.PutEnd(ctx, "w", "", keys[0])
						continue
					}
					for _, r := range m.BatchPutStart(ctx, "w", "", reqs) {
						if r.Err != nil {
							failed.Store(r.Err)
							return
						}
					}
					m.BatchPutEnd(ctx, "w", "", keys)
				}
			}()
		}
		wg.Wait()
		if err := failed.Load(); err != nil {
			b.Fatal(err)
		}
		return time.Since(t)
	}
	var tEmpty, tFull time.Duration
	evicted := full.Stats(ctx).Counters["evictions"]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if c, u := empty.memoryUsage(); u > c/10*8 {
			b.StopTimer()
			stopEmpty()
			empty, stopEmpty = wmMaster(b, wmObjects*size)
			b.StartTimer()
		}
		tEmpty += round(empty)
		tFull += round(full)
	}
	b.StopTimer()
	keys := float64(b.N * callers * callsPerRound * batch)
	capacity, used := full.memoryUsage()
	if ev := full.Stats(ctx).Counters["evictions"] - evicted; keys > wmObjects/10 && ev == 0 {
		b.Fatalf("the full store evicted nothing while measured (use %d of %d)", used, capacity)
	}
	b.ReportMetric(keys/tEmpty.Seconds(), "empty-keys/s")
	b.ReportMetric(keys/tFull.Seconds(), "full-keys/s")
	b.ReportMetric(tEmpty.Seconds()/tFull.Seconds(), "full/empty")
	b.ReportMetric(float64(used)/float64(capacity), "full-use")
}
