package namespace_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kvtier/kvtier/nof/namespace"
)

func openDirect(t *testing.T, size int64) *namespace.File {
	t.Helper()
	f, err := namespace.OpenFile(filepath.Join(t.TempDir(), "ns.img"), namespace.FileConfig{Size: size})
	if err != nil {
		t.Skipf("O_DIRECT not available here: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func pattern(n int, seed byte) []byte {
	p := namespace.AlignedBuffer(n)
	for i := range p {
		p[i] = byte(i*7) ^ seed
	}
	return p
}

// StartRead/StartWrite agree with ReadAt/WriteAt for aligned (AIO) and
// unaligned (fallback) transfers, many in flight at once, and reject
// out-of-range transfers before starting anything.
func TestFileStart(t *testing.T) {
	f := openDirect(t, 4<<20)
	ctx := context.Background()
	const n = 32
	var waits []func() error
	for i := 0; i < n; i++ {
		w, err := f.StartWrite(pattern(64<<10, byte(i)), int64(i)*64<<10)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, w)
	}
	for _, w := range waits {
		if err := w(); err != nil {
			t.Fatal(err)
		}
	}
	bufs := make([][]byte, n)
	waits = waits[:0]
	for i := range bufs {
		bufs[i] = namespace.AlignedBuffer(64 << 10)
		w, err := f.StartRead(bufs[i], int64(i)*64<<10)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, w)
	}
	for i, w := range waits {
		if err := w(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(bufs[i], pattern(64<<10, byte(i))) {
			t.Fatalf("block %d read back differs", i)
		}
	}
	// Unaligned buffer and offset: the fallback path, same contract.
	odd := make([]byte, 1000)
	copy(odd, "unaligned")
	w, err := f.StartWrite(odd[:999], 12345)
	if err != nil || w() != nil {
		t.Fatalf("unaligned start write: %v", err)
	}
	got := make([]byte, 999)
	if w, err = f.StartRead(got, 12345); err != nil || w() != nil || !bytes.Equal(got, odd[:999]) {
		t.Fatalf("unaligned start read: %v %q", err, got[:9])
	}
	if err := f.ReadAt(ctx, got, 12345); err != nil || !bytes.Equal(got, odd[:999]) {
		t.Fatalf("ReadAt after StartWrite: %v", err)
	}
	if _, err := f.StartRead(make([]byte, 8192), f.Size()-4096); !errors.Is(err, namespace.ErrOutOfRange) {
		t.Fatalf("read past end: %v", err)
	}
	if _, err := f.StartWrite(make([]byte, 4096), -4096); !errors.Is(err, namespace.ErrOutOfRange) {
		t.Fatalf("write at -4096: %v", err)
	}
}

// A Batch holds its transfers until Submit: before it the file is
// untouched and no waiter has returned; after it every transfer is done.
func TestFileBatch(t *testing.T) {
	f := openDirect(t, 1<<20)
	b := f.NewBatch()
	var waits []func() error
	for i := 0; i < 8; i++ {
		w, err := b.StartWrite(pattern(16<<10, byte(i+1)), int64(i)*16<<10)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, w)
	}
	done := make(chan error, len(waits))
	for _, w := range waits {
		go func() { done <- w() }()
	}
	before := make([]byte, 128<<10)
	if err := f.ReadAt(context.Background(), before, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, make([]byte, len(before))) {
		t.Fatal("batched writes reached the file before Submit")
	}
	select {
	case err := <-done:
		t.Fatalf("a batched write's wait returned before Submit: %v", err)
	default:
	}
	b.Submit()
	for range waits {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	rb := f.NewBatch()
	got := namespace.AlignedBuffer(128 << 10)
	w, err := rb.StartRead(got, 0)
	if err != nil {
		t.Fatal(err)
	}
	rb.Submit()
	rb.Submit() // an empty Submit is a no-op
	if err := w(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		if !bytes.Equal(got[i*16<<10:(i+1)*16<<10], pattern(16<<10, byte(i+1))) {
			t.Fatalf("batched block %d differs", i)
		}
	}
}

// Aligned writes started while a read-modify-write holds their stripes do
// not wait in Start (they fall back to WriteAt in wait), and the RMW's
// neighbours survive.
func TestFileStartWriteBesideRMW(t *testing.T) {
	f := openDirect(t, 1<<20)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := 0; k < 50; k++ {
				if g%2 == 0 {
					// unaligned: RMW of block g
					p := bytes.Repeat([]byte{byte(g + 1)}, 100)
					if err := f.WriteAt(ctx, p, int64(g)*4096+7); err != nil {
						t.Error(err)
					}
					continue
				}
				w, err := f.StartWrite(pattern(4096, byte(g)), int64(g)*4096)
				if err == nil {
					err = w()
				}
				if err != nil {
					t.Error(err)
				}
			}
		}(g)
	}
	wg.Wait()
	got := make([]byte, 4*4096)
	if err := f.ReadAt(ctx, got, 0); err != nil {
		t.Fatal(err)
	}
	for g := 0; g < 4; g++ {
		blk := got[g*4096 : (g+1)*4096]
		if g%2 == 0 && (blk[7] != byte(g+1) || blk[106] != byte(g+1)) {
			t.Fatalf("RMW of block %d lost", g)
		}
		if g%2 == 1 && !bytes.Equal(blk, pattern(4096, byte(g))) {
			t.Fatalf("aligned block %d differs", g)
		}
	}
}
