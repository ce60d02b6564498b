package ssd

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkRemove: what recording a removal costs the SSD tier (one
// append and one fdatasync of the removals log), object by object beside
// a Put of a 4 KiB object on the same tier in the same run (one O_DIRECT
// write and a commit of two fdatasyncs). remove/put is the ratio.
//
//	go test -run '^$' -bench 'Remove$' -benchtime 500x ./ssd/
func BenchmarkRemove(b *testing.B) {
	tr := openTier(b, Config{})
	v := value(1, 4096)
	var put, rm time.Duration
	for i := range b.N {
		k := fmt.Sprint(i)
		t0 := time.Now()
		mustPut(b, tr, k, v)
		t1 := time.Now()
		mustRemove(b, tr, Removal{Tenant: "t", Key: k})
		rm += time.Since(t1)
		put += t1.Sub(t0)
	}
	b.ReportMetric(float64(rm.Microseconds())/float64(b.N), "µs/remove")
	b.ReportMetric(float64(put.Microseconds())/float64(b.N), "µs/put4KiB")
	b.ReportMetric(float64(rm)/float64(put), "remove/put")
}
