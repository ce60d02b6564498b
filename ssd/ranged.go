package ssd

import (
	"context"

	"github.com/kvtier/kvtier/kverr"
)

// Ranged reads: part of one committed object, e.g. the 1 MiB chunks the
// REST API streams an object in, so that serving a 64 MiB object does not
// hold 64 MiB per request. A range has no checksum of its own: the bytes
// are returned as read, and the reader verifies the object's CRC32C over
// all its ranges (REST aborts the response on a mismatch). The range must
// start on a Block boundary (O_DIRECT); object starts are, so chunks of a
// multiple of Block are.

// containingLocked returns the committed object of b holding [off, off+n),
// or nil. A linear scan: buckets hold at most BucketMaxObjects objects, and
// ranged reads are rare next to whole-object reads. t.mu must be held.
func containingLocked(b *bucket, off, n uint64) *Entry {
	if e := b.extents[off]; e != nil {
		if n <= e.Size {
			return e
		}
		return nil
	}
	for start, e := range b.extents {
		if start < off && off+n <= start+e.Size && off+n > off {
			return e
		}
	}
	return nil
}

// readRange reads dst at off, inside object e of bucket b. Called with t.mu
// held; it releases it.
func (t *Tier) readRange(ctx context.Context, b *bucket, e *Entry, off uint64, dst []byte) error {
	if off%Block != 0 {
		t.mu.Unlock()
		return kverr.New(kverr.InvalidParams, e.Key, "ssd: a ranged read must start on a %d-byte boundary, not at %d", Block, off)
	}
	b.readers++
	b.lastUse = t.clock.Now()
	t.ops.Add(1)
	key := e.Key
	t.mu.Unlock()
	defer t.endRead(b)
	if err := t.readData(b.data, off, dst); err != nil {
		clear(dst)
		t.st.readErrors.Add(1)
		return kverr.New(kverr.FileReadFail, key, "ssd: bucket %d offset %d (range): %v", b.id, off, err)
	}
	t.st.bytesRead.Add(uint64(len(dst)))
	return nil
}
