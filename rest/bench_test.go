package rest_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/rest"
	"github.com/kvtier/kvtier/rest/resttest"
)

// BenchmarkObjectMetadata measures GET /api/v1/objects/{key} over loopback
// HTTP beside its baseline, the same GetObject called in-process on the
// master, and reports the ratio (the cost of the REST edge: HTTP, routing,
// JSON).
func BenchmarkObjectMetadata(b *testing.B) {
	c := resttest.Start(b, resttest.Options{})
	if err := c.DP.Put(context.Background(), "bench/key", make([]byte, 4096), rest.PutOptions{Replicas: 1}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := &kvtierpb.KeyRequest{Tenant: "default", Key: []byte("bench/key")}
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := c.MS.GetObject(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	base := time.Since(start)
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	url := c.URL + "/api/v1/objects/bench%2Fkey"
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := cl.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			b.Fatalf("status %d", res.StatusCode)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), "baseline-ns/op")
	if base > 0 {
		b.ReportMetric(float64(b.Elapsed())/float64(base), "x-baseline")
	}
}
