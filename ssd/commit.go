package ssd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// Pending is an object whose bytes PutAsync has written to its bucket's data
// file and whose metadata record awaits a commit. Until Done is closed the
// object is not durable, not indexed (Lookup, ReadExtent and Objects do not
// see it) and must not be reported to the master.
type Pending struct {
	loc  Location
	done chan struct{}
	err  error // set before done is closed

	// Used by the commit only.
	b    *bucket
	k    objKey
	e    *Entry
	rec  []byte // the encoded metadata record
	need uint64 // padded data bytes
}

// Location is where the object lives once committed.
func (p *Pending) Location() Location { return p.loc }

// Done is closed once the object is durable and indexed, or its commit
// failed (Wait tells which).
func (p *Pending) Done() <-chan struct{} { return p.done }

// Wait returns once the object is durable and indexed, with its location,
// or with the error that failed its commit. It does not hurry the commit
// (Tier.Sync does); ctx ending returns ctx's error and changes nothing.
func (p *Pending) Wait(ctx context.Context) (Location, error) {
	select {
	case <-p.done:
	default:
		select {
		case <-p.done:
		case <-ctx.Done():
			return Location{}, ctx.Err()
		}
	}
	if p.err != nil {
		return Location{}, p.err
	}
	return p.loc, nil
}

// release drops what only the commit needed and completes p.
func (p *Pending) release(err error) {
	p.err = err
	p.b, p.e, p.rec = nil, nil, nil
	close(p.done)
}

func donePending(loc Location) *Pending {
	p := &Pending{loc: loc, done: make(chan struct{})}
	close(p.done)
	return p
}

// committer is the tier's group commit: one goroutine (commitLoop) that
// makes queued records durable in rounds. A round takes every queued record
// of every bucket; per bucket it fdatasyncs the data file, then writes the
// records as commit frames to the metadata file and fdatasyncs it.
type committer struct {
	interval   time.Duration
	bytesLimit uint64
	now        chan struct{} // buffered 1: run a round as soon as possible
	first      chan struct{} // buffered 1: a record was queued with none before it
	stop       chan struct{} // closed by Close once every Put is committed
	exited     chan struct{} // closed when commitLoop returns

	mu sync.Mutex
	// Fields below are guarded by mu, and so is bucket.queue.
	dirty     []*bucket     // buckets with queued records, in queueing order
	queued    uint64        // padded data bytes of the queued records
	closing   bool          // Close is waiting: every record commits at once
	stopped   bool          // commitLoop has returned
	started   uint64        // rounds started
	finished  uint64        // rounds finished
	failRound uint64        // last round in which a commit failed
	failErr   error         // its first error
	roundDone chan struct{} // closed and replaced when a round finishes
}

func (c *committer) init(interval time.Duration, bytesLimit uint64) {
	c.interval, c.bytesLimit = interval, bytesLimit
	c.now = make(chan struct{}, 1)
	c.first = make(chan struct{}, 1)
	c.stop = make(chan struct{})
	c.exited = make(chan struct{})
	c.roundDone = make(chan struct{})
}

