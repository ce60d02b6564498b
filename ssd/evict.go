package ssd

import (
	"context"
	"fmt"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// EvictResult reports one eviction pass.
type EvictResult struct {
	Evicted    []uint64 // buckets deleted, in order
	FreedBytes uint64
	Refused    []uint64 // buckets the master did not agree to drop: kept, index intact
	// DrainTimeouts counts buckets deleted while reads were still running
	// (they finish on the unlinked file and return correct bytes).
	DrainTimeouts int
	Errors        []error // DropBucket refusals and file-removal failures
	Reason        string  // why the pass stopped

	roomFree bool // a Put-triggered pass found the room already free
}

// EvictOnce runs one eviction pass: if used space is above the high
// watermark, it evicts whole buckets by the current policy until used space
// is at or below the low watermark or no bucket can be evicted. Buckets the
// master refuses are kept and counted; the next pass retries them.
func (t *Tier) EvictOnce(ctx context.Context) (EvictResult, error) {
	return t.evict(ctx, 0)
}

// Run evicts in the background until ctx is done: every EvictInterval, and
// when a Put, SetCapacity or SetHighWatermark pushes the tier over its high
// watermark. It is the single owner of background eviction; Put-triggered
// eviction shares its one-pass-at-a-time semaphore. Run also returns once
// the tier is closed.
func (t *Tier) Run(ctx context.Context) {
	tick := time.NewTicker(t.cfg.EvictInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.refreshSpace(false)
		case <-t.kick:
		}
		res, err := t.EvictOnce(ctx)
		if err != nil {
			if ctx.Err() != nil || kverr.Is(err, kverr.UnavailableInCurrentStatus) {
				return // cancelled, or the tier was closed
			}
			t.log.Warn("ssd: eviction pass failed", "err", err)
			continue
		}
		if len(res.Evicted) > 0 || len(res.Refused) > 0 {
			t.log.Info("ssd: eviction pass", "evicted", res.Evicted, "freed", res.FreedBytes,
				"refused", res.Refused, "reason", res.Reason)
		}
	}
}

// evict runs one pass. need > 0 means a Put needs that many bytes: the pass
// runs if they do not fit under Capacity, and aims below both the low
// watermark and Capacity - need.
func (t *Tier) evict(ctx context.Context, need uint64) (EvictResult, error) {
	var res EvictResult
	select {
	case t.evictSem <- struct{}{}:
	case <-ctx.Done():
		return res, ctx.Err()
	}
	defer func() { <-t.evictSem }()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return res, errClosed("")
	}
	t.ops.Add(1)
	capacity := t.effectiveCapacityLocked()
	target := uint64(float64(capacity) * t.low)
	if need > 0 {
		if t.used+need <= capacity {
			t.mu.Unlock()
			t.ops.Done()
			res.Reason = "room already available"
			res.roomFree = true
			return res, nil
		}
		target = min(target, capacity-min(capacity, need))
	} else if float64(t.used) <= t.high*float64(capacity) {
		res.Reason = fmt.Sprintf("below high watermark (%d of %d bytes used)", t.used, capacity)
		t.mu.Unlock()
		t.ops.Done()
		return res, nil
	}
	t.mu.Unlock()
	defer t.ops.Done()

	tried := make(map[uint64]bool)
	for {
		if err := ctx.Err(); err != nil {
			res.Reason = "cancelled"
			return res, err
		}
		t.mu.Lock()
		if t.used <= target {
			res.Reason = fmt.Sprintf("reached target (%d <= %d bytes)", t.used, target)
			t.mu.Unlock()
			return res, nil
		}
		v, why := t.pickVictimLocked(tried)
		if v == nil {
			res.Reason = why
			t.mu.Unlock()
			return res, nil
		}
		v.evicting = true
		tried[v.id] = true
		t.mu.Unlock()

		// Tell the master first; without its agreement nothing is deleted.
		var err error
		if t.notifier != nil {
			err = t.notifier.DropBucket(ctx, v.id)
		}
		if err != nil {
			t.mu.Lock()
			v.evicting = false // the index was never touched: the bucket serves on
			t.mu.Unlock()
			t.st.evictRefuse.Add(1)
			res.Refused = append(res.Refused, v.id)
			res.Errors = append(res.Errors, fmt.Errorf("ssd: bucket %d kept, master did not agree to drop it: %w", v.id, err))
			t.log.Warn("ssd: master refused bucket drop; bucket kept", "bucket", v.id, "err", err)
			if kverr.CodeOf(err) == kverr.RPCFail {
				// Unreachable, not refusing: asking about every other bucket
				// would only wait out the same timeout again.
				res.Reason = "master unreachable; retried next pass"
				return res, nil
			}
			continue
		}
		freed, timedOut, rmErr := t.retire(ctx, v)
		res.Evicted = append(res.Evicted, v.id)
		res.FreedBytes += freed
		if timedOut {
			res.DrainTimeouts++
		}
		if rmErr != nil {
			res.Errors = append(res.Errors, rmErr)
		}
		t.st.evictedBuckets.Add(1)
		t.st.evictedBytes.Add(freed)
	}
}

