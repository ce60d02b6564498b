package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// BenchmarkPutAtWatermark: puts from this process into a `kvtier
// standalone` whose DRAM sits at its high watermark (every put is paid for
// by an eviction), beside the same puts into a second standalone kept
// empty, interleaved in rounds in the same run (4 callers, shared memory as
// `kvtier bench` uses it). The empty store's keys are removed after each of
// its rounds (untimed), so it never evicts. Both stores have 512 MiB of
// DRAM; offload off, and again offload immediate onto an SSD directory on
// tmpfs (/dev/shm: a fast SSD; both stores alike, 1 GiB of SSD each). The
// /tcp cases (64 KiB in batches of 16, 1 MiB single) run with shared memory
// off, as a remote client would. Reported: keys/s of each and full/empty
// (target ≥ 0.8).
//
// With offload immediate an object leaves DRAM only once its SSD copy has
// landed, so the full store's put rate is its offload rate, and the empty
// store pays for the same offloads while it is measured (its keys are
// removed only once offloaded). Small objects used to be offloaded far
// slower than they were put (4 KiB batches: 2.2k keys/s full, 0.04 of the
// empty store): each was reported with its own OffloadDone, at most 64 per
// worker waited for a commit, and the master's task FIFO copied its rest at
// every TakeOffload. The appliance now reports each group commit's objects
// in one BatchOffloadDone, keeps up to 16384 in flight, and takes its tasks
// up to 1024 per stream message (README, "puts at the watermark").
//
//	go test -run '^$' -bench BenchmarkPutAtWatermark -benchtime 40x ./tests/
func BenchmarkPutAtWatermark(b *testing.B) {
	if testing.Short() {
		b.Skip("multi-process benchmark skipped under -short")
	}
	type bcase struct {
		size, batch int
		calls       int64 // per round, over the 4 callers
		tcp         bool  // shared memory off: every byte over the data port (a remote client)
	}
	cases := []bcase{{4 << 10, 1, 256, false}, {4 << 10, 128, 8, false}, {1 << 20, 1, 32, false}, {1 << 20, 8, 4, false},
		{64 << 10, 16, 16, true}, {1 << 20, 1, 32, true}}
	for _, offload := range []string{"off", "immediate"} {
		for _, bc := range cases {
			name := fmt.Sprintf("offload=%s/%dKiB/batch=%d", offload, bc.size>>10, bc.batch)
			if bc.tcp {
				name += "/tcp"
			}
			b.Run(name, func(b *testing.B) {
				// A fresh pair per case: no case inherits another's backlog
				// of objects waiting for their SSD copy.
				empty := startWatermarkStore(b, offload, false, bc.tcp)
				full := startWatermarkStore(b, offload, true, bc.tcp)
				benchWatermark(b, empty, full, bc.size, bc.batch, bc.calls)
			})
		}
	}
}

type wmStore struct {
	cl   *client.Client
	http string
}

// startWatermarkStore starts a store; KVTIER_BENCH_PROFILE=FILE writes
// the CPU profile of the full one (prof true) there. With tcp its client
// does not map the store's shared memory.
func startWatermarkStore(b *testing.B, offload string, prof, tcp bool) *wmStore {
	ssd, profile := "", ""
	if prof {
		profile = os.Getenv("KVTIER_BENCH_PROFILE")
	}
	if offload != "off" {
		ssd = fastDir(b)
	}
	a := startProcB(b, "standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--dram", "512MiB",
		"--ssd-dir", ssd, "--ssd-capacity", "1GiB", "--offload", offload, "--cpuprofile", profile)
	c := &benchCluster{grpc: a["grpc"]}
	if tcp {
		return &wmStore{cl: c.newClientWith(b, client.Config{Transfer: transfer.Config{DisableSharedMemory: true}}), http: a["http"]}
	}
	return &wmStore{cl: c.newClient(b), http: a["http"]}
}

