package crc32c

import (
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestMatchesHashCRC32: every length around the vector path's boundaries,
// unaligned starts and arbitrary initial values give hash/crc32's answer.
func TestMatchesHashCRC32(t *testing.T) {
	if !haveFold {
		t.Logf("no AVX-512 VPCLMULQDQ on this CPU: testing the hash/crc32 path only")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 3<<20)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lengths := []int{0, 1, 255, 256, 1023, 1024, 1025, 1279, 1280, 1536, 4095, 4096, 4097, 65536 + 17, 1 << 20, 3<<20 - 64}
	for n := 0; n < 3000; n += 37 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		for _, start := range []int{0, 1, 7, 63} {
			if start+n > len(buf) {
				continue
			}
			p := buf[start : start+n]
			for _, init := range []uint32{0, 0xFFFFFFFF, rng.Uint32()} {
				if got, want := Update(init, p), crc32.Update(init, table, p); got != want {
					t.Fatalf("len %d start %d init %08x: %08x, want %08x", n, start, init, got, want)
				}
			}
		}
	}
	// Streaming: pieces of any size chain like one call.
	crc := uint32(0)
	for off := 0; off < len(buf); {
		n := min(1+rng.IntN(300000), len(buf)-off)
		crc = Update(crc, buf[off:off+n])
		off += n
	}
	if want := crc32.Checksum(buf, table); crc != want || Checksum(buf) != want {
		t.Fatalf("streamed %08x, one call %08x, want %08x", crc, Checksum(buf), want)
	}
}

// xpow is x^e modulo the Castagnoli polynomial, normal bit order.
func xpow(e int) uint32 {
	r := uint32(1)
	for range e {
		hi := r & 0x80000000
		r <<= 1
		if hi != 0 {
			r ^= 0x1EDC6F41
		}
	}
	return r
}

// TestFoldConstants derives the constants in fold_amd64.s: for a fold
// distance of T bits, bit-reversed x^(T+31) and x^(T-33) modulo P.
func TestFoldConstants(t *testing.T) {
	for _, c := range []struct {
		T      int
		lo, hi uint32
	}{{2048, 0xdcb17aa4, 0xb9e02b86}, {512, 0x740eef02, 0x9e4addf8}} {
		if lo, hi := bits.Reverse32(xpow(c.T+31)), bits.Reverse32(xpow(c.T-33)); lo != c.lo || hi != c.hi {
			t.Fatalf("T=%d: derived %08x %08x, the assembly has %08x %08x", c.T, lo, hi, c.lo, c.hi)
		}
	}
}

func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), make([]byte, 2048))
	f.Add(uint32(0xdeadbeef), []byte("kvtier"))
	f.Fuzz(func(t *testing.T, init uint32, p []byte) {
		if got, want := Update(init, p), crc32.Update(init, table, p); got != want {
			t.Fatalf("len %d: %08x, want %08x", len(p), got, want)
		}
	})
}

func BenchmarkChecksum(b *testing.B) {
	for _, n := range []int{4 << 10, 64 << 10, 1 << 20, 16 << 20} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i * 7)
		}
		b.Run(sizeName(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			var base, ours float64
			for b.Loop() {
				t0 := nanotime()
				crc32.Checksum(p, table)
				t1 := nanotime()
				Checksum(p)
				t2 := nanotime()
				base += float64(t1 - t0)
				ours += float64(t2 - t1)
			}
			b.ReportMetric(base/ours, "x-hash/crc32")
		})
	}
}

func TestCombine(t *testing.T) {
	data := make([]byte, 1<<20+77)
	for i := range data {
		data[i] = byte(i*7 + i>>11)
	}
	want := crc32.Checksum(data, table)
	for _, cut := range []int{0, 1, 4095, 65536, 1 << 19, len(data) - 1, len(data)} {
		a, b := data[:cut], data[cut:]
		if got := Combine(Checksum(a), Checksum(b), uint64(len(b))); got != want {
			t.Fatalf("cut %d: combined %08x, want %08x", cut, got, want)
		}
	}
}

func FuzzCombine(f *testing.F) {
	f.Add([]byte("hello, world"), uint16(5))
	f.Add([]byte{}, uint16(0))
	f.Add(make([]byte, 300), uint16(299))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		c := min(int(cut), len(data))
		got := Combine(crc32.Checksum(data[:c], table), crc32.Checksum(data[c:], table), uint64(len(data)-c))
		if want := crc32.Checksum(data, table); got != want {
			t.Fatalf("combined %08x, want %08x", got, want)
		}
	})
}

// TestCopyUpdate: the copy is exact (and touches nothing past len(src)) and
// the checksum is hash/crc32's, for every length around the vector path's
// block and threshold edges and for unaligned buffers.
func TestCopyUpdate(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	src := make([]byte, 1<<20+333)
	for i := range src {
		src[i] = byte(r.Uint32())
	}
	for _, n := range []int{0, 1, 255, 256, 1023, 1024, 1025, 1280, 4096 + 17, 65536, 1 << 20, 1<<20 + 333} {
		for _, off := range []int{0, 1, 7} {
			if off+n > len(src) {
				continue
			}
			s := src[off : off+n]
			dst := make([]byte, n+64)
			for i := range dst {
				dst[i] = 0xEE
			}
			for _, init := range []uint32{0, 0xDEADBEEF} {
				got := CopyUpdate(init, dst[3:3+n], s)
				if want := crc32.Update(init, table, s); got != want {
					t.Fatalf("n=%d off=%d init=%x: crc %08x, want %08x", n, off, init, got, want)
				}
				if string(dst[3:3+n]) != string(s) {
					t.Fatalf("n=%d off=%d: copy differs", n, off)
				}
				if dst[0] != 0xEE || dst[1] != 0xEE || dst[2] != 0xEE || dst[3+n] != 0xEE {
					t.Fatalf("n=%d off=%d: bytes outside dst written", n, off)
				}
			}
		}
	}
}

func FuzzCopyUpdate(f *testing.F) {
	f.Add([]byte("hello"), uint32(0))
	f.Add(make([]byte, 2000), uint32(1))
	f.Fuzz(func(t *testing.T, p []byte, init uint32) {
		dst := make([]byte, len(p))
		if got, want := CopyUpdate(init, dst, p), crc32.Update(init, table, p); got != want || string(dst) != string(p) {
			t.Fatalf("len %d: crc %08x want %08x, copy ok %v", len(p), got, want, string(dst) == string(p))
		}
	})
}

func BenchmarkCopyUpdate(b *testing.B) {
	src := make([]byte, 1<<20)
	dst := make([]byte, 1<<20)
	b.Run("fused", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			CopyUpdate(0, dst, src)
		}
	})
	b.Run("copy-then-checksum-64KiB-chunks", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			var crc uint32
			for off := 0; off < len(src); off += 64 << 10 {
				copy(dst[off:off+64<<10], src[off:off+64<<10])
				crc = Update(crc, dst[off:off+64<<10])
			}
			_ = crc
		}
	})
	b.Run("copy-only", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for b.Loop() {
			copy(dst, src)
		}
	})
}
