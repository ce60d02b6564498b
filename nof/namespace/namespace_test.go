package namespace_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvtier/kvtier/nof/namespace"
)

// contract runs the same checks against every implementation: random
// unaligned reads and writes agree with a shadow copy, concurrent writers
// to disjoint neighbouring ranges inside one block lose nothing, zeroing and
// out-of-range access behave.
func contract(t *testing.T, ns namespace.Namespace) {
	ctx := context.Background()
	size := ns.Size()
	shadow := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200; i++ {
		off := rng.Int64N(size - 1)
		n := 1 + rng.Int64N(min(size-off, 20000))
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		if err := ns.WriteAt(ctx, p, off); err != nil {
			t.Fatal(err)
		}
		copy(shadow[off:], p)
		roff := rng.Int64N(size - 1)
		rn := 1 + rng.Int64N(min(size-roff, 20000))
		got := make([]byte, rn)
		if err := ns.ReadAt(ctx, got, roff); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, shadow[roff:roff+rn]) {
			t.Fatalf("iteration %d: read [%d,+%d) differs from what was written", i, roff, rn)
		}
	}
	// 16 goroutines each write their own 100-byte slot of the same blocks.
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := 0; k < 20; k++ {
				p := bytes.Repeat([]byte{byte(g + 1)}, 100)
				if err := ns.WriteAt(ctx, p, int64(g*100+k%3)); err != nil {
					t.Error(err)
				}
			}
		}(g)
	}
	wg.Wait()
	got := make([]byte, 1700)
	if err := ns.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	for g := 0; g < 16; g++ {
		if got[g*100+50] != byte(g+1) {
			t.Fatalf("slot %d lost its write: %d", g, got[g*100+50])
		}
	}
	if z, ok := ns.(namespace.ZeroWriter); ok {
		if err := z.WriteZeroes(ctx, 4096, 8192); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 8192)
		if err := ns.ReadAt(ctx, b, 4096); err != nil || !bytes.Equal(b, make([]byte, 8192)) {
			t.Fatalf("write zeroes: %v", err)
		}
	}
	if err := ns.ReadAt(ctx, make([]byte, 10), size-5); !errors.Is(err, namespace.ErrOutOfRange) {
		t.Fatalf("read past end: %v", err)
	}
	if err := ns.WriteAt(ctx, make([]byte, 10), -1); !errors.Is(err, namespace.ErrOutOfRange) {
		t.Fatalf("write at -1: %v", err)
	}
	if err := ns.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestMemory(t *testing.T) {
	ns, err := namespace.NewMemory(make([]byte, 1<<20), 512)
	if err != nil {
		t.Fatal(err)
	}
	contract(t, ns)
	if _, err := namespace.NewMemory(make([]byte, 1000), 512); err == nil {
		t.Fatal("unaligned memory size accepted")
	}
}

func TestFileDirect(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.img")
	f, err := namespace.OpenFile(path, namespace.FileConfig{Size: 1 << 20, BlockSize: 512})
	if err != nil {
		t.Skipf("O_DIRECT not available here: %v", err)
	}
	defer f.Close()
	if f.Size() != 1<<20 || f.BlockSize() != 512 {
		t.Fatalf("size %d block %d", f.Size(), f.BlockSize())
	}
	contract(t, f)
	// aligned fast path with an aligned buffer
	buf := namespace.AlignedBuffer(8192)
	copy(buf, bytes.Repeat([]byte("x"), 8192))
	if err := f.WriteAt(context.Background(), buf, 65536); err != nil {
		t.Fatal(err)
	}
	f.Close()
	f2, err := namespace.OpenFile(path, namespace.FileConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	got := namespace.AlignedBuffer(8192)
	if err := f2.ReadAt(context.Background(), got, 65536); err != nil || !bytes.Equal(got, buf) {
		t.Fatalf("reopen read: %v", err)
	}
}

func TestFileConfigValidate(t *testing.T) {
	for _, c := range []namespace.FileConfig{{Size: -1}, {BlockSize: 1000}} {
		if err := c.Validate(); err == nil {
			t.Fatalf("%+v accepted", c)
		}
	}
	if _, err := namespace.OpenFile(filepath.Join(t.TempDir(), "missing"), namespace.FileConfig{}); err == nil {
		t.Fatal("opening a missing file without a size succeeded")
	}
}
