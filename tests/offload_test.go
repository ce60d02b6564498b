package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/internal/fiotest"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// TestOffloadDoesNotWaitForHeartbeats: an appliance whose heartbeats come
// once an hour still offloads every object as soon as its put ends
// (TakeOffload), so a stream of puts three times the size of DRAM goes
// through: DRAM frees itself by evicting objects that reached SSD, and
// every object reads back byte for byte. Before TakeOffload, offload tasks
// travelled only on heartbeats, and these puts stalled once DRAM was full
// (NO_AVAILABLE_HANDLE until the next beat).
func TestOffloadDoesNotWaitForHeartbeats(t *testing.T) {
	ip := startInproc(t, master.Config{})
	ip.appliance(t, appliance.Config{Name: "box", DRAM: 16 << 20, SSDDir: t.TempDir(), SSDCapacity: 1 << 30,
		HeartbeatInterval: time.Hour})
	c := ip.client(t)
	ctx := context.Background()
	const n, size = 48, 1 << 20
	values := make([][]byte, n)
	for i := range values {
		values[i] = randomBytes(uint64(9000+i), size)
		key := fmt.Sprintf("stream/%02d", i)
		// Puts meeting a DRAM full of objects whose offload is still
		// running are refused (NO_AVAILABLE_HANDLE) and retried, as a
		// client would; each must get through within seconds.
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := c.Put(ctx, key, values[i])
			if err == nil {
				break
			}
			if !kverr.Is(err, kverr.NoAvailableHandle) || time.Now().After(deadline) {
				t.Fatalf("put %s (DRAM 16 MiB, %d MiB put so far): %v", key, i, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	onDisk := 0
	for i := range values {
		key := fmt.Sprintf("stream/%02d", i)
		info, err := c.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range info.Replicas {
			if r.Type == kvtierpb.ReplicaType_LOCAL_DISK && r.State == kvtierpb.ReplicaState_COMPLETE {
				onDisk++
			}
		}
		got, err := c.Get(ctx, key)
		if err != nil || !bytes.Equal(got, values[i]) {
			t.Fatalf("get %s: %v (bytes equal: %v)", key, err, bytes.Equal(got, values[i]))
		}
	}
	if onDisk < n-16 { // all but what DRAM still holds unoffloaded, at most
		t.Fatalf("only %d of %d objects reached SSD", onDisk, n)
	}
}

// BenchmarkIngestBeyondDRAM: 1 MiB puts from four callers into an
// appliance whose DRAM holds 64 of them, so that past the first 64 every
// put waits for offloads to SSD to make room (the steady state of a cache
// bigger than its DRAM); beside fio writing 1 MiB blocks at depth 2 (the
// appliance's two offload workers) to a file in the same directory, in the
// same run, for as long. kvtier/fio is the ratio of the two throughputs.
//
//	go test -run '^$' -bench IngestBeyondDRAM -benchtime 2000x ./tests/
func BenchmarkIngestBeyondDRAM(b *testing.B) {
	const size, callers = 1 << 20, 4
	dir := b.TempDir()
	ip := startInproc(b, master.Config{})
	ip.appliance(b, appliance.Config{Name: "box", DRAM: 64 << 20, SSDDir: dir + "/ssd", SSDCapacity: 64 << 30})
	c := ip.client(b)
	ctx := context.Background()
	v := randomBytes(77, size)
	var next atomic.Int64
	b.SetBytes(size)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if err := c.Put(ctx, fmt.Sprintf("ingest/%d", i), v); err != nil {
					errs <- fmt.Errorf("put %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	kv := float64(b.N) * size / elapsed.Seconds() / 1e9
	b.ReportMetric(kv, "kvtier-GB/s")
	path := dir + "/fio.dat"
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.Truncate(path, 4<<30); err != nil {
		b.Fatal(err)
	}
	r, err := fiotest.Run(path, "write", size, 2, max(elapsed, time.Second))
	if errors.Is(err, fiotest.ErrNotInstalled) {
		b.Logf("no fio baseline: %v", err)
		return
	}
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.MBps/1e3, "fio-GB/s")
	b.ReportMetric(kv/(r.MBps/1e3), "kvtier/fio")
}
