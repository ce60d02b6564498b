package transfer

import (
	"bytes"
	"context"
	"io"
	"net"
	"time"

	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/internal/memcopy"
	"github.com/kvtier/kvtier/kverr"
)

// PutIdentity is whom a direct-put frame puts for: the tenant and client
// of its ticket, and the ticket itself when signed (passed on to the
// master, which checks it again); Ticket is nil for an unsigned ticket
// (the master runs without grants).
type PutIdentity struct {
	Tenant, Client string
	Ticket         []byte
}

// PutPlacement is where a direct put was placed: a memory segment
// registered in this engine and an offset, or why it was not.
type PutPlacement struct {
	Segment string
	Offset  uint64
	Err     error
	// Token is the handler's own (the appliance: its DRAM directory
	// records' places), handed back to EndPuts untouched.
	Token [3]uint64
}

// PutHandler places the puts of direct-put frames for the serving side
// (the appliance asks its master). The engine calls StartPuts once per
// frame, before it reads the frame's bytes, then moves each placed put's
// bytes into its extent and checks its CRC32C, then calls EndPuts once
// with StartPuts' placements and the outcome per put (nil: bytes in place
// and checksum right; a put not placed has its placement's error), which
// commits the placed puts without error and revokes the other placed
// ones, and returns the final result per put. Both run on the
// connection's goroutine and may block on the master.
type PutHandler interface {
	StartPuts(ctx context.Context, id PutIdentity, puts []DirectPut) []PutPlacement
	EndPuts(ctx context.Context, id PutIdentity, puts []DirectPut, places []PutPlacement, errs []error) []error
}

// PutStager is a PutHandler that also takes frames staged: the engine
// reads a staged frame's bytes whole into a buffer of its connection and
// checks each put's CRC32C before the handler is asked anything, so the
// handler can place and commit the puts with one call to its master
// instead of two (appliance: staged.go). A put whose bytes do not match
// its checksum is answered CHECKSUM_MISMATCH and never placed.
type PutStager interface {
	PutHandler
	// StagesPuts reports whether a frame of puts is staged.
	StagesPuts(id PutIdentity, puts []DirectPut) bool
	// PutStaged places and commits the puts whose errs entry is nil
	// (their bytes arrived and match), their bytes back to back in b in
	// the frame's order, and returns the result per put (errs, filled
	// in). b is the engine's again once it returns.
	PutStaged(ctx context.Context, id PutIdentity, puts []DirectPut, b []byte, errs []error) []error
}

// putHandler is what SetPutHandler installed.
type putHandler struct {
	h    PutHandler
	node string
}

// SetPutHandler makes the data port take direct-put frames for node (the
// node name put tickets must name), placed by h; nil stops taking them
// (frames are then refused with UNAVAILABLE_IN_CURRENT_STATUS, which a
// client takes as "use the classic path").
func (e *Engine) SetPutHandler(node string, h PutHandler) {
	if h == nil {
		e.putH.Store(nil)
		return
	}
	e.putH.Store(&putHandler{h: h, node: node})
}

// TakesDirectPuts reports whether a PutHandler is installed.
func (e *Engine) TakesDirectPuts() bool { return e.putH.Load() != nil }

// LocalPlacer is a PutHandler that may say it places puts with a master in
// its own process (no second hop behind the frame).
type LocalPlacer interface {
	PlacesLocally() bool
}

// PlacesDirectPutsLocally reports whether the installed PutHandler places
// puts with a master in this process (LocalPlacer).
func (e *Engine) PlacesDirectPutsLocally() bool {
	ph := e.putH.Load()
	if ph == nil {
		return false
	}
	lp, ok := ph.h.(LocalPlacer)
	return ok && lp.PlacesLocally()
}

// putState is a served connection's reused direct-put buffers.
type putState struct {
	buf  []byte
	puts []DirectPut
	errs []error
	res  []byte
	// The last ticket verified on this connection (a client sends the
	// same one with every frame until it renews it): its bytes, key,
	// expiry and identity. Reused while unexpired and its key held.
	tok    []byte
	tokKey uint32
	tokExp int64
	tokID  PutIdentity
	bounce []byte // readSum's chunk buffer (putBounceSize), made on first use
	stage  []byte // a staged put's bytes (PutStager), grown as needed
}

// putBounceSize is readSum's chunk: a direct put's bytes are read from
// the socket into it, summed and moved into the extent with non-temporal
// stores. 256 KiB (still inside L2) against readInto's 64 KiB: a quarter
// of the reads and wake-ups. Measured with BenchmarkClientPutGet put-tcp
// 1 MiB, 3 rounds alternated at load 3: 64 KiB 0.68-0.81 x raw TCP with 4
// callers (p50 1087-1220 µs) against 1.12-1.29 (634-730 µs) with 256 KiB,
// 1 caller 0.74-1.17 against 0.96-1.26; 512 KiB and 1 MiB were no better.
const putBounceSize = 256 << 10

