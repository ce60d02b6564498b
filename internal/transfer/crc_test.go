package transfer

import (
	"bytes"
	"hash/crc32"
	"testing"
)

// castagnoli is hash/crc32's CRC32C table, the reference the engine's
// checksums (internal/crc32c) are compared with.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func TestCopyCRC(t *testing.T) {
	data := randBytes(42, 1<<20+77)
	want := crc32.Checksum(data, castagnoli)
	if got := copyCRC(make([]byte, len(data)), data); got != want {
		t.Fatalf("copyCRC %08x, want %08x", got, want)
	}
	for _, n := range []int{4<<20 + 3, 9 << 20} { // the parallel path
		data := randBytes(7, n)
		if got, want := copyCRCParallel(make([]byte, n), data), crc32.Checksum(data, castagnoli); got != want {
			t.Fatalf("copyCRCParallel of %d bytes: %08x, want %08x", n, got, want)
		}
	}
}

// TestReadSum checks Request.Sum on every path: local copy, one TCP slice,
// many TCP slices spread over connections (combined in order); a WRITE's
// too, each slice summed as it is sent; a failed request leaves it alone.
func TestReadSum(t *testing.T) {
	const segSize = 8 << 20
	srv, mem, addr := serverEngine(t, "s0", segSize)
	cli := newEngine(t, Config{SliceSize: 64 << 10})
	for _, n := range []int{1, 4096, 64 << 10, 64<<10 + 1, 1 << 20, 3<<20 + 5} {
		off := uint64(segSize - n - 3)
		want := crc32.Checksum(mem[off:off+uint64(n)], castagnoli)
		for name, e := range map[string]*Engine{"tcp": cli, "local": srv} {
			var sum uint32
			dst := make([]byte, n)
			if err := do1(t, e, Request{Op: Read, Endpoint: addr, Segment: "s0", Offset: off, Buf: dst, Sum: &sum}); err != nil {
				t.Fatalf("%s read %d: %v", name, n, err)
			}
			if sum != want {
				t.Fatalf("%s read %d: sum %08x, want %08x", name, n, sum, want)
			}
		}
	}
	for _, n := range []int{100, 64<<10 + 1, 3<<20 + 5} {
		src := randBytes(uint64(n), n)
		var sum uint32
		if err := do1(t, cli, Request{Op: Write, Endpoint: addr, Segment: "s0", Buf: src, Sum: &sum}); err != nil || sum != crc32.Checksum(src, castagnoli) {
			t.Fatalf("write %d: err %v, sum %08x, want %08x", n, err, sum, crc32.Checksum(src, castagnoli))
		}
	}
	sum := uint32(7)
	if err := do1(t, cli, Request{Op: Write, Endpoint: addr, Segment: "s0", Offset: segSize - 10, Buf: make([]byte, 100), Sum: &sum}); err == nil || sum != 7 {
		t.Fatalf("out-of-bounds write: err %v, sum %d (want an error, untouched 7)", err, sum)
	}
	if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "s0", Offset: segSize - 10, Buf: make([]byte, 100), Sum: &sum}); err == nil || sum != 7 {
		t.Fatalf("out-of-bounds read: err %v, sum %d (want an error, untouched 7)", err, sum)
	}
}

// TestCopyCRCParallel: the parallel copy-and-checksum copies every byte and
// returns the CRC32C of the whole, for sizes around the part boundaries.
func TestCopyCRCParallel(t *testing.T) {
	for _, n := range []int{0, 1, parallelPart - 1, 2 * parallelPart, 2*parallelPart + 1, 3*parallelPart + 4095, 32 << 20} {
		src := make([]byte, n)
		fillPattern(src, uint64(n))
		dst := make([]byte, n)
		got := copyCRCParallel(dst, src)
		if want := crc32.Checksum(src, castagnoli); got != want {
			t.Fatalf("n=%d: crc %08x, want %08x", n, got, want)
		}
		if !bytes.Equal(dst, src) {
			t.Fatalf("n=%d: copy differs", n)
		}
	}
}

// TestReadSplitInHalves: a segment READ of splitReadMin up to SliceSize
// travels as two frames while two of the peer's connections are idle
// (page-aligned halves, checksums combined in order), a smaller one as
// one frame, as does one to a peer with a single connection, and a WRITE
// is never cut this way.
func TestReadSplitInHalves(t *testing.T) {
	const segSize = 4 << 20
	srv, mem, addr := serverEngine(t, "s0", segSize)
	cli := newEngine(t, Config{})
	for _, tc := range []struct{ n, frames int }{
		{splitReadMin - 1, 1}, {splitReadMin, 2}, {700<<10 + 3, 2}, {DefaultSliceSize, 2}, {DefaultSliceSize + 1, 2},
	} {
		off := uint64(segSize - tc.n - 5)
		want := crc32.Checksum(mem[off:off+uint64(tc.n)], castagnoli)
		var sum uint32
		dst := make([]byte, tc.n)
		before := srv.Stats().ServedFrames
		if err := do1(t, cli, Request{Op: Read, Endpoint: addr, Segment: "s0", Offset: off, Buf: dst, Sum: &sum}); err != nil {
			t.Fatalf("read %d: %v", tc.n, err)
		}
		if got := srv.Stats().ServedFrames - before; got != uint64(tc.frames) {
			t.Errorf("read %d: %d frames, want %d", tc.n, got, tc.frames)
		}
		if sum != want || !bytes.Equal(dst, mem[off:off+uint64(tc.n)]) {
			t.Fatalf("read %d: sum %08x, want %08x (bytes equal %v)", tc.n, sum, want, bytes.Equal(dst, mem[off:off+uint64(tc.n)]))
		}
	}
	before := srv.Stats().ServedFrames
	if err := do1(t, cli, Request{Op: Write, Endpoint: addr, Segment: "s0", Buf: make([]byte, DefaultSliceSize)}); err != nil {
		t.Fatal(err)
	}
	if got := srv.Stats().ServedFrames - before; got != 1 {
		t.Errorf("1 MiB write: %d frames, want 1", got)
	}
	// One connection to the peer: never two idle ones, so no halves.
	one := newEngine(t, Config{ConnsPerPeer: 1})
	before = srv.Stats().ServedFrames
	if err := do1(t, one, Request{Op: Read, Endpoint: addr, Segment: "s0", Buf: make([]byte, DefaultSliceSize)}); err != nil {
		t.Fatal(err)
	}
	if got := srv.Stats().ServedFrames - before; got != 1 {
		t.Errorf("1 MiB read over one connection: %d frames, want 1", got)
	}
}
