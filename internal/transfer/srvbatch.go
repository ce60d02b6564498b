package transfer

import (
	"io"
	"net"

	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// srvBatch is a server connection's reused state for batch frames, so a
// connection serving a stream of batches allocates nothing per frame.
type srvBatch struct {
	desc  []byte
	toks  []byte // version 2: one grant per extent
	names [][]byte
	exts  []batchExtent
	segs  []*segment // pinned, one per name
	mems  [][]byte   // one per extent: its bytes in segment memory
	iov   net.Buffers
}

// serveBatch answers one batch frame (ops 4 and 5) whose header is h. It
// validates everything before it touches any memory: the descriptor (counts,
// name table, lengths summing to the payload), every name a registered
// memory segment, every extent inside its segment. A frame failing any check
// is refused whole with an error frame naming the first bad extent (a WRITE's
// payload is read and discarded) and writes nothing; the client then sends
// that frame's extents one frame each, so every key gets its own result.
// A returned error is a connection failure.
func (c *srvConn) serveBatch(h reqHeader) error {
	e := c.e
	if e.predatesBatch.Load() { // test double of an engine from before batch frames
		e.stats.malformed.Add(1)
		return errMalformed
	}
	b := c.batch
	if b == nil {
		b = &srvBatch{}
		c.batch = b
	}
	if uint64(cap(b.desc)) < h.offset {
		b.desc = make([]byte, h.offset)
	}
	desc := b.desc[:h.offset]
	if _, err := io.ReadFull(&c.in, desc); err != nil {
		return err
	}
	var toks []byte
	if h.grant { // version 2: K grants after the descriptors (K <= 4096: at most 352 KiB)
		k := int(h.bucket) * grant.Size
		if cap(b.toks) < k {
			b.toks = make([]byte, k)
		}
		toks = b.toks[:k]
		if _, err := io.ReadFull(&c.in, toks); err != nil {
			return err
		}
	}
	var err error
	b.names, b.exts, err = parseBatchDesc(desc, h, b.names, b.exts)
	e.stats.servedFrames.Add(1)
	if err != nil {
		return c.refuse(h, kverr.New(kverr.InvalidParams, "", "%v", err))
	}
	hold := e.holdFrame() // a revocation waits for the frame (grants.go)
	defer e.releaseFrame(&hold)
	if toks != nil || e.grants.keys.Enforced() {
		// Every extent's grant before any segment is looked up; the client
		// resends a refused frame's requests one frame each, so each gets
		// its own answer.
		for i, x := range b.exts {
			var tok []byte
			if toks != nil {
				tok = toks[i*grant.Size : (i+1)*grant.Size]
			}
			op := Read
			if h.op == opBatchWrite {
				op = Write
			}
			if err := e.checkGrant(&hold, tok, b.names[x.name], 0, x.offset, x.length, op); err != nil {
				return c.refuse(h, kverr.New(kverr.PermissionDenied, "", "batch extent %d of %d: %s", i, len(b.exts), err.(*kverr.Error).Msg))
			}
		}
	}
	defer func() {
		for i, s := range b.segs {
			s.refs.Done()
			b.segs[i] = nil
		}
		b.segs = b.segs[:0]
		clear(b.mems)
		b.mems = b.mems[:0]
	}()
	for i, name := range b.names {
		seg, src := e.acquireBytes(name)
		switch {
		case src != nil:
			return c.refuse(h, kverr.New(kverr.InvalidParams, "", "batch name %d: %q is an extent source; batch frames carry memory segments only", i, name))
		case seg == nil:
			return c.refuse(h, kverr.New(kverr.SegmentNotFound, "", "batch name %d: segment %q not registered on this node", i, name))
		}
		b.segs = append(b.segs, seg)
	}
	for i, x := range b.exts {
		seg := b.segs[x.name]
		if err := checkRange(seg.name, uint64(len(seg.mem)), x.offset, x.length); err != nil {
			return c.refuse(h, kverr.New(kverr.InvalidParams, "", "batch extent %d of %d: %s", i, len(b.exts), err.(*kverr.Error).Msg))
		}
		b.mems = append(b.mems, seg.mem[x.offset:x.offset+x.length])
	}
	if h.op == opBatchWrite {
		if err := c.readScatter(b.mems); err != nil {
			return err
		}
		e.stats.servedWritten.Add(h.length)
		return c.respond(h, nil)
	}
	e.stats.servedRead.Add(h.length)
	// One writev: the header and every extent straight from segment memory.
	putResponseHeader(c.rh[:], respHeader{op: h.op, id: h.id, payloadLen: h.length})
	b.iov = append(b.iov[:0], c.rh[:])
	b.iov = append(b.iov, b.mems...)
	iov := b.iov
	_, err = iov.WriteTo(c.nc)
	clear(b.iov)
	return err
}

// readScatter fills mems from the connection. Extents of scatterDirect
// bytes or more are read as a single frame's payload is (readInto: straight
// into the segment below 2 x bounceSize, through the cached chunk buffer
// above); runs of smaller ones are read up to bounceSize bytes at a time
// into the chunk buffer and copied into place, so many small extents cost a
// few reads, not one each.
func (c *srvConn) readScatter(mems [][]byte) error {
	if c.bounce == nil {
		c.bounce = make([]byte, bounceSize)
	}
	for i := 0; i < len(mems); {
		if len(mems[i]) >= scatterDirect {
			if err := c.readInto(mems[i]); err != nil {
				return err
			}
			i++
			continue
		}
		// A run of small extents: j is past its end, run its bytes.
		j, run := i, 0
		for j < len(mems) && len(mems[j]) < scatterDirect {
			run += len(mems[j])
			j++
		}
		off := 0
		for run > 0 {
			n := min(run, bounceSize)
			src := c.bounce[:n]
			if _, err := io.ReadFull(&c.in, src); err != nil {
				return err
			}
			run -= n
			for len(src) > 0 {
				k := copy(mems[i][off:], src)
				src = src[k:]
				if off += k; off == len(mems[i]) {
					i, off = i+1, 0
				}
			}
		}
	}
	return nil
}

// scatterDirect is the smallest extent of a batch WRITE read on its own:
// above it a read per extent costs less than copying it once more.
const scatterDirect = 16 << 10