// checkTicket verifies a frame's put ticket for node: with grant keys
// held, a signed ticket of this node, unexpired (refusals counted by
// reason, as grants); without, any well-formed ticket naming this node,
// whose identity is taken as declared.
func (e *Engine) checkTicket(node string, tok []byte) (PutIdentity, grant.Ticket, error) {
	if e.grants.keys.Enforced() {
		t, err := e.grants.keys.VerifyTicket(tok, node, time.Now())
		if err != nil {
			r := grant.ReasonOf(err)
			if int(r) < len(e.grants.refusals) {
				e.grants.refusals[r].Add(1)
			}
			ke := kverr.New(kverr.PermissionDenied, "", "direct put to node %q: %v", node, err)
			if f := e.cfg.OnGrantRefused; f != nil {
				f(r.String(), ke.Msg)
			}
			return PutIdentity{}, t, ke
		}
		return PutIdentity{Tenant: t.Tenant, Client: t.Client, Ticket: append([]byte(nil), tok...)}, t, nil
	}
	t, err := grant.DecodeTicket(tok)
	if err != nil {
		return PutIdentity{}, t, kverr.New(kverr.PermissionDenied, "", "direct put to node %q: %v", node, err)
	}
	if t.Node != node {
		return PutIdentity{}, t, kverr.New(kverr.PermissionDenied, "", "direct put: ticket names node %q, this is %q", t.Node, node)
	}
	id := PutIdentity{Tenant: t.Tenant, Client: t.Client}
	if t.Signed() { // the master has keys this node does not hold yet: it checks
		id.Ticket = append([]byte(nil), tok...)
	}
	return id, t, nil
}

// servePut answers one direct-put frame (header already parsed). A
// returned error is a connection failure; refusals are answered.
func (c *srvConn) servePut(h reqHeader) error {
	e := c.e
	if c.put == nil {
		c.put = &putState{}
	}
	ps := c.put
	tl, d := h.nameLen, int(h.offset)
	if cap(ps.buf) < tl+d {
		ps.buf = make([]byte, tl+d)
	}
	buf := ps.buf[:tl+d]
	if _, err := io.ReadFull(&c.in, buf); err != nil {
		return err
	}
	e.stats.servedFrames.Add(1)
	ph := e.putH.Load()
	if ph == nil {
		return c.refuse(h, kverr.New(kverr.UnavailableInCurrentStatus, "", "this node takes no direct puts"))
	}
	// The ticket is checked before the descriptors are even parsed.
	var id PutIdentity
	if tok := buf[:tl]; ps.tok != nil && bytes.Equal(tok, ps.tok) && time.Now().UnixNano() < ps.tokExp && e.grants.keys.Holds(ps.tokKey) {
		id = ps.tokID
	} else {
		var t grant.Ticket
		var err error
		if id, t, err = e.checkTicket(ph.node, tok); err != nil {
			return c.refuse(h, err)
		}
		ps.tok = nil
		if t.Signed() && e.grants.keys.Enforced() {
			ps.tok, ps.tokKey, ps.tokExp, ps.tokID = id.Ticket, t.KeyID, t.Expiry, id
		}
	}
	puts, err := parsePutDescs(buf[tl:], int(h.bucket), h.length, ps.puts)
	ps.puts = puts[:0]
	if err != nil {
		return c.refuse(h, kverr.New(kverr.InvalidParams, "", "direct put: %v", err))
	}
	if st, ok := ph.h.(PutStager); ok && st.StagesPuts(id, puts) {
		return c.serveStaged(h, st, id, puts)
	}
	places := ph.h.StartPuts(e.ctx, id, puts)
	for len(places) < len(puts) {
		places = append(places, PutPlacement{Err: kverr.New(kverr.InternalError, puts[len(places)].Key, "direct put: no placement")})
	}
	errs := ps.errs[:0]
	for i := range puts {
		pl := places[i]
		if pl.Err != nil {
			if _, err := io.CopyN(io.Discard, &c.in, int64(puts[i].Size)); err != nil {
				return c.abandonPuts(ph, id, puts, places, errs, i, err)
			}
			errs = append(errs, pl.Err)
			continue
		}
		perr, err := c.readPut(pl, &puts[i])
		if err != nil {
			errs = append(errs, kverr.New(kverr.TransferFail, puts[i].Key, "direct put: connection: %v", err))
			return c.abandonPuts(ph, id, puts, places, errs, i+1, err)
		}
		errs = append(errs, perr)
	}
	ps.errs = errs[:0]
	final := ph.h.EndPuts(e.ctx, id, puts, places, errs)
	for _, err := range final {
		if err == nil {
			e.stats.servedDirectPuts.Add(1)
		}
	}
	ps.res = appendPutResults(ps.res[:0], final)
	putResponseHeader(c.rh[:], respHeader{op: opPut, id: h.id, payloadLen: uint64(len(ps.res))})
	bufs := net.Buffers{c.rh[:], ps.res}
	_, err = bufs.WriteTo(c.nc)
	return err
}

