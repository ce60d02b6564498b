package ssd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kvtier/kvtier/kverr"
)

// SpaceFS is the optional capability of an FS that knows the real free
// space of the file system holding a directory (found by type assertion).
// With it the tier never grows past what the disk can hold, whatever its
// configured Capacity: a 4 GiB tier on a 64 MiB file system evicts buckets
// at about 64 MiB instead of failing writes with ENOSPC. FS implementations
// without it (the in-memory and fault-injecting ones) are bounded by
// Capacity alone.
type SpaceFS interface {
	// Avail returns the bytes an unprivileged writer may still allocate on
	// the file system holding dir (statfs f_bavail × f_bsize).
	Avail(dir string) (uint64, error)
}

var _ SpaceFS = OSFS{}

// Avail implements SpaceFS with statfs(2).
func (OSFS) Avail(dir string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// spaceRefresh is how often the tier asks the file system for its free
// space. The limit it derives (used + free) stays put while the tier is the
// only writer, so a stale figure errs by what other writers wrote since.
const spaceRefresh = 100 * time.Millisecond

// spaceHeadroom is what the tier leaves free on the file system: room for
// the metadata files' growth and a little slack. A data file's
// preallocation needs none: allocate falls back to the object's own blocks
// on ENOSPC.
func (t *Tier) spaceHeadroom() uint64 {
	return 2*uint64(t.metaReserve) + 1<<20
}

// preallocatedLocked is the space the data files hold past their reserved
// objects (preallocated blocks): statfs counts it as used, Tier.used does
// not, and new objects land in it. t.mu must be held.
func (t *Tier) preallocatedLocked() uint64 {
	var n uint64
	for _, b := range t.buckets {
		if a := b.allocSeen.Load(); a > b.reserved {
			n += a - b.reserved
		}
	}
	return n
}

// spaceWatch holds the file system's limit on the tier.
type spaceWatch struct {
	mu      sync.Mutex
	checked time.Time // guarded by mu: last statfs (zero: never)
	// limit is the most Tier.used may reach on this file system: used at
	// the last statfs plus the free space and the data files' preallocated
	// tails then, minus the headroom; only once measured. Both guarded by Tier.mu.
	limit    uint64
	measured bool
	// lastErr is the last statfs failure, logged once per change.
	lastErr string // guarded by mu
	// bucketSize mirrors bucketSizeLocked for allocate, which preallocates
	// no further than a bucket will grow (0: Config.BucketSize).
	bucketSize atomic.Uint64
}

// bucket returns the bucket size allocate works to (def when unmeasured).
func (w *spaceWatch) bucket(def uint64) uint64 {
	if b := w.bucketSize.Load(); b > 0 {
		return min(b, def)
	}
	return def
}

// refreshSpace updates the file-system limit when the last statfs is older
// than spaceRefresh (or force). It does the syscall without Tier.mu.
func (t *Tier) refreshSpace(force bool) {
	sfs, ok := t.fs.(SpaceFS)
	if !ok {
		return
	}
	now := time.Now()
	t.space.mu.Lock()
	if !force && !t.space.checked.IsZero() && now.Sub(t.space.checked) < spaceRefresh {
		t.space.mu.Unlock()
		return
	}
	t.space.checked = now
	t.space.mu.Unlock()
	avail, err := sfs.Avail(t.dir)
	if err != nil {
		t.space.mu.Lock()
		if msg := err.Error(); msg != t.space.lastErr {
			t.space.lastErr = msg
			t.log.Warn("ssd: cannot read free space; bounded by capacity only", "dir", t.dir, "err", err)
		}
		t.space.mu.Unlock()
		return
	}
	head := t.spaceHeadroom()
	t.mu.Lock()
	limit := t.used + avail + t.preallocatedLocked()
	limit -= min(limit, head)
	t.space.limit, t.space.measured = limit, true
	t.space.bucketSize.Store(t.bucketSizeLocked())
	over := float64(t.used) > t.high*float64(t.effectiveCapacityLocked())
	t.mu.Unlock()
	if over {
		t.wake()
	}
}

// effectiveCapacityLocked is the capacity the tier works to: its configured
// Capacity, or less when the file system holds less. t.mu must be held.
func (t *Tier) effectiveCapacityLocked() uint64 {
	if !t.space.measured {
		return t.capacity // no SpaceFS, or statfs failed so far
	}
	return min(t.capacity, t.space.limit)
}

// fsNote explains a capacity below the configured one (for errors).
func (t *Tier) fsNote(capacity uint64) string {
	t.mu.Lock()
	configured := t.capacity
	t.mu.Unlock()
	if capacity < configured {
		return fmt.Sprintf(": the file system of %s has room for only that much of the configured %d", t.dir, configured)
	}
	return ""
}

// minFSBucket is the smallest bucket size bucketSizeLocked picks.
const minFSBucket = 1 << 20

// bucketSizeLocked is the size at which the open bucket is sealed:
// Config.BucketSize, or an eighth of what the file system holds when that
// is less. A disk smaller than a few buckets would otherwise hold one
// bucket, which cannot be evicted while it takes writes, and the tier could
// free nothing when the disk fills up. t.mu must be held.
func (t *Tier) bucketSizeLocked() uint64 {
	if !t.space.measured || t.space.limit >= t.capacity {
		return t.cfg.BucketSize
	}
	return min(t.cfg.BucketSize, max(t.space.limit/8/Block*Block, minFSBucket))
}

// evictForRoom reacts to a write that failed for want of disk space
// (another writer filled the file system, or statfs was stale): it
// re-reads the free space and evicts for need bytes. It reports whether
// that freed room, so the caller may try again.
func (t *Tier) evictForRoom(ctx context.Context, err error, need uint64) bool {
	if !kverr.Is(err, kverr.NoAvailableHandle) && !errors.Is(err, syscall.ENOSPC) {
		return false
	}
	t.refreshSpace(true)
	res, eerr := t.evict(ctx, need)
	return eerr == nil && (res.FreedBytes > 0 || res.roomFree)
}
