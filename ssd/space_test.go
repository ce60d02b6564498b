package ssd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/kvtier/kvtier/kverr"
)

// smallDiskFS is a fake file system size (a fault the tests cannot cause
// on the machine's real disk): the OS file system, reporting as free
// only total minus what the tier's directory holds.
type smallDiskFS struct {
	OSFS
	total  uint64
	asked  atomic.Int64
	failed atomic.Bool // Avail fails (statfs unavailable)
}

var _ SpaceFS = (*smallDiskFS)(nil)

func (f *smallDiskFS) Avail(dir string) (uint64, error) {
	f.asked.Add(1)
	if f.failed.Load() {
		return 0, os.ErrPermission
	}
	var used uint64
	err := filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			used += uint64(info.Size())
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return f.total - min(f.total, used), nil
}

// A tier configured far larger than its disk works to the disk's free
// space: it evicts whole buckets before a write would fail, and puts keep
// succeeding.
func TestFreeSpaceBoundsTheTier(t *testing.T) {
	fs := &smallDiskFS{total: 24 << 20}
	tr := openTier(t, Config{FS: fs, Capacity: 1 << 30, BucketSize: 2 << 20, Notifier: newFakeMaster()})
	var last Location
	var lastV []byte
	for i := range 60 { // 60 MiB through a 24 MiB disk
		v := value(uint64(i), 1<<20)
		loc, err := tr.Put(context.Background(), "t", fmt.Sprint(i), v, Checksum(v))
		if err != nil {
			t.Fatalf("put %d on a full disk: %v", i, err)
		}
		last, lastV = loc, v
	}
	if fs.asked.Load() == 0 {
		t.Fatal("the tier never asked for free space")
	}
	st := tr.Stats()
	if st.EvictedBuckets == 0 || st.Used > 24<<20 {
		t.Fatalf("tier grew past the disk: %+v", st)
	}
	mustRead(t, tr, last, lastV)
	t.Logf("used %d of a 24 MiB disk, %d buckets evicted", st.Used, st.EvictedBuckets)
}

// Without free-space figures the tier is bounded by Capacity alone.
func TestFreeSpaceUnknown(t *testing.T) {
	fs := &smallDiskFS{total: 1 << 20}
	fs.failed.Store(true)
	tr := openTier(t, Config{FS: fs, Capacity: 64 << 20, BucketSize: 2 << 20})
	for i := range 4 {
		mustPut(t, tr, fmt.Sprint(i), value(uint64(i), 1<<20))
	}
	if st := tr.Stats(); st.EvictedBuckets != 0 {
		t.Fatalf("evicted with no free-space figure: %+v", st)
	}
}

// A Block-aligned range inside one object reads its bytes; other ranges
// are refused.
func TestRangedReads(t *testing.T) {
	tr := openTier(t, Config{})
	v := value(7, 3*Block+123)
	loc := mustPut(t, tr, "k", v)
	ctx := context.Background()
	for _, r := range []struct{ off, n uint64 }{{0, Block}, {0, 3*Block + 122}, {Block, 2 * Block}, {2 * Block, Block + 123}, {3 * Block, 123}} {
		got := make([]byte, r.n)
		if err := tr.ReadExtent(ctx, loc.Bucket, loc.Offset+r.off, got); err != nil {
			t.Fatalf("range %+v: %v", r, err)
		}
		if !bytes.Equal(got, v[r.off:r.off+r.n]) {
			t.Fatalf("range %+v: bytes differ", r)
		}
	}
	wantCode(t, tr.ReadExtent(ctx, loc.Bucket, loc.Offset+100, make([]byte, 10)), kverr.InvalidParams)
	wantCode(t, tr.ReadExtent(ctx, loc.Bucket, loc.Offset+Block, make([]byte, 3*Block)), kverr.ObjectNotFound)
}
