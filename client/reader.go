package client

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// ObjectReader reads one object in ranges, so a caller that streams a large
// object (the REST API) holds one chunk at a time instead of the whole
// value. Ranges carry no checksum of their own: the caller verifies the
// object's CRC32C (Checksum) over everything it read, in order.
//
// Each ReadAt that finds less than readerLeaseMargin left on the read lease
// asks the master again (which extends the lease); the object must still
// have the same size and checksum, or the read fails with
// CHECKSUM_MISMATCH (it was removed and stored again meanwhile). A read that
// outlives its lease is retried once with a fresh replica list. Not safe for
// concurrent use.
type ObjectReader struct {
	c   *Client
	key string
	rl  *ReplicaList
}

// readerLeaseMargin is how much lease a range read wants left before it
// starts (a 1 MiB range takes milliseconds; a stalled HTTP reader between
// two ranges may take much longer, hence the re-query).
const readerLeaseMargin = time.Second

// OpenReader asks the master for key's replicas once and returns a reader
// of its bytes. OBJECT_NOT_FOUND and the other lookup errors come from
// here, before any byte is read.
func (c *Client) OpenReader(ctx context.Context, key string) (*ObjectReader, error) {
	rl, err := c.Query(ctx, key)
	if err != nil {
		return nil, err
	}
	return &ObjectReader{c: c, key: key, rl: rl}, nil
}

// Size is the object's size in bytes.
func (r *ObjectReader) Size() uint64 { return r.rl.Size }

// Checksum is the object's CRC32C, when it has one.
func (r *ObjectReader) Checksum() (uint32, bool) { return r.rl.CRC32C, r.rl.HasChecksum }

// ReadAt fills dst with the object's bytes at off. off must be a multiple of
// 4096 (the SSD tier reads with O_DIRECT; MEMORY replicas have no such
// need, but one rule keeps every replica type readable) unless it is 0.
func (r *ObjectReader) ReadAt(ctx context.Context, dst []byte, off uint64) error {
	if end := off + uint64(len(dst)); end < off || end > r.rl.Size {
		return kverr.New(kverr.InvalidParams, r.key, "range [%d,+%d) outside the object's %d bytes", off, len(dst), r.rl.Size)
	}
	if off%4096 != 0 {
		return kverr.New(kverr.InvalidParams, r.key, "range offset %d is not a multiple of 4096", off)
	}
	if len(dst) == 0 {
		return nil
	}
	for attempt := 0; ; attempt++ {
		if time.Until(r.rl.LeaseDeadline) < readerLeaseMargin || attempt > 0 {
			if err := r.requery(ctx); err != nil {
				return err
			}
		}
		err := r.readRange(ctx, dst, off)
		if err == nil && time.Now().After(r.rl.LeaseDeadline) {
			err = kverr.New(kverr.LeaseExpired, r.key, "read lease ended during a range read")
		}
		if err == nil || attempt > 0 || ctx.Err() != nil {
			return err
		}
	}
}

// requery refreshes the replica list and its lease; the object must be the
// one the reader opened.
func (r *ObjectReader) requery(ctx context.Context) error {
	rl, err := r.c.Query(ctx, r.key)
	if err != nil {
		return err
	}
	if rl.Size != r.rl.Size || rl.HasChecksum != r.rl.HasChecksum || rl.CRC32C != r.rl.CRC32C {
		return kverr.New(kverr.ChecksumMismatch, r.key, "the object changed while it was being read (size %d→%d)", r.rl.Size, rl.Size)
	}
	r.rl = rl
	return nil
}

// readRange reads [off, off+len(dst)) from the best replica that works.
func (r *ObjectReader) readRange(ctx context.Context, dst []byte, off uint64) error {
	if len(r.rl.Replicas) == 0 {
		return kverr.New(kverr.ObjectNotFound, r.key, "no complete replica")
	}
	var errs error
	for _, rep := range r.c.ordered(r.rl.Replicas) {
		var err error
		switch rep.Type {
		case kvtierpb.ReplicaType_MEMORY, kvtierpb.ReplicaType_LOCAL_DISK:
			req := [1]transfer.Request{replicaRequest(transfer.Read, rep, off, dst)}
			err = r.c.engine.Do(ctx, req[:])[0]
		case kvtierpb.ReplicaType_NOF:
			part := proto.Clone(rep).(*kvtierpb.Replica) // just the range: readNOF handles the block tail
			part.Offset, part.Length = rep.Offset+off, uint64(len(dst))
			err = r.c.readNOF(ctx, part, dst)
		default:
			err = kverr.New(kverr.InternalError, r.key, "unknown replica type %v", rep.Type)
		}
		if err == nil {
			return nil
		}
		errs = errors.Join(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return kverr.New(kverr.TransferFail, r.key, "every replica failed reading [%d,+%d): %v", off, len(dst), errs)
}
