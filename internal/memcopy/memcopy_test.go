package memcopy

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNonTemporalMatchesCopy: every length around the thresholds, at every
// alignment of dst within a cache line, copies exactly what copy does and
// touches nothing outside dst.
func TestNonTemporalMatchesCopy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 1<<20+300)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	const guard = 0xA5
	for _, n := range []int{0, 1, 31, 127, minNT - 1, minNT, minNT + 1, minNT + 127, 1 << 20, 1<<20 + 37} {
		for _, align := range []int{0, 1, 7, 31, 32, 33, 63} {
			buf := make([]byte, n+align+128)
			for i := range buf {
				buf[i] = guard
			}
			dst := buf[align : align+n]
			if got := NonTemporal(dst, src[:n]); got != n {
				t.Fatalf("n %d align %d: returned %d", n, align, got)
			}
			if !bytes.Equal(dst, src[:n]) {
				t.Fatalf("n %d align %d: bytes differ from the source", n, align)
			}
			for i, b := range buf {
				if (i < align || i >= align+n) && b != guard {
					t.Fatalf("n %d align %d: byte %d outside dst changed", n, align, i)
				}
			}
		}
	}
	// Shorter dst or src: like copy, the shorter length.
	dst := make([]byte, minNT*2)
	if got := NonTemporal(dst, src[:minNT+5]); got != minNT+5 || !bytes.Equal(dst[:minNT+5], src[:minNT+5]) {
		t.Fatalf("short src: %d", got)
	}
	if got := NonTemporal(dst[:minNT+9], src); got != minNT+9 || !bytes.Equal(dst[:minNT+9], src[:minNT+9]) {
		t.Fatalf("short dst: %d", got)
	}
}

// BenchmarkNonTemporal copies 1 MiB into successive offsets of a 1 GiB
// shared memory mapping (so the destination is never in the cache, as an
// appliance segment's fresh space is not), with copy and with NonTemporal
// taking turns chunk by chunk, and reports their ratio.
func BenchmarkNonTemporal(b *testing.B) {
	const total = 1 << 30
	fd, err := unix.MemfdCreate("memcopy-bench", 0)
	if err != nil {
		b.Skipf("memfd_create: %v", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, total); err != nil {
		b.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		b.Skipf("mmap: %v", err)
	}
	defer unix.Munmap(mem)
	src := make([]byte, 1<<20)
	for i := range src {
		src[i] = byte(i)
	}
	var tCopy, tNT time.Duration
	off := 0
	b.SetBytes(int64(len(src)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, nt := range []bool{false, true} {
			if off+len(src) > total {
				off = 0
			}
			d := mem[off : off+len(src)]
			off += len(src)
			t0 := time.Now()
			if nt {
				NonTemporal(d, src)
				tNT += time.Since(t0)
			} else {
				copy(d, src)
				tCopy += time.Since(t0)
			}
		}
	}
	b.ReportMetric(float64(tCopy)/float64(b.N)/1e3, "copy-us/MiB")
	b.ReportMetric(float64(tNT)/float64(b.N)/1e3, "nontemporal-us/MiB")
	b.ReportMetric(float64(tCopy)/float64(tNT), "speedup")
}
