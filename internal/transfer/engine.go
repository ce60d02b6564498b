package transfer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// Op is the direction of a request, seen from the caller.
type Op uint8

// The operations. The values are on the wire.
const (
	Read  Op = 1 // remote segment -> Buf
	Write Op = 2 // Buf -> remote segment
)

func (o Op) String() string {
	switch o {
	case Read:
		return "READ"
	case Write:
		return "WRITE"
	case opBatchRead:
		return "BATCH-READ"
	case opBatchWrite:
		return "BATCH-WRITE"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Request is one one-sided transfer between the caller's Buf and a segment
// (or an extent source) on the node at Endpoint.
type Request struct {
	Op       Op
	Endpoint string // host:port of the node serving Segment
	Segment  string // segment name on that node, or a registered extent source name
	Bucket   uint64 // only for extent sources (SSD buckets); 0 for segments
	Offset   uint64 // byte offset in the segment (or in the bucket)
	Buf      []byte // Write: source bytes; Read: destination; length = len(Buf)
	// Sum, when non-nil, receives the CRC32C (Castagnoli) of the request's
	// bytes, computed while they move instead of in a second pass over
	// Buf. A READ checksums each socket read while it is still in cache (a
	// local or shared-memory copy checksums as it copies); a WRITE over TCP
	// checksums each slice just before sending it, so the send copies
	// bytes the checksum brought into cache. Written only when the request
	// succeeds, before Wait returns.
	Sum *uint32
	// Offer is what the node at Endpoint offers for Segment beyond TCP, as
	// the replica descriptor carries it (the node's SegmentOffer): with an
	// RDMA side channel named and an RDMA device here, the request is read
	// or written one-sided over RDMA. The zero value offers nothing.
	Offer SegmentOffer
	// Grant is the data-plane grant the master signed for this request's
	// replica extent (internal/grant, grant.Size bytes), sent with every
	// frame of it. An engine serving with grant keys (SetGrantKeys)
	// refuses a request without a valid one (PERMISSION_DENIED). Nil
	// sends old-format frames; the local path ignores it.
	Grant []byte
}

// ExtentSource serves read-only extents, e.g. SSD buckets (package ssd). An
// error carrying a kverr code (e.g. CHECKSUM_MISMATCH) reaches the remote
// caller with that code.
type ExtentSource interface {
	ReadExtent(ctx context.Context, bucket, offset uint64, dst []byte) error
}

// Config tunes an Engine. The zero value means defaults.
type Config struct {
	ConnsPerPeer     int           // TCP connections per peer (default 4)
	SliceSize        int           // bytes per frame for large requests (default 1 MiB, max 64 MiB)
	PipelineDepth    int           // requests in flight per connection (default 4)
	MaxInflightBytes int64         // client bytes in flight, and server extent buffer bytes (default 256 MiB)
	DialTimeout      time.Duration // default 5s
	IOTimeout        time.Duration // deadline for one frame's I/O (default 30s)
	SocketBuffer     int           // SO_SNDBUF/SO_RCVBUF; 0 keeps kernel autotuning, else >= 64 KiB
	// DisableSharedMemory keeps every request to a peer on TCP even when
	// the peer runs on this host and shares its segments' memory.
	DisableSharedMemory bool
	// DisableBatchFrames sends every request of a Submit in a frame of its
	// own, as engines before batch frames did (benchmarks compare the two).
	DisableBatchFrames bool
	// IdleTimeout closes a served connection that starts no frame for this
	// long (default 5 min; the caller redials, see connFailed).
	IdleTimeout time.Duration
	// OnGrantRefused, when set, is called (from the serving goroutine; keep
	// it short) for every request refused for its grant, with the reason
	// (grant.Reason's name, the metric label) and a message naming the
	// segment and extent: the appliance logs it.
	OnGrantRefused func(reason, detail string)
	// ServerTLS, when set, makes Listen serve TLS (crypto/tls): advertise
	// the listener as TLSEndpoint(addr, true) so that peers handshake.
	ServerTLS *tls.Config
	// ClientTLS is the trust used to dial TLSScheme endpoints (a client's
	// master CA, client.Config.TLS); nil: the system's roots. Plain
	// endpoints never use it.
	ClientTLS *tls.Config
	// RDMADevice chooses the RDMA device (build tag rdma): "" or "auto"
	// takes the first one libibverbs lists, "off" disables RDMA, anything
	// else names a device. Without a usable device (or the tag) RDMA is
	// off and RDMAStatus says why; every other transport works as before.
	RDMADevice string
	// RDMAListen is the RDMA side channel's listen address when RDMA is on
	// and the engine serves segments (default: port 0 on the host of the
	// first Listen, or on every interface before any).
	RDMAListen string
	// MemNet, when set, adds the in-memory transport (tests): requests to
	// "mem://NAME" endpoints go to the engine attached to MemNet as NAME.
	MemNet *MemNet
	// FakeRDMA (tests only) runs the RDMA transport over a FAKE fabric
	// instead of a device, whatever RDMADevice says.
	FakeRDMA *FakeRDMA
}

// Defaults.
const (
	DefaultConnsPerPeer     = 4
	DefaultSliceSize        = 1 << 20
	DefaultPipelineDepth    = 4
	DefaultMaxInflightBytes = 256 << 20
	DefaultDialTimeout      = 5 * time.Second
	DefaultIOTimeout        = 30 * time.Second
	DefaultIdleTimeout      = 5 * time.Minute
)

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	switch {
	case c.ConnsPerPeer < 0 || c.ConnsPerPeer > 256:
		return kverr.New(kverr.InvalidParams, "", "transfer: ConnsPerPeer %d outside 0..256", c.ConnsPerPeer)
	case c.SliceSize < 0 || (c.SliceSize > 0 && c.SliceSize < 4096) || c.SliceSize > MaxFrameLength:
		return kverr.New(kverr.InvalidParams, "", "transfer: SliceSize %d outside 4KiB..64MiB", c.SliceSize)
	case c.PipelineDepth < 0 || c.PipelineDepth > 1024:
		return kverr.New(kverr.InvalidParams, "", "transfer: PipelineDepth %d outside 0..1024", c.PipelineDepth)
	case c.MaxInflightBytes < 0:
		return kverr.New(kverr.InvalidParams, "", "transfer: MaxInflightBytes %d < 0", c.MaxInflightBytes)
	case c.DialTimeout < 0 || c.IOTimeout < 0 || c.IdleTimeout < 0:
		return kverr.New(kverr.InvalidParams, "", "transfer: negative timeout")
	case c.SocketBuffer < 0 || (c.SocketBuffer > 0 && c.SocketBuffer < minSocketBuffer):
		// Below 16 KiB a receiver stalls a sender that splices (splice.go):
		// seen with 4 KiB, the connection then waits out its IOTimeout.
		return kverr.New(kverr.InvalidParams, "", "transfer: SocketBuffer %d: 0 (kernel autotuning) or at least %d", c.SocketBuffer, minSocketBuffer)
	}
	d := c.withDefaults()
	if d.MaxInflightBytes < int64(d.SliceSize) {
		return kverr.New(kverr.InvalidParams, "", "transfer: MaxInflightBytes %d < SliceSize %d", d.MaxInflightBytes, d.SliceSize)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.ConnsPerPeer == 0 {
		c.ConnsPerPeer = DefaultConnsPerPeer
	}
	if c.SliceSize == 0 {
		c.SliceSize = DefaultSliceSize
	}
	if c.PipelineDepth == 0 {
		c.PipelineDepth = DefaultPipelineDepth
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.IOTimeout == 0 {
		c.IOTimeout = DefaultIOTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	return c
}

// Stats are cumulative counters of one Engine.
type Stats struct {
	Requests      uint64 // requests completed as a caller
	Errors        uint64 // of which failed
	BytesRead     uint64 // caller READ bytes (successful requests)
	BytesWritten  uint64 // caller WRITE bytes (successful requests)
	LocalRequests uint64 // successful requests served by local memcpy
	LocalBytes    uint64
	TCPRequests   uint64 // successful requests carried over TCP
	TCPBytes      uint64
	// SharedRequests are successful requests served by memcpy through a
	// same-host peer's shared segment memory.
	SharedRequests uint64
	SharedBytes    uint64
	SharedFailures uint64 // shared-memory discoveries of a peer that failed (TCP used)
	SharedRefused  uint64 // shared-memory connections refused (peer of another user)
	// SharedNotAdmitted counts shared-memory requests the segment's free
	// table did not admit (a grant the serving engine revoked, or one it
	// could not vouch for just then): they went over TCP instead.
	SharedNotAdmitted uint64
	// SharedUnpublished counts segments this engine could not give a free
	// table (memfd_create failed): they are served over TCP only.
	SharedUnpublished uint64

	RDMARequests uint64 // successful requests carried by one-sided RDMA
	RDMABytes    uint64
	// RDMANotAdmitted counts RDMA requests the segment's free table (read
	// over RDMA) did not admit: they went over TCP instead.
	RDMANotAdmitted uint64
	MemRequests     uint64 // successful requests over the in-memory transport (tests)
	MemBytes        uint64
	// Fallbacks counts requests a transport could not carry (a
	// connection-level TRANSFER_FAIL) that the next route then took.
	Fallbacks uint64
	// CallerReads counts TCP responses read by a Do caller on its own
	// goroutine (the response to the frame it sent itself, and any queued
	// behind it while its call is still waiting) rather than by the
	// connection's receive goroutine.
	CallerReads uint64

	ServedFrames       uint64 // frames served to peers
	ServedErrors       uint64 // frames refused with an error response
	ServedBytesRead    uint64 // bytes sent to peers (their READs)
	ServedBytesWritten uint64 // bytes received from peers (their WRITEs)
	MalformedFrames    uint64 // connections closed for a malformed frame
	ConnsAccepted      uint64
	ConnsDialed        uint64

	ClientConns int // open connections to peers, now
	ServerConns int // open connections from peers, now
	SharedPeers int // processes mapping this engine's shared segments, now

	AcceptErrors uint64 // failed accepts (backed off and retried, or the listener stopped)

	// GrantRefusals counts requests refused for their data-plane grant,
	// by reason (grant.Reason names: missing, malformed, unknown_key,
	// forged, expired, wrong_op, out_of_extent); every reason is present.
	// A refused batch frame counts once (its first bad extent); this
	// package's client then resends its extents one frame each, and each
	// refused one counts again.
	GrantRefusals map[string]uint64
	GrantKeys     int // grant keys held (0: grants not enforced)

	// DirectPuts are puts this engine sent in direct-put frames that the
	// node committed (also counted in TCPRequests and TCPBytes);
	// ServedDirectPuts the puts of such frames this engine committed.
	DirectPuts, ServedDirectPuts uint64
	// ServedStagedPuts counts those staged (PutStager): read whole, then
	// placed and committed with one master call.
	ServedStagedPuts uint64
	// SplicedBytes are payload bytes sent by reference (splice.go)
	// rather than copied into the socket.
	SplicedBytes uint64
}

type counters struct {
	requests, errors, bytesRead, bytesWritten        atomic.Uint64
	localRequests, localBytes, tcpRequests, tcpBytes atomic.Uint64
	servedFrames, servedErrors, servedRead           atomic.Uint64
	servedWritten, malformed, accepted, dialed       atomic.Uint64
	shmRequests, shmBytes, shmFailed, shmRefused     atomic.Uint64
	acceptErrors, fallbacks, callerReads             atomic.Uint64
	rdmaRequests, rdmaBytes, memRequests, memBytes   atomic.Uint64
	directPuts, servedDirectPuts, splicedBytes       atomic.Uint64
	servedStagedPuts, shmNotAdmitted, shmNoTable     atomic.Uint64
	rdmaNotAdmitted                                  atomic.Uint64
}

// segment is registered memory; refs counts requests using mem.
type segment struct {
	name    string
	mem     []byte
	refs    sync.WaitGroup
	file    *os.File   // shared memory backing mem (ShareMemory), else nil
	fileOff int64      // mem's offset in file
	frees   *freeTable // published revocations, when file is set (shmfrees.go)
	rdma    rdmaSeg    // its RDMA memory region (rdma_on.go), when offered
}

// Engine is a transfer engine: it keeps the registry of local segments and
// extent sources (registry.go), serves them to peers (server.go, and each
// transport's serving side), and routes callers' requests to the best
// Transport both sides share (transport.go), with batching and accounting.
type Engine struct {
	cfg     Config
	stats   counters
	clisem  *byteSem        // client bytes in flight
	srvsem  *byteSem        // server extent buffer bytes
	bufs    *bufPool        // serving side's extent buffers
	ctx     context.Context // cancelled by Close
	cancel  context.CancelFunc
	closing chan struct{}
	wg      sync.WaitGroup
	// predatesBatch (tests only) makes the serving side close a connection
	// on a batch frame, as an engine from before batch frames does.
	predatesBatch atomic.Bool
	lhealth       listenerHealth             // accept loops' trouble (server.go)
	grants        grantCheck                 // data-plane grant keys and refusals (grants.go)
	putH          atomic.Pointer[putHandler] // direct puts' handler (srvput.go); nil: refused
	dput          putConns                   // direct puts' client connections (putclient.go)

	// The transports, each owning its peers, connections and wire state,
	// and routes: the ones tried for a remote request, best first (local
	// is not among them: a segment registered here is always local).
	local *localTransport
	shm   *shmTransport
	rdma  *rdmaTransport // nil: built without the rdma tag, or RDMA off
	// rdmaOff says why rdma is nil
	rdmaOff string
	mem     *memTransport // nil unless Config.MemNet
	tcp     *tcpTransport
	routes  []Transport

	mu sync.RWMutex
	// guarded by mu:
	segments  map[string]*segment
	sources   map[string]ExtentSource
	listeners []net.Listener
	srvConns  map[net.Conn]struct{}
	closed    bool
}

// New returns an Engine with cfg (zero fields take defaults).
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	e := &Engine{
		cfg:      cfg,
		clisem:   newByteSem(cfg.MaxInflightBytes),
		srvsem:   newByteSem(cfg.MaxInflightBytes),
		bufs:     &bufPool{limit: cfg.MaxInflightBytes, min: cfg.SliceSize},
		ctx:      ctx,
		cancel:   cancel,
		closing:  make(chan struct{}),
		segments: map[string]*segment{},
		sources:  map[string]ExtentSource{},
		srvConns: map[net.Conn]struct{}{},
	}
	e.local = &localTransport{e: e}
	e.shm = newShmTransport(e)
	e.tcp = newTCPTransport(e)
	e.rdma, e.rdmaOff = newRDMATransport(e) // RDMAStatus says why it is off
	if cfg.FakeRDMA != nil {                // tests: the FAKE fabric instead of a device
		if e.rdma != nil {
			e.rdma.dev.Close()
		}
		e.rdma, e.rdmaOff = newRDMAOn(e, &fakeDevice{f: cfg.FakeRDMA}, "fake0"), ""
	}
	if cfg.MemNet != nil {
		e.mem = &memTransport{e: e, net: cfg.MemNet}
	}
	e.routes = e.buildRoutes()
	return e, nil
}

// spawn runs f on a goroutine that Close waits for, unless the engine is
// closed (then it returns false and f does not run). Adding to the wait
// group under the lock orders every Add before Close's Wait.
func (e *Engine) spawn(f func()) bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return false
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f()
	}()
	return true
}

func errClosed() error { return kverr.New(kverr.TransferFail, "", "transfer: engine closed") }

// Batch is a set of submitted requests completing asynchronously.
type Batch struct {
	e       *Engine
	errs    []error
	states  []reqState
	pending atomic.Int64
	// done is made (by the Submit goroutine, before the first hand-off to
	// another goroutine: async) only when some request completes after
	// Submit returns; nil when every request completed inside Submit.
	done chan struct{}
	// selfConn: Do's caller, who waits at once, reads the response of the
	// slice it sent itself on this connection (set by the TCP transport
	// during Submit) instead of waiting for a receive goroutine to read it
	// and wake it.
	selfConn *clientConn

	// Abandoning (Do whose ctx can end): track is set before any slice is
	// queued; conns are the TCP connections its slices were queued on; once
	// abandoned, those connections are failed, so the frames on them end
	// at once instead of within IOTimeout, and its slices are not retried.
	track     bool
	abandoned atomic.Bool
	connMu    sync.Mutex
	conns     []*clientConn  // guarded by connMu
	conns2    [2]*clientConn // conns' first storage

	// inline storage for the common one-request batch (one allocation)
	err1 [1]error
	st1  [1]reqState
	rs1  [1]*reqState
}

// async makes b.done before a request is handed to another goroutine. It
// runs on the Submit goroutine, or on a goroutine started after b.done
// exists (a fallback from an asynchronous transport), so it never races
// with itself.
func (b *Batch) async() {
	if b.done == nil {
		b.done = make(chan struct{})
	}
}

// reqState tracks one request of a batch across its slices.
type reqState struct {
	b     *Batch
	idx   int
	req   Request
	ctx   context.Context // the Submit's, for a fallback to the next route
	via   path            // the transport carrying it now
	route int             // index in Engine.routes of that transport (-1: local)
	seg   *segment        // local segment, pinned by classify
	src   ExtentSource    // local extent source
	shm   *shmSeg         // same-host peer's mapped segment (shm transport)
	shmp  *shmPeer        // the mapping shm belongs to
	left  atomic.Int32
	first atomic.Pointer[error]
	// selfRead: submitted by Do, whose goroutine may read the response
	// itself (Batch.selfConn); never for a fallback, which another
	// goroutine submits
	selfRead bool
	// checksum of a request with req.Sum set: crc for one slice (or the
	// local path); crcs[i] for slice i of sliceLen bytes when there are
	// several.
	crc      uint32
	crcs     []uint32
	sliceLen int
}

// wantSum reports whether the request's bytes are to be checksummed.
func (r *reqState) wantSum() bool { return r.req.Sum != nil }

// sum combines the slices' checksums in order.
func (r *reqState) sum() uint32 {
	if len(r.crcs) == 0 {
		return r.crc
	}
	crc := r.crcs[0]
	n := len(r.req.Buf)
	for i := 1; i < len(r.crcs); i++ {
		l := min(r.sliceLen, n-i*r.sliceLen)
		crc = crc32c.Combine(crc, r.crcs[i], uint64(l))
	}
	return crc
}

func (r *reqState) sliceDone(err error) {
	if err != nil {
		r.first.CompareAndSwap(nil, &err)
	}
	if r.left.Add(-1) == 0 {
		var final error
		if p := r.first.Load(); p != nil {
			final = *p
			if r.b.e.fallback(r, final) {
				return // carried on by the next transport
			}
		} else if r.wantSum() {
			*r.req.Sum = r.sum()
		}
		r.b.finish(r.idx, r.req, r.via, final)
	}
}

// path is how a request travelled (which transport's counters it adds to).
type path uint8

const (
	viaLocal  path = iota // memcpy within this Engine
	viaTCP                // framed TCP
	viaShared             // memcpy through a same-host peer's shared memory
	viaRDMA               // one-sided RDMA verbs
	viaMem                // in-memory transport (tests)
)

func (b *Batch) finish(i int, req Request, via path, err error) {
	c := &b.e.stats
	c.requests.Add(1)
	if err != nil {
		c.errors.Add(1)
	} else {
		n := uint64(len(req.Buf))
		if req.Op == Read {
			c.bytesRead.Add(n)
		} else {
			c.bytesWritten.Add(n)
		}
		switch via {
		case viaTCP:
			c.tcpRequests.Add(1)
			c.tcpBytes.Add(n)
		case viaShared:
			c.shmRequests.Add(1)
			c.shmBytes.Add(n)
		case viaRDMA:
			c.rdmaRequests.Add(1)
			c.rdmaBytes.Add(n)
		case viaMem:
			c.memRequests.Add(1)
			c.memBytes.Add(n)
		default:
			c.localRequests.Add(1)
			c.localBytes.Add(n)
		}
	}
	b.errs[i] = err
	if b.pending.Add(-1) == 0 && b.done != nil {
		close(b.done)
	}
}

// Done is closed when every request of the batch has completed.
func (b *Batch) Done() <-chan struct{} {
	if b.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return b.done
}

// Wait blocks until every request completed and returns one error per
// request, in order (nil = ok). A request's Buf is not touched by the engine
// after Wait returns.
func (b *Batch) Wait() []error {
	if b.done != nil {
		<-b.done
	}
	return b.errs
}

// Submit starts reqs and returns at once (requests to local segments, and
// through same-host shared memory, are copied before it returns). ctx
// bounds waiting for dispatch; a frame already on the wire completes or
// fails within IOTimeout.
//
// Each request goes to the first route (transport.go) that reaches its
// segment; the requests of one route are handed to it together, so TCP
// can pack them into batch frames.
func (e *Engine) Submit(ctx context.Context, reqs []Request) *Batch {
	return e.submit(ctx, reqs, false)
}

func (e *Engine) submit(ctx context.Context, reqs []Request, selfRead bool) *Batch {
	b := &Batch{e: e, track: selfRead && ctx.Done() != nil}
	if len(reqs) == 1 {
		b.errs, b.states = b.err1[:], b.st1[:]
	} else {
		b.errs, b.states = make([]error, len(reqs)), make([]reqState, len(reqs))
	}
	// One more than the requests, held until every route has its
	// requests: no completion can close done before Submit made it.
	b.pending.Store(int64(len(reqs)) + 1)
	var groups [maxRoutes][]*reqState
	for i := range reqs {
		r := &b.states[i]
		r.b, r.idx, r.req, r.ctx, r.route, r.selfRead = b, i, reqs[i], ctx, -1, selfRead
		r.left.Store(1)
		err := e.classify(ctx, r)
		switch {
		case err != nil:
			r.sliceDone(err)
		case len(reqs[i].Buf) == 0: // nothing to move
			if r.seg != nil {
				r.seg.refs.Done()
			}
			r.sliceDone(nil)
		case r.seg != nil || r.src != nil:
			e.local.do1(ctx, r)
		default:
			k := e.routeFrom(r, 0)
			if k < 0 {
				r.sliceDone(noRoute(r))
				continue
			}
			r.route = k
			if len(reqs) == 1 {
				b.rs1[0] = r
				groups[k] = b.rs1[:]
			} else {
				groups[k] = append(groups[k], r)
			}
		}
	}
	for k, rs := range groups {
		if len(rs) > 0 {
			e.routes[k].submit(ctx, rs)
		}
	}
	if b.pending.Add(-1) == 0 && b.done != nil {
		close(b.done)
	}
	return b
}

// classify validates rs.req and, when its segment is registered here, pins
// it in rs.seg (or sets rs.src) for the local transport.
func (e *Engine) classify(ctx context.Context, rs *reqState) error {
	r := &rs.req
	if r.Op != Read && r.Op != Write {
		return kverr.New(kverr.InvalidParams, "", "transfer: unknown op %d", uint8(r.Op))
	}
	if err := validName(r.Segment); err != nil {
		return err
	}
	if r.Grant != nil && len(r.Grant) != grant.Size {
		return kverr.New(kverr.InvalidParams, "", "transfer: segment %q: grant of %d bytes, want %d", r.Segment, len(r.Grant), grant.Size)
	}
	if r.Offset > ^uint64(0)-uint64(len(r.Buf)) {
		return kverr.New(kverr.InvalidParams, "", "transfer: segment %q: offset %d + length %d overflows", r.Segment, r.Offset, len(r.Buf))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", kverr.New(kverr.TransferFail, "", "transfer: %s segment %q not started", r.Op, r.Segment), err)
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return errClosed()
	}
	if s, ok := e.segments[r.Segment]; ok {
		s.refs.Add(1)
		rs.seg = s
		return nil
	}
	rs.src = e.sources[r.Segment]
	return nil
}

// Do submits reqs and waits for them. When ctx ends while frames of reqs
// are on the wire over TCP, their connections are closed (the frames of
// other callers on them are retried on fresh ones, as after any broken
// connection) and reqs fail with TRANSFER_FAIL at once, instead of within
// IOTimeout: a caller with another replica to try need not wait for one
// whose box stopped answering. Do still returns only once no frame of reqs
// can write into their buffers.
func (e *Engine) Do(ctx context.Context, reqs []Request) []error {
	b := e.submit(ctx, reqs, true)
	if b.track && b.pending.Load() != 0 {
		stop := context.AfterFunc(ctx, func() { b.abandon(context.Cause(ctx)) })
		defer stop()
	}
	if c := b.selfConn; c != nil && b.pending.Load() != 0 {
		c.readFor(b)
	}
	return b.Wait()
}

// noteConn records that a slice of b was queued on c; on a batch already
// abandoned it fails c at once.
func (b *Batch) noteConn(c *clientConn) {
	b.connMu.Lock()
	if b.abandoned.Load() {
		b.connMu.Unlock()
		c.fail(errAbandoned(c, nil))
		return
	}
	if b.conns == nil {
		b.conns = b.conns2[:0]
	}
	if !slices.Contains(b.conns, c) {
		b.conns = append(b.conns, c)
	}
	b.connMu.Unlock()
}

// abandon fails the connections b's slices were queued on (cause: why its
// caller stopped waiting), unless b is done already.
func (b *Batch) abandon(cause error) {
	if b.pending.Load() == 0 {
		return
	}
	b.connMu.Lock()
	b.abandoned.Store(true)
	conns := slices.Clone(b.conns)
	b.connMu.Unlock()
	for _, c := range conns {
		c.fail(errAbandoned(c, cause))
	}
}

// errAbandoned is the error of the frames on a connection closed because
// a caller stopped waiting for its own.
func errAbandoned(c *clientConn, cause error) error {
	if cause == nil {
		cause = context.Canceled
	}
	return kverr.New(kverr.TransferFail, "", "transfer: %s: connection closed, a caller whose frames were on it stopped waiting (%v)", c.p.addr, cause)
}

// Stats returns the counters.
func (e *Engine) Stats() Stats {
	c := &e.stats
	st := Stats{
		Requests: c.requests.Load(), Errors: c.errors.Load(),
		BytesRead: c.bytesRead.Load(), BytesWritten: c.bytesWritten.Load(),
		LocalRequests: c.localRequests.Load(), LocalBytes: c.localBytes.Load(),
		TCPRequests: c.tcpRequests.Load(), TCPBytes: c.tcpBytes.Load(),
		ServedFrames: c.servedFrames.Load(), ServedErrors: c.servedErrors.Load(),
		ServedBytesRead: c.servedRead.Load(), ServedBytesWritten: c.servedWritten.Load(),
		MalformedFrames: c.malformed.Load(), ConnsAccepted: c.accepted.Load(), ConnsDialed: c.dialed.Load(),
		SharedRequests: c.shmRequests.Load(), SharedBytes: c.shmBytes.Load(),
		SharedFailures: c.shmFailed.Load(), SharedRefused: c.shmRefused.Load(),
		RDMARequests: c.rdmaRequests.Load(), RDMABytes: c.rdmaBytes.Load(),
		MemRequests: c.memRequests.Load(), MemBytes: c.memBytes.Load(),
		Fallbacks:     c.fallbacks.Load(),
		CallerReads:   c.callerReads.Load(),
		AcceptErrors:  c.acceptErrors.Load(),
		GrantRefusals: e.grants.refusalCounts(), GrantKeys: len(e.grants.keys.IDs()),
		ClientConns: e.tcp.connCount(), SharedPeers: e.shm.peerCount(),
		DirectPuts: c.directPuts.Load(), ServedDirectPuts: c.servedDirectPuts.Load(),
		SplicedBytes: c.splicedBytes.Load(), ServedStagedPuts: c.servedStagedPuts.Load(),
		SharedNotAdmitted: c.shmNotAdmitted.Load(), SharedUnpublished: c.shmNoTable.Load(),
		RDMANotAdmitted: c.rdmaNotAdmitted.Load(),
	}
	e.mu.RLock()
	st.ServerConns = len(e.srvConns)
	e.mu.RUnlock()
	return st
}

// Close stops serving, fails queued requests, closes every connection and
// waits for the engine's goroutines. Registered memory is no longer touched
// when Close returns.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return errors.New("transfer: engine already closed")
	}
	e.closed = true
	ls := e.listeners
	e.listeners = nil
	conns := make([]net.Conn, 0, len(e.srvConns))
	for c := range e.srvConns {
		conns = append(conns, c)
	}
	e.mu.Unlock()
	// Each transport stops accepting work and closes its connections
	// before the wait below (their goroutines are in e.wg).
	e.shm.close()
	e.tcp.close()
	e.dput.close()
	if e.rdma != nil {
		e.rdma.close()
	}

	close(e.closing)
	e.cancel()
	for _, l := range ls {
		l.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	e.wg.Wait()
	e.shm.frees.closeFiles() // nothing sends them any more
	if e.rdma != nil {
		e.rdma.release() // memory regions, once nothing can post any more
	}
	return nil
}

