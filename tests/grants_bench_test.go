package tests

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// BenchmarkGrantCost measures the data-plane grants' cost: two `kvtier
// standalone` processes, one signing grants (the default) and one started
// with --data-grants=false (the open configuration), each driven by its
// own SDK client over loopback TCP (shared memory off); puts and gets of
// one size alternate between the two operation by operation (alternating
// which goes first), so both see the same machine load.
//
//	go test -run '^$' -bench GrantCost -benchtime 400x -count 3 ./tests/
//
// Reports grants-MB/s, open-MB/s and x-open (grants / open).
func BenchmarkGrantCost(b *testing.B) {
	mk := func(grants bool) *client.Client {
		m := startProcB(b, "standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--name", fmt.Sprintf("grant-bench-%v", grants), "--dram", "256MiB", "--ssd-dir", "", "--offload", "off",
			"--shm=false", fmt.Sprintf("--data-grants=%v", grants), "--cpuprofile", "")
		cl, err := client.New(context.Background(), client.Config{MasterAddr: m["grpc"], Transfer: transfer.Config{DisableSharedMemory: true}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cl.Close() })
		return cl
	}
	withGrants, open := mk(true), mk(false)
	ctx := context.Background()
	// The configurations are what they say: a request without a grant is
	// refused by the granted box and served by the open one.
	for _, c := range []struct {
		cl   *client.Client
		want kverr.Code
	}{{withGrants, kverr.PermissionDenied}, {open, kverr.OK}} {
		if err := c.cl.Put(ctx, "bench/probe", []byte("probe")); err != nil {
			b.Fatal(err)
		}
		info, err := c.cl.Stat(ctx, "bench/probe")
		if err != nil {
			b.Fatal(err)
		}
		r := info.Replicas[0]
		err = c.cl.Engine().Do(ctx, []transfer.Request{{Op: transfer.Read, Endpoint: r.Endpoint, Segment: r.Segment, Offset: r.Offset, Buf: make([]byte, 5)}})[0]
		if kverr.CodeOf(err) != c.want {
			b.Fatalf("a read without a grant: %v, want %v", err, c.want)
		}
	}
	alternateMedians(b, "bench", 7, [2]string{"grants", "open"}, [2]*client.Client{withGrants, open}, func(cl *client.Client, key string) {
		_ = cl.Remove(ctx, key, true)
	})
}

// medianDur is the median of d (sorted in place).
func medianDur(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

// alternateMedians puts or gets one object of 64 KiB and of 1 MiB at a time
// through each of two clients in turn (alternating which goes first, so
// both see the same machine load) and reports both rates from medians (on
// a shared machine a few descheduled operations would dominate sums) and
// their ratio x-NAMES[1] (names[0] / names[1]). afterPut runs, untimed,
// after each put (e.g. removing it).
func alternateMedians(b *testing.B, prefix string, seed uint64, names [2]string, cls [2]*client.Client, afterPut func(cl *client.Client, key string)) {
	ctx := context.Background()
	for _, size := range []int{64 << 10, 1 << 20} {
		val := randomBytes(seed, size)
		getKey := fmt.Sprintf("%s/get/%d", prefix, size)
		for _, op := range []string{"put", "get"} {
			b.Run(fmt.Sprintf("%s/%dKiB", op, size>>10), func(b *testing.B) {
				var ts [2][]time.Duration
				for _, cl := range cls {
					if err := cl.Put(ctx, getKey, val); err != nil && op == "get" {
						b.Fatal(err)
					}
				}
				one := func(k, i int) {
					cl := cls[k]
					t0 := time.Now()
					if op == "put" {
						key := fmt.Sprintf("%s/put/%d", prefix, i)
						if err := cl.Put(ctx, key, val); err != nil {
							b.Fatal(err)
						}
						ts[k] = append(ts[k], time.Since(t0))
						afterPut(cl, key)
						return
					}
					if _, err := cl.Get(ctx, getKey); err != nil {
						b.Fatal(err)
					}
					ts[k] = append(ts[k], time.Since(t0))
				}
				i := 0
				for b.Loop() {
					one(i%2, i)
					one(1-i%2, i)
					i++
				}
				m0, m1 := medianDur(ts[0]), medianDur(ts[1])
				b.ReportMetric(float64(size)/1e6/m0.Seconds(), names[0]+"-MB/s")
				b.ReportMetric(float64(size)/1e6/m1.Seconds(), names[1]+"-MB/s")
				b.ReportMetric(m1.Seconds()/m0.Seconds(), "x-"+names[1])
			})
		}
	}
}