// serveStaged answers a direct-put frame whose puts st stages: their
// bytes are read whole and checked before st is asked anything. A
// connection failing before they are all read leaves nothing to revoke.
func (c *srvConn) serveStaged(h reqHeader, st PutStager, id PutIdentity, puts []DirectPut) error {
	e, ps := c.e, c.put
	total := frameBytesOf(puts)
	if uint64(cap(ps.stage)) < total {
		ps.stage = make([]byte, total)
	}
	b := ps.stage[:total]
	errs := ps.errs[:0]
	for i, rest := 0, b; i < len(puts); i++ {
		p := &puts[i]
		var sum uint32
		for v := rest[:p.Size]; len(v) > 0; {
			// A chunk at a time, summed while it is still in cache.
			n := min(len(v), putBounceSize)
			if _, err := io.ReadFull(&c.in, v[:n]); err != nil {
				return err
			}
			sum = crc32c.Update(sum, v[:n])
			v = v[n:]
		}
		rest = rest[p.Size:]
		var perr error
		if sum != p.CRC32C {
			perr = kverr.New(kverr.ChecksumMismatch, p.Key, "direct put: bytes received have CRC32C %08x, the put declared %08x", sum, p.CRC32C)
		}
		errs = append(errs, perr)
	}
	final := st.PutStaged(e.ctx, id, puts, b, errs)
	for i, err := range final {
		if err == nil {
			e.stats.servedDirectPuts.Add(1)
			e.stats.servedWritten.Add(puts[i].Size)
			e.stats.servedStagedPuts.Add(1)
		}
	}
	ps.res = appendPutResults(ps.res[:0], final)
	clear(errs)
	ps.errs = errs[:0]
	putResponseHeader(c.rh[:], respHeader{op: opPut, id: h.id, payloadLen: uint64(len(ps.res))})
	bufs := net.Buffers{c.rh[:], ps.res}
	_, err := bufs.WriteTo(c.nc)
	return err
}

// frameBytesOf sums the sizes of a frame's puts.
func frameBytesOf(puts []DirectPut) uint64 {
	var n uint64
	for i := range puts {
		n += puts[i].Size
	}
	return n
}

// abandonPuts revokes a frame's puts when its connection failed at put
// i (those before it have their outcome in errs), and returns cause.
func (c *srvConn) abandonPuts(ph *putHandler, id PutIdentity, puts []DirectPut, places []PutPlacement, errs []error, i int, cause error) error {
	for j := len(errs); j < len(puts); j++ {
		errs = append(errs, kverr.New(kverr.TransferFail, puts[j].Key, "direct put: connection failed before its bytes"))
	}
	for j := range errs[:i] {
		if errs[j] == nil {
			errs[j] = kverr.New(kverr.TransferFail, puts[j].Key, "direct put: connection failed before the answer")
		}
	}
	ph.h.EndPuts(c.e.ctx, id, puts, places, errs)
	return cause
}

// readPut moves put p's bytes from the connection into its placement and
// checks them. perr is the put's outcome; err a connection failure.
func (c *srvConn) readPut(pl PutPlacement, p *DirectPut) (perr, err error) {
	e := c.e
	seg, _ := e.acquire(pl.Segment)
	if seg == nil {
		_, err = io.CopyN(io.Discard, &c.in, int64(p.Size))
		return kverr.New(kverr.SegmentNotFound, p.Key, "direct put: segment %q not registered on this node", pl.Segment), err
	}
	defer seg.refs.Done()
	if rerr := checkRange(seg.name, uint64(len(seg.mem)), pl.Offset, p.Size); rerr != nil {
		_, err = io.CopyN(io.Discard, &c.in, int64(p.Size))
		return rerr, err
	}
	sum, err := c.readSum(seg.mem[pl.Offset : pl.Offset+p.Size])
	if err != nil {
		return nil, err
	}
	if sum != p.CRC32C {
		return kverr.New(kverr.ChecksumMismatch, p.Key, "direct put: bytes received have CRC32C %08x, the put declared %08x", sum, p.CRC32C), nil
	}
	e.stats.servedWritten.Add(p.Size)
	return nil, nil
}

// readSum is readInto computing the CRC32C of the bytes as they land: a
// small payload straight into mem (then summed while still in cache), a
// large one a chunk at a time through the bounce buffer.
func (c *srvConn) readSum(mem []byte) (uint32, error) {
	if len(mem) < 2*bounceSize {
		if _, err := io.ReadFull(&c.in, mem); err != nil {
			return 0, err
		}
		return crc32c.Checksum(mem), nil
	}
	if c.put.bounce == nil {
		c.put.bounce = make([]byte, putBounceSize)
	}
	b := c.put.bounce
	var sum uint32
	for len(mem) > 0 {
		n := min(len(mem), len(b))
		if _, err := io.ReadFull(&c.in, b[:n]); err != nil {
			return 0, err
		}
		sum = crc32c.Update(sum, b[:n])
		memcopy.NonTemporal(mem[:n], b[:n])
		mem = mem[n:]
	}
	return sum, nil
}
