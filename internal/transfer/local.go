package transfer

import (
	"context"
	"errors"
	"fmt"

	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/internal/memcopy"
	"github.com/kvtier/kvtier/kverr"
)

// localTransport serves requests whose segment is registered in the same
// Engine with one copy() (or one ReadExtent straight into Buf), whatever the
// request's Endpoint says. Submit pins the segment while classifying, so
// it never sits in the routes: a registered segment is always local.
type localTransport struct{ e *Engine }

func (t *localTransport) Name() string { return "local" }

func (t *localTransport) reaches(r *reqState) bool { return r.seg != nil || r.src != nil }

func (t *localTransport) submit(ctx context.Context, rs []*reqState) {
	for _, r := range rs {
		t.do1(ctx, r)
	}
}

// do1 moves r (classified: r.seg pinned or r.src set) and completes it.
func (t *localTransport) do1(ctx context.Context, r *reqState) {
	r.sliceDone(t.do(ctx, r, r.seg, r.src))
}

// do moves r.req with seg pinned (it releases it) or through src, and
// checksums what it read when asked (r.crc).
func (t *localTransport) do(ctx context.Context, r *reqState, seg *segment, src ExtentSource) error {
	req := &r.req
	n := uint64(len(req.Buf))
	switch {
	case seg != nil:
		defer seg.refs.Done()
		if req.Bucket != 0 {
			return kverr.New(kverr.InvalidParams, "", "segment %q: bucket %d given for a memory segment", req.Segment, req.Bucket)
		}
		if err := checkRange(req.Segment, uint64(len(seg.mem)), req.Offset, n); err != nil {
			return err
		}
		switch {
		case req.Op == Read && r.wantSum():
			r.crc = copyCRCParallel(req.Buf, seg.mem[req.Offset:req.Offset+n])
		case req.Op == Read:
			copy(req.Buf, seg.mem[req.Offset:req.Offset+n])
		default:
			if r.wantSum() {
				r.crc = crc32c.Checksum(req.Buf)
			}
			memcopy.NonTemporal(seg.mem[req.Offset:req.Offset+n], req.Buf)
		}
		return nil
	case src != nil:
		if req.Op != Read {
			return kverr.New(kverr.InvalidParams, "", "extent source %q is read-only", req.Segment)
		}
		if err := src.ReadExtent(ctx, req.Bucket, req.Offset, req.Buf); err != nil {
			return wrapSourceErr(req.Segment, req.Bucket, req.Offset, err)
		}
		if r.wantSum() {
			r.crc = crc32c.Checksum(req.Buf)
		}
		return nil
	}
	return kverr.New(kverr.SegmentNotFound, "", "segment %q not registered (unregistered meanwhile)", req.Segment)
}

// wrapSourceErr keeps the source's kverr code (CHECKSUM_MISMATCH, ...) and
// adds where it happened; an uncoded error becomes FILE_READ_FAIL.
func wrapSourceErr(name string, bucket, off uint64, err error) error {
	var kerr *kverr.Error
	if errors.As(err, &kerr) {
		return fmt.Errorf("extent source %q bucket %d offset %d: %w", name, bucket, off, err)
	}
	return fmt.Errorf("%w: %w", kverr.New(kverr.FileReadFail, "", "extent source %q bucket %d offset %d", name, bucket, off), err)
}
