package transfer

import (
	"fmt"

	"github.com/kvtier/kvtier/internal/crc32c"
	"io"
	"time"

	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// Batch frames: the requests of one Submit that go to the same peer in the
// same direction, each at most SliceSize bytes of a memory segment, travel
// as a few batch frames instead of one frame each: one request header, one
// writev of every payload, one response (with every READ payload), one
// wake-up of the receive goroutine. The frames are spread over the peer's
// connections, so the server's per-connection goroutines work on one call
// in parallel.
const (
	// minBatchFrame is the least payload worth a frame of its own when a
	// batch is spread over connections: below it the fixed cost of a frame
	// (a wake-up on each side) outweighs the parallelism.
	minBatchFrame = 64 << 10
	// maxBatchFrame is the most payload a client puts in one batch frame.
	maxBatchFrame = 4 << 20
	// maxClientBatchExtents keeps a WRITE frame within one writev (IOV_MAX
	// is 1024: the header and the payloads).
	maxClientBatchExtents = 1000
	// receiveBufSize is the receive goroutine's read buffer: a response
	// header and the small payloads after it come in one read.
	receiveBufSize = 64 << 10
	// receiveDirectMin is the least remainder of a payload read straight
	// from the socket rather than through the read buffer.
	receiveDirectMin = 16 << 10
	// noBatchBackoff is how long a peer that dropped a batch frame before
	// ever answering one gets single frames only.
	noBatchBackoff = time.Minute
)

// batchable reports whether r may travel in a batch frame.
func (e *Engine) batchable(r *reqState) bool {
	return !e.cfg.DisableBatchFrames && r.req.Bucket == 0 && len(r.req.Buf) <= e.cfg.SliceSize
}

// batchGroup is the batchable requests of a Submit for one peer and op.
type batchGroup struct {
	endpoint string
	op       Op
	rs       []*reqState
	bytes    int
}

// batches turns the batchable requests rs (in Submit order) into frames
// appended to out: a batch frame per run of requests to one peer in one
// direction, plain frames where there is nothing to batch.
func (t *tcpTransport) batches(rs []*reqState, out []*slice) []*slice {
	var groups []*batchGroup
	for _, r := range rs {
		var g *batchGroup
		for _, x := range groups {
			if x.endpoint == r.req.Endpoint && x.op == r.req.Op {
				g = x
				break
			}
		}
		if g == nil {
			g = &batchGroup{endpoint: r.req.Endpoint, op: r.req.Op}
			groups = append(groups, g)
		}
		g.rs = append(g.rs, r)
		g.bytes += len(r.req.Buf)
	}
	now := time.Now().UnixNano()
	for _, g := range groups {
		p, err := t.peer(g.endpoint)
		if len(g.rs) < 2 || err != nil || now < p.noBatchUntil.Load() {
			for _, r := range g.rs {
				out = t.slices(r, out)
			}
			continue
		}
		out = t.packGroup(g, p.freeConns(t.e.cfg.ConnsPerPeer), out)
	}
	return out
}

// packGroup cuts g into frames of about equal payload: one per free
// connection of the peer (at least one) while each keeps minBatchFrame,
// more when the frame caps demand it. A lone caller so spreads its batch
// over every connection (and the server's goroutines), while concurrent
// callers, which keep the connections busy between them, send a frame
// each instead of queueing several behind one another.
func (t *tcpTransport) packGroup(g *batchGroup, free int, out []*slice) []*slice {
	frames := min(max(free, 1), len(g.rs), max(1, g.bytes/minBatchFrame))
	frames = max(frames, (g.bytes+maxBatchFrame-1)/maxBatchFrame, (len(g.rs)+maxClientBatchExtents-1)/maxClientBatchExtents)
	target := (g.bytes + frames - 1) / frames
	var cur []*slice
	n := 0
	names := map[string]struct{}{}
	flush := func() {
		switch len(cur) {
		case 0:
		case 1: // nothing to batch
			out = append(out, cur[0])
		default:
			x := cur[0]
			op := opBatchRead
			if g.op == Write {
				op = opBatchWrite
			}
			out = append(out, &slice{r: x.r, op: op, name: x.name, off: x.off, ext: cur, n: n})
		}
		cur, n = nil, 0
		clear(names)
	}
	for _, r := range g.rs {
		req := &r.req
		_, known := names[req.Segment]
		if len(cur) > 0 && (n+len(req.Buf) > maxBatchFrame || len(cur) == maxClientBatchExtents || (!known && len(names) == maxBatchNames)) {
			flush()
		}
		r.left.Store(1)
		cur = append(cur, &slice{r: r, op: req.Op, name: req.Segment, off: req.Offset, buf: req.Buf[:len(req.Buf):len(req.Buf)]})
		names[req.Segment] = struct{}{}
		if n += len(req.Buf); n >= target {
			flush()
		}
	}
	flush()
	return out
}

// sendBatchLocked writes batch frame s: header, descriptor and (WRITE) every
// payload in one writev; the caller holds wmu and a pipeline slot.
func (c *clientConn) sendBatchLocked(s *slice) {
	c.nextID++
	s.id = c.nextID
	names, exts := c.bnames[:0], c.bexts[:0]
	granted := false
	for _, x := range s.ext {
		granted = granted || x.r.req.Grant != nil
		idx := -1
		for j, nm := range names { // a handful of segments per peer
			if nm == x.name {
				idx = j
				break
			}
		}
		if idx < 0 {
			names = append(names, x.name)
			idx = len(names) - 1
		}
		exts = append(exts, batchExtent{name: idx, offset: x.off, length: uint64(len(x.buf))})
	}
	if cap(c.bhdr) < requestHeaderLen {
		c.bhdr = make([]byte, requestHeaderLen, 4096)
	}
	hdr := c.bhdr[:requestHeaderLen]
	putRequestHeader(hdr, reqHeader{op: s.op, nameLen: len(names), id: s.id, bucket: uint64(len(exts)), offset: uint64(batchDescLen(names, len(exts))), length: uint64(s.n), grant: granted})
	c.bhdr = appendBatchDesc(hdr, names, exts)
	if granted { // one grant per extent; zeros for a request without one
		for _, x := range s.ext {
			if g := x.r.req.Grant; g != nil {
				c.bhdr = append(c.bhdr, g...)
			} else {
				c.bhdr = append(c.bhdr, make([]byte, grant.Size)...)
			}
		}
	}
	c.bnames, c.bexts = names, exts
	if s.op == opBatchWrite {
		for _, x := range s.ext {
			if x.r.wantSum() {
				x.sumWrite()
			}
		}
	}
	if !c.enqueue(s) {
		return
	}
	// s now belongs to the receiver: below, only its immutable ext is read.
	var err error
	if s.op == opBatchWrite {
		c.iov = append(c.iov[:0], c.bhdr)
		for _, x := range s.ext {
			c.iov = append(c.iov, x.buf)
		}
		iov := c.iov
		_, err = iov.WriteTo(c.nc)
		clear(c.iov)
	} else {
		_, err = c.nc.Write(c.bhdr)
	}
	if err != nil {
		c.failIO(err, kverr.New(kverr.TransferFail, "", "transfer: send to %s: %v", c.p.addr, err))
	}
}

// receiveBatch handles the response h to batch frame s: every READ payload
// straight into its request's buffer (checksummed as it lands when asked),
// in order. A refusal sends the frame's extents again one frame each, so
// each request gets its own answer (the server wrote nothing).
func (c *clientConn) receiveBatch(s *slice, h respHeader) error {
	if h.status != 0 {
		if _, err := io.ReadFull(c.rd, c.msg[:h.msgLen]); err != nil {
			return fmt.Errorf("receive error message: %w", err)
		}
		c.p.batchOK.Store(true)
		c.e.tcp.unbatch(s)
		return nil
	}
	if h.msgLen != 0 {
		return fmt.Errorf("%w: OK response with a message", errMalformed)
	}
	if s.op == opBatchRead {
		if h.payloadLen != uint64(s.n) {
			return fmt.Errorf("%w: batch READ response of %d bytes, asked %d", errMalformed, h.payloadLen, s.n)
		}
		for _, x := range s.ext {
			crc, err := c.readExtent(x.buf, x.r.wantSum())
			if err != nil {
				return fmt.Errorf("receive payload: %w", err)
			}
			x.r.crc = crc
		}
	}
	c.p.batchOK.Store(true)
	s.finish(c.e, nil)
	return nil
}

// readExtent fills buf from the connection (and checksums it when sum):
// what the read buffer holds first, then, for a large remainder, straight
// from the socket into buf (no copy through the buffer), and a small
// remainder through the buffer, which then also takes what follows it.
func (c *clientConn) readExtent(buf []byte, sum bool) (uint32, error) {
	var crc uint32
	for len(buf) > 0 {
		var n int
		var err error
		if c.rd.Buffered() == 0 && len(buf) >= receiveDirectMin {
			n, err = c.nc.Read(buf)
		} else {
			n, err = c.rd.Read(buf)
		}
		if n > 0 {
			if sum {
				crc = crc32c.Update(crc, buf[:n])
			}
			buf = buf[n:]
		}
		if err != nil && len(buf) > 0 {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
	}
	return crc, nil
}

// unbatch completes batch frame s without completing its requests, and sends
// them again one frame each.
func (t *tcpTransport) unbatch(s *slice) {
	if !s.done.CompareAndSwap(false, true) {
		return
	}
	if s.held > 0 {
		t.e.clisem.release(s.held)
	}
	t.dispatchAsync(t.e.ctx, s.ext)
}
