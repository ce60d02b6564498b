package transfer

import (
	"context"
	"errors"

	"github.com/kvtier/kvtier/kverr"
)

// Transport is one way of moving requests between a caller's buffer and a
// segment that is not registered in this Engine: same-host shared memory
// (shm.go), one-sided RDMA verbs (rdmatransport.go; a device only with the
// build tag rdma), framed TCP
// (tcp.go, tcpbatch.go) and, for tests, an in-memory network (mem.go). The
// local copy (local.go) is one too, taken whenever the segment is
// registered here. Each implementation owns its peers, connections and
// wire state; the Engine keeps the registry of local segments and sources,
// batching of a Submit's requests per transport, and the accounting.
//
// Routing: a request goes to the first transport in the engine's routes
// (local > shared memory > RDMA > in-memory > TCP) that reaches its
// segment now (both sides speak it: a mapping of the peer's segment, an
// RDMA offer in the request and a device here, ...). A transport that
// fails a request with TRANSFER_FAIL for a connection-level reason (the
// peer or the path is gone, not a refusal) hands it to the next route that
// reaches it; a refusal (INVALID_PARAMS, SEGMENT_NOT_FOUND,
// PERMISSION_DENIED, a source's code) is final, as is a failure after the
// engine closed or the caller's ctx ended.
//
// The methods are unexported: the set of transports is the engine's.
type Transport interface {
	// Name is the transport's name in logs and errors.
	Name() string
	// reaches reports whether the transport can carry r now. It is cheap
	// and never blocks; it may start a discovery in the background (shared
	// memory) and stash what it found in r.
	reaches(r *reqState) bool
	// submit starts rs (each one reached), completing every request exactly
	// once through r.sliceDone (r.left counts its parts). A transport that
	// completes a request after submit returned calls r.b.async() before
	// handing it to another goroutine.
	submit(ctx context.Context, rs []*reqState)
}

var (
	_ Transport = (*localTransport)(nil)
	_ Transport = (*shmTransport)(nil)
	_ Transport = (*tcpTransport)(nil)
	_ Transport = (*memTransport)(nil)
	_ Transport = (*rdmaTransport)(nil)
)

// maxRoutes bounds Engine.routes (shm, rdma, mem, tcp).
const maxRoutes = 4

// buildRoutes lists the remote transports, best first.
func (e *Engine) buildRoutes() []Transport {
	rs := []Transport{e.shm}
	if e.rdma != nil {
		rs = append(rs, e.rdma)
	}
	if e.mem != nil {
		rs = append(rs, e.mem)
	}
	return append(rs, e.tcp)
}

// Routes names the transports a remote request may take, best first (the
// local copy, always first for a segment registered here, is not listed).
func (e *Engine) Routes() []string {
	out := make([]string, len(e.routes))
	for i, t := range e.routes {
		out[i] = t.Name()
	}
	return out
}

// routeFrom returns the index of the first route from k on that reaches r,
// or -1.
func (e *Engine) routeFrom(r *reqState, k int) int {
	for ; k < len(e.routes); k++ {
		if e.routes[k].reaches(r) {
			return k
		}
	}
	return -1
}

func noRoute(r *reqState) error {
	return kverr.New(kverr.TransferFail, "", "transfer: %s segment %q: no transport reaches endpoint %q", r.req.Op, r.req.Segment, r.req.Endpoint)
}

// errFinal marks a TRANSFER_FAIL that must not be retried on another
// transport (a WRITE that may have landed in memory nobody serves).
var errFinal = errors.New("not retried on another transport")

// fallback hands r, failed with err by its current route, to the next
// route that reaches it, and reports whether it did (r is then not
// finished). Only connection-level failures move on: see Transport.
func (e *Engine) fallback(r *reqState, err error) bool {
	if r.route < 0 || kverr.CodeOf(err) != kverr.TransferFail || errors.Is(err, errFinal) {
		return false
	}
	if r.ctx.Err() != nil {
		return false
	}
	e.mu.RLock()
	closed := e.closed
	e.mu.RUnlock()
	if closed {
		return false
	}
	// The routes after the first (shared memory) stash nothing in r.
	k := e.routeFrom(r, r.route+1)
	if k < 0 {
		return false
	}
	e.stats.fallbacks.Add(1)
	r.route = k
	r.selfRead = false
	r.first.Store(nil)
	r.left.Store(1)
	r.crc, r.crcs, r.sliceLen = 0, nil, 0
	e.routes[k].submit(r.ctx, []*reqState{r})
	return true
}
