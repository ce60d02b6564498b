package bench

import (
	"context"
	"testing"
	"time"
)

// BenchmarkGetMemStore measures the workload driver's own overhead: 1 MiB
// GetInto from an in-memory store (one copy per op), beside copy() of the
// same bytes in the same run; "x_memcpy" is driver GB/s over memcpy GB/s.
func BenchmarkGetMemStore(b *testing.B) {
	s := newTestMemStore()
	d := 200 * time.Millisecond
	var gb float64
	for b.Loop() {
		rs, err := Run(context.Background(), Options{Ops: []string{OpGet}, Sizes: []int{1 << 20}, Duration: d, KeyBudgetBytes: 16 << 20}, s, nil)
		if err != nil {
			b.Fatal(err)
		}
		gb = rs[0].GBytesPerSec
	}
	m := Memcpy(1<<20, d)
	b.ReportMetric(gb, "GB/s")
	b.ReportMetric(m.GBytesPerSec, "memcpy_GB/s")
	b.ReportMetric(gb/m.GBytesPerSec, "x_memcpy")
}

// BenchmarkRawTCP measures the Go loopback request/response baseline (1 MiB,
// one connection) beside copy() of the same bytes in the same run.
func BenchmarkRawTCP(b *testing.B) {
	var r Result
	for b.Loop() {
		var err error
		if r, err = RawTCP(context.Background(), 1<<20, 1, 200*time.Millisecond); err != nil {
			b.Fatal(err)
		}
	}
	m := Memcpy(1<<20, 200*time.Millisecond)
	b.ReportMetric(r.GBytesPerSec, "GB/s")
	b.ReportMetric(r.GBytesPerSec/m.GBytesPerSec, "x_memcpy")
}
