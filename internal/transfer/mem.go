package transfer

import (
	"context"
	"strings"
	"sync"

	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/kverr"
)

// MemNet is an in-memory network of engines in one process, for tests that
// need no sockets: an engine attached as NAME is reached at the endpoint
// "mem://NAME" by engines whose Config.MemNet is this network. A request
// is served as the TCP server serves a frame (grant check first, then the
// segment or source lookup, bounds, the copy), synchronously inside Submit,
// and counted on the serving engine as a served frame.
type MemNet struct {
	mu sync.RWMutex
	// guarded by mu:
	engines map[string]*Engine
	down    map[string]bool // Partition: requests fail as over a dead link
}

// NewMemNet returns an empty network.
func NewMemNet() *MemNet {
	return &MemNet{engines: map[string]*Engine{}, down: map[string]bool{}}
}

// MemScheme prefixes the endpoints of a MemNet.
const MemScheme = "mem://"

func isMemEndpoint(ep string) bool { return strings.HasPrefix(ep, MemScheme) }

// Attach serves e's segments and sources on the network as name and returns
// the endpoint to advertise ("mem://name").
func (n *MemNet) Attach(name string, e *Engine) (string, error) {
	if err := validName(name); err != nil {
		return "", err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.engines[name]; ok {
		return "", kverr.New(kverr.InvalidParams, "", "transfer: mem network already has %q", name)
	}
	n.engines[name] = e
	return MemScheme + name, nil
}

// Partition makes requests to name fail with TRANSFER_FAIL (down) or work
// again (!down), as a link that breaks.
func (n *MemNet) Partition(name string, down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down[name] = down
}

func (n *MemNet) lookup(ep string) (*Engine, bool) {
	name := strings.TrimPrefix(ep, MemScheme)
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.engines[name], n.down[name]
}

// memTransport is the client side of a MemNet.
type memTransport struct {
	e   *Engine
	net *MemNet
}

func (t *memTransport) Name() string { return "mem" }

func (t *memTransport) reaches(r *reqState) bool { return isMemEndpoint(r.req.Endpoint) }

func (t *memTransport) submit(ctx context.Context, rs []*reqState) {
	for _, r := range rs {
		r.via = viaMem
		r.sliceDone(t.do(ctx, r))
	}
}

// do serves r on the target engine as its TCP server would serve a frame.
func (t *memTransport) do(ctx context.Context, r *reqState) error {
	req := &r.req
	srv, down := t.net.lookup(req.Endpoint)
	if srv == nil || down {
		return kverr.New(kverr.TransferFail, "", "transfer: %s segment %q: mem endpoint %s unreachable", req.Op, req.Segment, req.Endpoint)
	}
	n := uint64(len(req.Buf))
	hold := srv.holdFrame()
	defer srv.releaseFrame(&hold)
	if err := srv.checkGrant(&hold, req.Grant, []byte(req.Segment), req.Bucket, req.Offset, n, req.Op); err != nil {
		srv.stats.servedFrames.Add(1)
		srv.stats.servedErrors.Add(1)
		return err
	}
	seg, src := srv.acquire(req.Segment)
	srv.stats.servedFrames.Add(1)
	var err error
	switch {
	case seg != nil:
		defer seg.refs.Done()
		if req.Bucket != 0 {
			err = kverr.New(kverr.InvalidParams, "", "segment %q: bucket %d given for a memory segment", req.Segment, req.Bucket)
			break
		}
		if err = checkRange(req.Segment, uint64(len(seg.mem)), req.Offset, n); err != nil {
			break
		}
		mem := seg.mem[req.Offset : req.Offset+n]
		if req.Op == Write {
			copy(mem, req.Buf)
			srv.stats.servedWritten.Add(n)
		} else {
			copy(req.Buf, mem)
			srv.stats.servedRead.Add(n)
		}
	case src != nil:
		if req.Op == Write {
			err = kverr.New(kverr.InvalidParams, "", "extent source %q is read-only", req.Segment)
			break
		}
		if err = src.ReadExtent(ctx, req.Bucket, req.Offset, req.Buf); err != nil {
			err = wrapSourceErr(req.Segment, req.Bucket, req.Offset, err)
			break
		}
		srv.stats.servedRead.Add(n)
	default:
		err = kverr.New(kverr.SegmentNotFound, "", "segment %q not registered on this node", req.Segment)
	}
	if err != nil {
		srv.stats.servedErrors.Add(1)
		return err
	}
	if r.wantSum() {
		r.crc = crc32c.Checksum(req.Buf)
	}
	return nil
}
