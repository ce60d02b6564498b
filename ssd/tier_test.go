package ssd

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ncw/directio"

	"github.com/kvtier/kvtier/kverr"
)

func TestPutReadRoundTrip(t *testing.T) {
	tr := openTier(t, Config{})
	sizes := []int{0, 1, 100, Block - 1, Block, Block + 1, 3*Block + 17, 1<<20 + 3}
	locs := make([]Location, len(sizes))
	vals := make([][]byte, len(sizes))
	for i, n := range sizes {
		vals[i] = value(uint64(i), n)
		locs[i] = mustPut(t, tr, fmt.Sprintf("k%d", i), vals[i])
		if locs[i].Offset%Block != 0 || locs[i].Length != uint64(n) {
			t.Fatalf("size %d: location %+v", n, locs[i])
		}
	}
	for i := range sizes {
		mustRead(t, tr, locs[i], vals[i])
		e, ok := tr.Lookup("t", fmt.Sprintf("k%d", i))
		if !ok || e.Loc != locs[i] || e.CRC32C != Checksum(vals[i]) || e.Size != uint64(sizes[i]) {
			t.Fatalf("Lookup k%d = %+v %v", i, e, ok)
		}
	}
	// Aligned destination buffers take the direct path (tail through a bounce buffer).
	for i, n := range sizes {
		if n < Block {
			continue
		}
		dst := directio.AlignedBlock(int(padded(uint64(n))))[:n]
		if err := tr.ReadExtent(context.Background(), locs[i].Bucket, locs[i].Offset, dst); err != nil {
			t.Fatal(err)
		}
		if string(dst) != string(vals[i]) {
			t.Fatalf("aligned read of %d bytes differs", n)
		}
	}
	if got := len(tr.Objects()); got != len(sizes) {
		t.Fatalf("Objects: %d, want %d", got, len(sizes))
	}
	s := tr.Stats()
	if s.Objects != len(sizes) || s.Puts != uint64(len(sizes)) || s.Buckets != 1 || s.Used == 0 {
		t.Fatalf("Stats %+v", s)
	}
}

func TestPutAlignedValue(t *testing.T) {
	tr := openTier(t, Config{})
	for _, n := range []int{Block, 2*Block + 5} {
		v := directio.AlignedBlock(int(padded(uint64(n))))[:n]
		copy(v, value(9, n))
		loc := mustPut(t, tr, fmt.Sprint(n), v)
		mustRead(t, tr, loc, v)
	}
}

func TestPutBadInput(t *testing.T) {
	tr := openTier(t, Config{Capacity: 1 << 20})
	ctx := context.Background()
	v := value(1, 5000)
	_, err := tr.Put(ctx, "t", "k", v, Checksum(v)^1)
	wantCode(t, err, kverr.ChecksumMismatch)
	if s := tr.Stats(); s.Objects != 0 || s.Buckets != 0 || s.Used != 0 {
		t.Fatalf("a value failing its checksum changed the tier: %+v", s)
	}
	// crc 0: the object has no checksum; the tier computes one.
	loc, err := tr.Put(ctx, "t", "nocrc", v, 0)
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := tr.Lookup("t", "nocrc"); e.CRC32C != Checksum(v) {
		t.Fatalf("stored crc %08x, want %08x", e.CRC32C, Checksum(v))
	}
	mustRead(t, tr, loc, v)
	_, err = tr.Put(ctx, "t", "", v, Checksum(v))
	wantCode(t, err, kverr.InvalidKey)
	_, err = tr.Put(ctx, "t", string(make([]byte, maxName+1)), v, Checksum(v))
	wantCode(t, err, kverr.InvalidKey)
	big := make([]byte, 2<<20)
	_, err = tr.Put(ctx, "t", "big", big, Checksum(big))
	wantCode(t, err, kverr.PayloadTooLarge)
	if s := tr.Stats(); s.Objects != 1 || s.Buckets != 1 || s.Puts != 1 {
		t.Fatalf("bad input changed the tier: %+v", s)
	}
}

func TestPutDuplicateKey(t *testing.T) {
	tr := openTier(t, Config{})
	v := value(1, 10000)
	loc := mustPut(t, tr, "k", v)
	if again := mustPut(t, tr, "k", v); again != loc {
		t.Fatalf("second put of same object went to %+v, first %+v", again, loc)
	}
	other := value(2, 10000)
	_, err := tr.Put(context.Background(), "t", "k", other, Checksum(other))
	wantCode(t, err, kverr.ObjectAlreadyExists)
	// Same key under another tenant is another object.
	if _, err := tr.Put(context.Background(), "u", "k", other, Checksum(other)); err != nil {
		t.Fatal(err)
	}
	if n := tr.Stats().Objects; n != 2 {
		t.Fatalf("objects %d, want 2", n)
	}
}