// pickVictimLocked returns the next bucket to evict under the current
// policy, or nil and why none can be.
func (t *Tier) pickVictimLocked(tried map[uint64]bool) (*bucket, string) {
	var best *bucket
	busy, refused := 0, 0
	for _, b := range t.buckets {
		switch {
		case tried[b.id]:
			refused++
			continue
		case b.evicting || b.writers > 0:
			busy++
			continue
		case !b.sealed && len(t.buckets) > 1:
			continue // the open bucket goes only when it is the only one
		}
		if best == nil || t.beforeLocked(b, best) {
			best = b
		}
	}
	if best == nil {
		return nil, fmt.Sprintf("no evictable bucket (%d buckets: %d refused this pass, %d with writes or eviction in flight, open bucket kept)",
			len(t.buckets), refused, busy)
	}
	if !best.sealed {
		t.sealLocked(best)
	}
	return best, ""
}

// beforeLocked reports whether a should be evicted before b.
func (t *Tier) beforeLocked(a, b *bucket) bool {
	if t.policy == LRU && !a.lastUse.Equal(b.lastUse) {
		return a.lastUse.Before(b.lastUse)
	}
	return a.id < b.id // FIFO: ids increase with creation
}

// retire deletes a bucket the master agreed to drop: out of the index at
// once (new reads miss), then, after in-flight reads drain or
// ReadDrainTimeout passes, its files. The metadata file goes first, so a
// crash between the two removals leaves an orphan data file, which recovery
// deletes. The data file descriptor stays open until the last reader is
// done, so a read that started before deletion still returns correct bytes.
func (t *Tier) retire(ctx context.Context, v *bucket) (freed uint64, timedOut bool, err error) {
	t.mu.Lock()
	delete(t.buckets, v.id)
	for _, e := range v.extents {
		k := objKey{e.Tenant, e.Key}
		if t.index[k] == e {
			delete(t.index, k)
		}
	}
	freed = v.used
	t.used -= v.used
	v.removed = true
	var drained chan struct{}
	if v.readers > 0 {
		v.drained = make(chan struct{})
		drained = v.drained
	}
	meta := v.meta
	v.meta = nil
	t.mu.Unlock()

	if drained != nil {
		if t.onDrainWait != nil {
			t.onDrainWait(v.id)
		}
		timer := time.NewTimer(t.cfg.ReadDrainTimeout)
		select {
		case <-drained:
		case <-timer.C:
			timedOut = true
			t.log.Warn("ssd: reads still running after drain timeout; deleting bucket anyway", "bucket", v.id)
		case <-ctx.Done():
			timedOut = true
		}
		timer.Stop()
	}
	if meta != nil {
		_ = meta.Close()
	}
	if rerr := t.fs.Remove(v.metaPath); rerr != nil {
		err = fmt.Errorf("ssd: bucket %d dropped from the index but its files remain: %w", v.id, rerr)
	} else if rerr := t.fs.Remove(v.dataPath); rerr != nil {
		err = fmt.Errorf("ssd: bucket %d: metadata removed, data file remains (recovery removes it): %w", v.id, rerr)
	}
	_ = t.fs.SyncDir(t.dir)

	var closeData bool
	t.mu.Lock()
	v.retired = true
	if v.readers == 0 && !v.dataClosed {
		v.dataClosed, closeData = true, true
	}
	t.mu.Unlock()
	if closeData {
		_ = v.data.Close()
	}
	return freed, timedOut, err
}