// fastDir is a directory on tmpfs (/dev/shm) when there is one, the
// fastest "SSD" a machine without a spare NVMe drive has; else the test's
// temporary directory.
func fastDir(b *testing.B) string {
	d, err := os.MkdirTemp("/dev/shm", "kvtier-wm-")
	if err != nil {
		b.Logf("no tmpfs for the SSD tier (%v): using the temporary directory", err)
		return b.TempDir()
	}
	b.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// evictions reads kvtier_evictions_total from the store's /metrics.
func (s *wmStore) evictions(b *testing.B) float64 {
	resp, err := http.Get("http://" + s.http + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "kvtier_evictions_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatal("no kvtier_evictions_total in /metrics")
	return 0
}

var wmSeq atomic.Int64

// put runs calls puts of batch keys of val's size from 4 callers and
// returns the keys and the time taken.
func (s *wmStore) put(b *testing.B, val []byte, batch int, calls int64) ([]string, time.Duration) {
	ctx := context.Background()
	vals := make([][]byte, batch)
	for i := range vals {
		vals[i] = val
	}
	var mu sync.Mutex
	var all []string
	d, err := parallel(4, calls, func(g int, i int64) error {
		keys := make([]string, batch)
		base := wmSeq.Add(1)
		for k := range keys {
			keys[k] = fmt.Sprintf("wm/%d/%d/%d", len(val), base, k)
		}
		if batch == 1 {
			if err := s.cl.Put(ctx, keys[0], val); err != nil {
				return err
			}
		} else {
			for _, err := range s.cl.BatchPut(ctx, keys, vals) {
				if err != nil {
					return err
				}
			}
		}
		mu.Lock()
		all = append(all, keys...)
		mu.Unlock()
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return all, d
}

// remove removes keys, waiting for those still being offloaded (offload
// immediate refuses to remove those until the SSD copy is written).
func (s *wmStore) remove(b *testing.B, keys []string) {
	ctx := context.Background()
	deadline := time.Now().Add(time.Minute)
	for len(keys) > 0 {
		var again []string
		for off := 0; off < len(keys); off += 1024 {
			k := keys[off:min(len(keys), off+1024)]
			for i, err := range s.cl.BatchRemove(ctx, k, true) {
				switch {
				case err == nil || kverr.Is(err, kverr.ObjectNotFound):
				case kverr.Is(err, kverr.ReplicaIsNotReady) && time.Now().Before(deadline):
					again = append(again, k[i])
				default:
					b.Fatal(err)
				}
			}
		}
		if keys = again; len(keys) > 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func benchWatermark(b *testing.B, empty, full *wmStore, size, batch int, calls int64) {
	val := bytes.Repeat([]byte{0x5a}, size)
	// Fill the full store with objects of this size until it evicts (its
	// DRAM is then at the high watermark, less the background evictor's
	// headroom), and once more over: the earlier cases' objects go.
	// At most 16 MiB in flight: objects being written cannot be evicted.
	fb := max(1, min(64, (1<<20)/size))
	start := full.evictions(b)
	for full.evictions(b) == start {
		full.put(b, val, fb, 16)
	}
	for range (512 << 20) / (size * fb * 16) {
		full.put(b, val, fb, 16)
	}
	var tEmpty, tFull time.Duration
	before := full.evictions(b)
	b.ResetTimer()
	for range b.N {
		keys, d := empty.put(b, val, batch, calls)
		tEmpty += d
		b.StopTimer()
		empty.remove(b, keys)
		b.StartTimer()
		_, d = full.put(b, val, batch, calls)
		tFull += d
	}
	b.StopTimer()
	n := float64(int64(b.N) * calls * int64(batch))
	if ev := full.evictions(b) - before; ev == 0 && n*float64(size) > 64<<20 {
		b.Fatalf("the full store evicted nothing while measured (%v keys)", n)
	}
	if ev := empty.evictions(b); ev != 0 {
		b.Fatalf("the empty store evicted %v objects", ev)
	}
	b.ReportMetric(n/tEmpty.Seconds(), "empty-keys/s")
	b.ReportMetric(n/tFull.Seconds(), "full-keys/s")
	b.ReportMetric(tEmpty.Seconds()/tFull.Seconds(), "full/empty")
}