func TestBucketSealing(t *testing.T) {
	t.Run("size", func(t *testing.T) {
		tr := openTier(t, Config{BucketSize: 4 * Block})
		var locs []Location
		for i := range 9 {
			locs = append(locs, mustPut(t, tr, fmt.Sprint(i), value(uint64(i), Block)))
		}
		for i, l := range locs {
			if want := uint64(i/4 + 1); l.Bucket != want || l.Offset != uint64(i%4)*Block {
				t.Fatalf("object %d at %+v, want bucket %d offset %d", i, l, want, (i%4)*Block)
			}
		}
	})
	t.Run("count", func(t *testing.T) {
		tr := openTier(t, Config{BucketMaxObjects: 2})
		for i := range 5 {
			l := mustPut(t, tr, fmt.Sprint(i), value(uint64(i), 10))
			if want := uint64(i/2 + 1); l.Bucket != want {
				t.Fatalf("object %d in bucket %d, want %d", i, l.Bucket, want)
			}
		}
	})
	t.Run("value larger than a bucket gets its own", func(t *testing.T) {
		tr := openTier(t, Config{BucketSize: 2 * Block})
		small := mustPut(t, tr, "s", value(1, 100))
		bigV := value(2, 5*Block+1)
		big := mustPut(t, tr, "b", bigV)
		after := mustPut(t, tr, "a", value(3, 100))
		if big.Bucket == small.Bucket || after.Bucket == big.Bucket || big.Offset != 0 {
			t.Fatalf("small %+v big %+v after %+v", small, big, after)
		}
		mustRead(t, tr, big, bigV)
	})
}

func TestReadExtentErrors(t *testing.T) {
	tr := openTier(t, Config{})
	v := value(1, 5000)
	loc := mustPut(t, tr, "k", v)
	ctx := context.Background()
	wantCode(t, tr.ReadExtent(ctx, loc.Bucket+7, 0, make([]byte, 5000)), kverr.ObjectNotFound)
	wantCode(t, tr.ReadExtent(ctx, loc.Bucket, Block*3, make([]byte, 5000)), kverr.ObjectNotFound)
	wantCode(t, tr.ReadExtent(ctx, loc.Bucket, loc.Offset, make([]byte, 5001)), kverr.InvalidParams)
	mustRead(t, tr, loc, v) // a shorter buffer is a ranged read: see TestRangedReads
}

func TestConcurrentPutsAndReads(t *testing.T) {
	tr := openTier(t, Config{BucketSize: 64 * Block, BucketMaxObjects: 20})
	const workers, per = 4, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*per)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				v := value(uint64(w*1000+i), 1000+i*97)
				key := fmt.Sprintf("w%d-%d", w, i)
				loc, err := tr.Put(context.Background(), "t", key, v, Checksum(v))
				if err != nil {
					errs <- err
					return
				}
				got := make([]byte, len(v))
				if err := tr.ReadExtent(context.Background(), loc.Bucket, loc.Offset, got); err != nil {
					errs <- err
					return
				}
				if string(got) != string(v) {
					errs <- fmt.Errorf("%s: bytes differ", key)
					return
				}
			}
		}()
	}
	// The same key from several goroutines at once: one copy, one location.
	shared := value(77, 20000)
	locs := make([]Location, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := tr.Put(context.Background(), "t", "shared", shared, Checksum(shared))
			if err != nil {
				errs <- err
			}
			locs[w] = l
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, l := range locs[1:] {
		if l != locs[0] {
			t.Fatalf("same key stored at %+v and %+v", l, locs[0])
		}
	}
	if n := tr.Stats().Objects; n != workers*per+1 {
		t.Fatalf("objects %d, want %d", n, workers*per+1)
	}
}

func TestConfigValidate(t *testing.T) {
	bad := []Config{
		{},
		{Dir: "x", HighWatermark: 1.5},
		{Dir: "x", HighWatermark: 0.5, LowWatermark: 0.6},
		{Dir: "x", BucketSize: 1000},
		{Dir: "x", Policy: 7},
		{Dir: "x", Capacity: 10},
		{Dir: "x", BucketMaxObjects: -1},
		{Dir: "x", ReadPieces: -1},
		{Dir: "x", ReadPieces: MaxReadPieces + 1},
	}
	for i, c := range bad {
		if c.Validate() == nil {
			t.Errorf("config %d %+v: no error", i, c)
		}
	}
	for _, ok := range []Config{{Dir: "x"}, {Dir: "x", ReadPieces: 1}, {Dir: "x", ReadPieces: MaxReadPieces}} {
		if err := ok.Validate(); err != nil {
			t.Fatalf("%+v: %v", ok, err)
		}
	}
	if err := (Config{Dir: "x", HighWatermark: 0.5}).Validate(); err != nil {
		t.Fatalf("high watermark below the default low one: %v", err)
	}
	_, err := Open(context.Background(), Config{Dir: t.TempDir(), HighWatermark: 2})
	wantCode(t, err, kverr.InvalidParams)
	for s, want := range map[string]Policy{"fifo": FIFO, "LRU": LRU, "": FIFO} {
		if p, err := ParsePolicy(s); err != nil || p != want {
			t.Errorf("ParsePolicy(%q) = %v, %v", s, p, err)
		}
	}
	if _, err := ParsePolicy("random"); err == nil {
		t.Error("ParsePolicy(random): no error")
	}
}

func TestOneTierPerDirectory(t *testing.T) {
	dir := t.TempDir()
	first, err := Open(context.Background(), Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), Config{Dir: dir})
	wantCode(t, err, kverr.UnavailableInCurrentStatus)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	openTier(t, Config{Dir: dir}) // free again after Close
}

func TestCloseRefusesFurtherUse(t *testing.T) {
	tr, err := Open(context.Background(), Config{Dir: t.TempDir(), EvictInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan struct{})
	go func() { tr.Run(context.Background()); close(runDone) }()
	v := value(1, 10)
	loc := mustPut(t, tr, "k", v)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	<-runDone // Run ends with the tier
	_, err = tr.Put(context.Background(), "t", "k2", v, Checksum(v))
	wantCode(t, err, kverr.UnavailableInCurrentStatus)
	wantCode(t, tr.ReadExtent(context.Background(), loc.Bucket, loc.Offset, make([]byte, 10)), kverr.UnavailableInCurrentStatus)
	if err := tr.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