// byteSem is a FIFO weighted semaphore counting bytes.
type byteSem struct {
	size int64

	mu sync.Mutex
	// guarded by mu:
	avail   int64
	waiters []*semWaiter
}

type semWaiter struct {
	n     int64
	ready chan struct{}
}

func newByteSem(n int64) *byteSem { return &byteSem{size: n, avail: n} }

// clamp keeps a single acquisition satisfiable.
func (s *byteSem) clamp(n int64) int64 { return min(n, s.size) }

func (s *byteSem) acquire(ctx context.Context, n int64) error {
	s.mu.Lock()
	if len(s.waiters) == 0 && s.avail >= n {
		s.avail -= n
		s.mu.Unlock()
		return nil
	}
	w := &semWaiter{n: n, ready: make(chan struct{})}
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-w.ready: // granted meanwhile: give it back
			s.avail += n
		default:
			for i, x := range s.waiters {
				if x == w {
					s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
					break
				}
			}
		}
		s.notifyLocked()
		return ctx.Err()
	}
}

func (s *byteSem) tryAcquire(n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiters) == 0 && s.avail >= n {
		s.avail -= n
		return true
	}
	return false
}

func (s *byteSem) release(n int64) {
	s.mu.Lock()
	s.avail += n
	s.notifyLocked()
	s.mu.Unlock()
}

func (s *byteSem) notifyLocked() {
	for len(s.waiters) > 0 && s.avail >= s.waiters[0].n {
		w := s.waiters[0]
		s.avail -= w.n
		close(w.ready)
		s.waiters = s.waiters[1:]
	}
}
