package tests

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/master"
)

// BenchmarkRemoveAll100k: RemoveAll of 100,000 objects that all have an SSD
// copy (the master removes them, one cutoff goes to the appliance, which
// records it with one fdatasync and drops the objects from its index, then
// acknowledges), beside the same RemoveAll in a cluster without an SSD tier
// (the master's work alone), in the same run. kvtier/baseline is the ratio
// of the two latencies.
//
//	go test -run '^$' -bench RemoveAll100k -benchtime 1x ./tests/
func BenchmarkRemoveAll100k(b *testing.B) {
	const n, size = 100_000, 512
	ctx := context.Background()
	fill := func(b *testing.B, c *client.Client) {
		var next atomic.Int64
		var wg sync.WaitGroup
		v := randomBytes(1, size)
		for range 4 {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < n; i = next.Add(1) - 1 {
					if err := c.Put(ctx, fmt.Sprintf("rm/%06d", i), v); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	removeAll := func(b *testing.B, c *client.Client) time.Duration {
		start := time.Now()
		resp, err := c.Master().RemoveAll(ctx, &kvtierpb.RemoveAllRequest{})
		d := time.Since(start)
		if err != nil || resp.GetCount() != n {
			b.Fatalf("RemoveAll: %d, %v", resp.GetCount(), err)
		}
		return d
	}
	var withSSD, without time.Duration
	for range b.N {
		b.StopTimer()
		ip := startInproc(b, master.Config{})
		ip.appliance(b, appliance.Config{Name: "box", DRAM: 256 << 20, SSDDir: b.TempDir(), SSDCapacity: 4 << 30})
		c := ip.client(b)
		fill(b, c)
		deadline := time.Now().Add(5 * time.Minute)
		for {
			st, err := c.Master().Stats(ctx, &kvtierpb.Empty{})
			if err != nil {
				b.Fatal(err)
			}
			if st.Counters["offloads_completed"] >= n {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("only %d of %d offloaded", st.Counters["offloads_completed"], n)
			}
			time.Sleep(100 * time.Millisecond)
		}
		b.StartTimer()
		withSSD += removeAll(b, c)
		b.StopTimer()

		ip2 := startInproc(b, master.Config{})
		ip2.appliance(b, appliance.Config{Name: "box2", DRAM: 256 << 20})
		c2 := ip2.client(b)
		fill(b, c2)
		without += removeAll(b, c2)
	}
	b.ReportMetric(float64(withSSD.Milliseconds())/float64(b.N), "ms/removeall-ssd")
	b.ReportMetric(float64(without.Milliseconds())/float64(b.N), "ms/removeall-dram")
	b.ReportMetric(float64(withSSD)/float64(without), "kvtier/baseline")
}
