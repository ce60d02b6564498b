package namespace_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/fiotest"
	"github.com/kvtier/kvtier/nof/namespace"
)

// BenchmarkFileSeq128KQD8 drives a File namespace directly (no network)
// with 8 goroutines of 128 KiB sequential direct I/O through StartRead /
// StartWrite, beside fio (libaio, iodepth 8, direct=1) on the same file in
// the same run: the ceiling the NVMe/TCP target's file-backed figures can
// reach. Run with go test -run XXX -bench . -benchtime 1x ./nof/namespace/

func BenchmarkFileSeq128KQD8(b *testing.B) {
	for _, rw := range []string{"read", "write"} {
		b.Run(rw, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "backing.img")
			f, err := namespace.OpenFile(path, namespace.FileConfig{Size: 256 << 20})
			if err != nil {
				b.Skipf("O_DIRECT not available here: %v", err)
			}
			defer f.Close()
			fill := namespace.AlignedBuffer(1 << 20)
			for off := int64(0); off < f.Size(); off += int64(len(fill)) {
				if err := f.WriteAt(context.Background(), fill, off); err != nil {
					b.Fatal(err)
				}
			}
			// Alternating one-second rounds, so load from other work on
			// the shared machine falls on both sides alike.
			const bs, qd, rounds = 128 << 10, 8, 3
			b.ResetTimer()
			var ours, fio float64
			haveFio := true
			for i := 0; i < b.N; i++ {
				for r := 0; r < rounds; r++ {
					var m float64
					if r%2 == 0 && haveFio {
						m, haveFio = fioMBps(b, path, rw, bs, qd, time.Second)
					}
					ours += drive(b, f, rw == "write", bs, qd, time.Second)
					if r%2 == 1 && haveFio {
						m, haveFio = fioMBps(b, path, rw, bs, qd, time.Second)
					}
					fio += m
				}
			}
			ours /= float64(b.N * rounds)
			fio /= float64(b.N * rounds)
			b.ReportMetric(ours, "MB/s")
			if haveFio {
				b.ReportMetric(fio, "fio-MB/s")
				b.ReportMetric(ours/fio, "ratio-vs-fio")
			}
		})
	}
}

func drive(b *testing.B, f *namespace.File, write bool, bs, qd int, d time.Duration) float64 {
	var seq, n atomic.Int64
	slots := f.Size() / int64(bs)
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < qd; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := namespace.AlignedBuffer(bs)
			for time.Now().Before(deadline) {
				off := (seq.Add(1) % slots) * int64(bs)
				var wait func() error
				var err error
				if write {
					wait, err = f.StartWrite(buf, off)
				} else {
					wait, err = f.StartRead(buf, off)
				}
				if err == nil {
					err = wait()
				}
				if err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()*int64(bs)) / time.Since(start).Seconds() / 1e6
}

func fioMBps(b *testing.B, path, rw string, bs, qd int, d time.Duration) (float64, bool) {
	r, err := fiotest.Run(path, rw, bs, qd, d)
	if errors.Is(err, fiotest.ErrNotInstalled) {
		b.Logf("no fio baseline: %v", err)
		return 0, false
	}
	if err != nil {
		b.Fatal(err)
	}
	return r.MBps, true
}