func (c *committer) signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// PutAsync stores value under (tenant, key) like Put, but returns as soon as
// the value's bytes are written to the data file (so value may be reused),
// before they are durable: the returned Pending's Done is closed after the
// commit that covers it. A commit runs CommitInterval after the first
// uncommitted record was queued, as soon as CommitBytes of object data
// await one, on Sync or Put, and on Close. Errors before the write (bad
// input, already-stored keys with another size or checksum, no space,
// write errors) are returned at once, as by Put; an already stored object
// returns a Pending that is already done. Concurrent PutAsync calls of one
// key write one copy: a second call waits until the first is committed.
func (t *Tier) PutAsync(ctx context.Context, tenant, key string, value []byte, crc uint32) (*Pending, error) {
	if err := checkKey(tenant, key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// A caller's checksum of a large value is verified while the value is
	// being written (the CPU is idle during the O_DIRECT write), unless the
	// value would open a new bucket: see verifyLater.
	later := crc != 0 && t.verifyLater(len(value))
	if !later {
		if sum := Checksum(value); crc == 0 {
			crc = sum // the object has no checksum at the master: the tier keeps one anyway
		} else if sum != crc {
			return nil, mismatch(key, sum, crc)
		}
	}
	size := uint64(len(value))
	need := padded(size)
	rlen := uint64(recordSize(tenant, key))
	k := objKey{tenant, key}
	if loc, done, err := t.claimKey(ctx, k, size, crc); err != nil {
		return nil, err
	} else if done {
		if sum := Checksum(value); later && sum != crc {
			return nil, mismatch(key, sum, crc)
		}
		return donePending(loc), nil
	}
	b, _, off, err := t.reserve(ctx, key, need, rlen)
	if err != nil {
		t.releaseKey(k)
		return nil, err
	}
	var sum chan uint32
	if later {
		sum = make(chan uint32, 1)
		go func() { sum <- Checksum(value) }()
	}
	// No lock is held while writing: concurrent Puts write disjoint,
	// reserved ranges of the same data file. The record is queued only
	// once the write returned, so the commit's data fdatasync covers it.
	err = t.allocate(b, off+need)
	if err == nil {
		err = t.writeData(b.data, off, value, need)
	}
	if later {
		if s := <-sum; s != crc && err == nil {
			t.unreserve(b, off, need)
			t.releaseKey(k)
			return nil, mismatch(key, s, crc)
		}
	}
	if err != nil {
		t.abortWrite(b, err)
		t.releaseKey(k)
		return nil, writeErr(key, fmt.Sprintf("bucket %d data", b.id), err)
	}
	loc := Location{Bucket: b.id, Offset: off, Length: size}
	p := &Pending{loc: loc, done: make(chan struct{}), b: b, k: k, need: need,
		e:   &Entry{Tenant: tenant, Key: key, Size: size, CRC32C: crc, Loc: loc},
		rec: appendRecord(make([]byte, 0, rlen), metaRecord{Tenant: tenant, Key: key, Offset: off, Length: size, CRC32C: crc})}
	t.enqueue(p)
	return p, nil
}

// verifyLaterMin is the smallest value whose checksum PutAsync verifies
// while writing it rather than before (below it a goroutine costs more
// than the overlap saves).
const verifyLaterMin = 256 << 10

// verifyLater reports whether a value of n bytes may be verified while it
// is written: it must be large, and the open bucket must have room for it,
// so that a value failing its checksum changes nothing but the open
// bucket's next offset, which unreserve gives back. (A Put racing to seal
// that bucket meanwhile may leave the failed value's space reserved and
// counted until the bucket is evicted; the value is never stored.)
func (t *Tier) verifyLater(n int) bool {
	if n < verifyLaterMin {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open != nil && t.fitsLocked(t.open, padded(uint64(n)))
}

func mismatch(key string, sum, crc uint32) error {
	return kverr.New(kverr.ChecksumMismatch, key, "ssd: value has CRC32C %08x, caller says %08x; nothing stored", sum, crc)
}

// unreserve gives back the reservation of a PutAsync whose value failed its
// checksum: its space returns to the bucket when nothing was reserved after
// it, and stays reserved (counted until eviction, never referenced)
// otherwise. The bytes written there are never served: no record points at
// them, a later object overwrites them, and recovery cuts them off.
func (t *Tier) unreserve(b *bucket, off, need uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b.writers--
	if b.reserved == off+need {
		b.reserved = off
		b.nobj--
		b.used -= need
		t.used -= need
	}
	if b.sealed {
		t.sealLocked(b)
	}
}

// maxPrealloc is how far ahead of its objects a bucket's data file is
// allocated (at most BucketSize).
const maxPrealloc = 32 << 20

// allocate makes sure b's data file has allocated blocks up to end, growing
// it maxPrealloc at a time (not past BucketSize unless one object needs
// more). The O_DIRECT writes then land inside the file's size on allocated
// (unwritten) blocks, as fio's do in its laid-out file: ext4 runs such
// writes of one file in parallel under a shared inode lock, where writes
// that extend the file take it exclusively and journal a size change each.
// The tail allocated past the last object is cut off by Close and by
// recovery; until then it is not counted in Stats.Used.
func (t *Tier) allocate(b *bucket, end uint64) error {
	b.allocMu.Lock()
	defer b.allocMu.Unlock()
	if b.noAlloc || end <= b.allocated {
		return nil
	}
	target := max(end, min(b.allocated+t.prealloc, t.space.bucket(t.cfg.BucketSize)))
	err := b.data.Allocate(int64(target))
	if errors.Is(err, syscall.ENOSPC) && target > end {
		target = end // room for this object, not for a whole chunk
		err = b.data.Allocate(int64(target))
	}
	switch {
	case errors.Is(err, ErrNoAllocate):
		b.noAlloc = true
		return nil
	case err != nil:
		return err
	}
	b.allocated = target
	b.allocSeen.Store(target)
	return nil
}

// trimAll cuts the allocated tail off the data files of buckets created by
// this tier (Close: every Put is done).
func (t *Tier) trimAll() {
	t.mu.Lock()
	type trim struct {
		b   *bucket
		end uint64
	}
	var trims []trim
	for _, b := range t.buckets {
		trims = append(trims, trim{b, b.reserved})
	}
	t.mu.Unlock()
	for _, tr := range trims {
		b := tr.b
		b.allocMu.Lock()
		if b.allocated > tr.end {
			if err := b.data.Truncate(int64(tr.end)); err != nil {
				t.log.Warn("ssd: cannot cut preallocated tail off data file", "bucket", b.id, "err", err)
			} else {
				b.allocated = tr.end
				b.allocSeen.Store(tr.end)
			}
		}
		b.allocMu.Unlock()
	}
}

// enqueue hands a written object to the commit goroutine.
func (t *Tier) enqueue(p *Pending) {
	c := &t.cm
	c.mu.Lock()
	first := len(c.dirty) == 0
	if len(p.b.queue) == 0 {
		c.dirty = append(c.dirty, p.b)
	}
	p.b.queue = append(p.b.queue, p)
	c.queued += p.need
	now := c.closing || c.queued >= c.bytesLimit
	c.mu.Unlock()
	if now {
		c.signal(c.now)
	} else if first {
		c.signal(c.first)
	}
}

// Sync makes every object whose PutAsync returned before the call durable
// and indexed: it starts a commit at once and waits for it. It returns an
// error if a commit failed meanwhile (the failed objects' Pendings carry
// their own errors) or ctx ended.
func (t *Tier) Sync(ctx context.Context) error {
	c := &t.cm
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return errClosed("")
	}
	base := c.finished
	target := c.started // a running round may hold records queued earlier
	if len(c.dirty) > 0 {
		target++
	}
	c.mu.Unlock()
	c.signal(c.now)
	for {
		c.mu.Lock()
		finished, ch := c.finished, c.roundDone
		failRound, failErr := c.failRound, c.failErr
		c.mu.Unlock()
		if finished >= target {
			if failRound > base {
				return kverr.New(kverr.FileWriteFail, "", "ssd: a commit failed: %v", failErr)
			}
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// commitLoop is the commit goroutine, started by Open and stopped by Close.
func (t *Tier) commitLoop() {
	c := &t.cm
	defer close(c.exited)
	timer := time.NewTimer(c.interval)
	timer.Stop()
	armed := false
	for {
		select {
		case <-c.stop:
			t.commitRound() // Close waited for every Put: normally nothing left
			c.mu.Lock()
			c.stopped = true
			c.mu.Unlock()
			return
		case <-c.now:
		case <-c.first:
			if !armed {
				timer.Reset(c.interval)
				armed = true
			}
			continue
		case <-timer.C:
		}
		timer.Stop()
		armed = false
		if more := t.commitRound(); more {
			timer.Reset(c.interval) // records queued during the round
			armed = true
		}
	}
}

// commitRound commits every queued record and reports whether records were
// queued meanwhile.
func (t *Tier) commitRound() (more bool) {
	c := &t.cm
	c.mu.Lock()
	c.started++
	round := c.started
	dirty := c.dirty
	c.dirty, c.queued = nil, 0
	batches := make([][]*Pending, len(dirty))
	for i, b := range dirty {
		batches[i], b.queue = b.queue, nil
	}
	c.mu.Unlock()

	var first error
	for i, b := range dirty {
		if err := t.commitBucket(b, batches[i]); err != nil && first == nil {
			first = err
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.finished = round
	if first != nil {
		c.failRound, c.failErr = round, first
	}
	close(c.roundDone)
	c.roundDone = make(chan struct{})
	return len(c.dirty) > 0
}

// commitBucket makes one bucket's batch durable and indexes it.
//
// Crash ordering: every record's data write returned before the batch was
// taken, so the data fdatasync makes all of their bytes durable before any
// of the records is written; each frame is written only after the frame
// before it was fdatasync'd (metaMu, one commit goroutine).
func (t *Tier) commitBucket(b *bucket, batch []*Pending) error {
	t.mu.Lock()
	meta := b.meta
	t.mu.Unlock()
	b.metaMu.Lock()
	bad := b.metaBad
	b.metaMu.Unlock()
	var err error
	if bad {
		err = fmt.Errorf("an earlier commit of bucket %d failed; bucket sealed", b.id)
	} else if err = b.data.Sync(); err != nil {
		b.metaMu.Lock()
		b.metaBad = true // the data file's state is unknown: no record may point into it
		b.metaMu.Unlock()
		err = fmt.Errorf("data fdatasync: %w", err)
	}
	done := 0
	for err == nil && done < len(batch) {
		// One frame: as many records as fit maxFrameBody (at least one).
		n, body := 0, 0
		for done+n < len(batch) && (n == 0 || body+len(batch[done+n].rec) <= maxFrameBody) {
			body += len(batch[done+n].rec)
			n++
		}
		recs := make([]byte, 0, body)
		for _, p := range batch[done : done+n] {
			recs = append(recs, p.rec...)
		}
		var g int64
		g, err = b.appendMeta(meta, appendFrame(make([]byte, 0, frameHeaderSize+body), recs, n), t.metaReserve)
		if err != nil {
			err = fmt.Errorf("metadata: %w", err)
			break
		}
		t.st.commits.Add(1)
		t.finishBatch(b, batch[done:done+n], uint64(g))
		done += n
	}
	if err != nil {
		t.failBatch(b, batch[done:], err)
		return fmt.Errorf("bucket %d: %w", b.id, err)
	}
	return nil
}

// finishBatch indexes committed objects and wakes their waiters.
func (t *Tier) finishBatch(b *bucket, batch []*Pending, metaGrown uint64) {
	var bytes uint64
	t.mu.Lock()
	b.writers -= len(batch)
	b.used += metaGrown
	t.used += metaGrown
	var killed []bool
	for i, p := range batch {
		close(t.inflight[p.k])
		delete(t.inflight, p.k)
		if t.removalsActiveLocked() && t.killedLocked(p.e) {
			// Removed while being written: durable but dead (the
			// removals log covers it at recovery), never indexed.
			if killed == nil {
				killed = make([]bool, len(batch))
			}
			killed[i] = true
			continue
		}
		b.extents[p.e.Loc.Offset] = p.e
		t.index[p.k] = p.e
		bytes += p.e.Size
	}
	if b.sealed {
		t.sealLocked(b)
	}
	if killed != nil {
		t.pruneRemovalsLocked()
	}
	t.mu.Unlock()
	t.st.puts.Add(uint64(len(batch)))
	t.st.bytesWritten.Add(bytes)
	for i, p := range batch {
		if killed != nil && killed[i] {
			p.release(kverr.New(kverr.ObjectNotFound, p.k.key, "ssd: removed while being written"))
		} else {
			p.release(nil)
		}
		t.ops.Done()
	}
}

// failBatch ends Puts whose commit failed: the bucket is sealed (its
// committed objects keep serving; the failed ones' space stays counted until
// the bucket is evicted) and each Pending carries the error.
func (t *Tier) failBatch(b *bucket, batch []*Pending, err error) {
	if len(batch) == 0 {
		return
	}
	t.st.writeErrors.Add(uint64(len(batch)))
	t.log.Warn("ssd: commit failed; bucket sealed", "bucket", b.id, "objects", len(batch), "err", err)
	t.mu.Lock()
	b.writers -= len(batch)
	t.sealLocked(b)
	for _, p := range batch {
		close(t.inflight[p.k])
		delete(t.inflight, p.k)
	}
	t.mu.Unlock()
	for _, p := range batch {
		p.release(writeErr(p.k.key, fmt.Sprintf("bucket %d commit", b.id), err))
		t.ops.Done()
	}
}
