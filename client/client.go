package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/protobuf/proto"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/dram"
	"github.com/kvtier/kvtier/internal/crc32c"
	"github.com/kvtier/kvtier/internal/fastrpc"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// Checksum returns the CRC32C of b, the checksum kvtier stores with objects.
func Checksum(b []byte) uint32 { return crc32c.Checksum(b) }

// Config configures a Client. The zero value (plus MasterAddr) is a pure
// caller with defaults.
type Config struct {
	MasterAddr string // host:port of the master's gRPC listener (required)
	ClientID   string // stable node identity; default hostname-pid-random
	Tenant     string // default "default"

	HeartbeatInterval time.Duration // default 1s
	RPCTimeout        time.Duration // per master call; default 10s

	// OneShot is a caller that lives for one command (the CLI verbs): it
	// never heartbeats, so the master never lists it as a node, and its
	// exit raises no grace or gone events. It cannot serve segments.
	OneShot bool

	// GlobalSegmentSize > 0 maps that much memory and mounts it as MEMORY
	// segments of SegmentSize each (default: one segment).
	GlobalSegmentSize uint64
	SegmentSize       uint64
	Hugepages         dram.HugepageMode
	// LocalBufferSize > 0 keeps a registered staging buffer (LocalBuffer()).
	LocalBufferSize uint64

	// DataAddr is where the transfer engine listens when this client serves
	// segments (default 127.0.0.1:0).
	DataAddr string
	// Engine, when set, is used instead of a private transfer engine (the
	// appliance shares one engine between its segments and its client).
	Engine   *transfer.Engine
	Transfer transfer.Config

	// OnHeartbeat may add node figures to each beat; OnHeartbeatReply sees
	// each answer (offload tasks, tier settings). Both run on the heartbeat
	// goroutine.
	OnHeartbeat      func(*kvtierpb.HeartbeatRequest)
	OnHeartbeatReply func(*kvtierpb.HeartbeatResponse)

	// Incarnation and DiskID identify this start of a storage node (the
	// appliance sets them; see master doc.go, "Appliance identity"); sent
	// with every mount and heartbeat. Empty: not tracked.
	Incarnation, DiskID string

	// LeaseCacheKeys lets Get and GetInto reuse the replica list of up to
	// that many recently read keys (default DefaultLeaseCacheKeys;
	// negative: off), without asking the master again, while the read
	// lease the master granted still has more than LeaseCacheMargin
	// (default 1s) to run. The reads served so are reported to the master
	// with the next heartbeat (HeartbeatRequest.cached_reads), which
	// counts them and moves the object's last read as GetReplicaList would,
	// so its LRU and frequency policies see them a beat late (and not at
	// all if that beat fails). Checksums and the lease check after the
	// transfer are the same; a failed read drops the entry and asks the
	// master. A list with a NOF replica is not kept (see revocable): an
	// object removed by another client must not read back from it.
	LeaseCacheKeys   int
	LeaseCacheMargin time.Duration

	// ReplicaHints: Get remembers the replica list of up to that many
	// recently read keys (default 4096; negative: off) and, for a key it
	// remembers, starts reading that replica while it asks the master, so
	// the master call and the transfer overlap instead of running one after
	// the other. The bytes are kept only if the master's answer lists the
	// same replica and they pass the answer's CRC32C; otherwise they are
	// read again from the answer. Unlike LeaseCacheKeys every Get still asks
	// the master: leases, read counts and errors are as without hints.
	ReplicaHints int

	// GRPCOnly sends every master call over gRPC. By default unary calls
	// use the master's fast path (internal/fastrpc, same listener, same
	// messages and errors) when the master offers it, and gRPC otherwise.
	GRPCOnly bool

	// DisableDirectPut keeps every put on the classic path (PutStart, the
	// write, PutEnd). By default a put of one MEMORY replica whose bytes
	// would cross TCP goes to an appliance's data port in one frame
	// (directput.go).
	DisableDirectPut bool
	// DirectPutMax is the largest value a single put sends direct
	// (default DefaultDirectPutMax): above it the round trips saved are
	// small beside the bytes, and the classic write, sliced over several
	// connections (and the appliance's goroutines), moves them faster.
	// Negative: no single put goes direct.
	DirectPutMax int

	// Token is the credential sent with every master call (gRPC
	// `authorization: Bearer` metadata and the fast path's hello) when the
	// master has --credentials. Command-line tools read it from
	// KVTIER_TOKEN or --token-file, never from a flag.
	Token string
	// TLS, when set, is used to reach the master over TLS (gRPC and the
	// fast path); its RootCAs must trust the master's certificate (the
	// tools' KVTIER_TLS_CA / --tls-ca), and a client certificate in it
	// serves mTLS.
	TLS *tls.Config
	// NVMeHostNQN is the host NQN NOF replicas are read and written with
	// [$KVTIER_NVME_HOSTNQN, else one derived from ClientID]. Set it when
	// appliances authenticate NVMe hosts: their secrets are per host NQN.
	NVMeHostNQN string
	// NVMeSecret is the DH-HMAC-CHAP host secret, "DHHC-1:..." or "@FILE"
	// [$KVTIER_NVME_SECRET]; needed when the appliance's target has
	// --nvme-host-key set. NVMeCtrlSecret also authenticates the appliance
	// (bidirectional) [$KVTIER_NVME_CTRL_SECRET].
	NVMeSecret, NVMeCtrlSecret string

	Logger *slog.Logger
}

// DefaultDirectPutMax is Config.DirectPutMax when zero: 16 MiB puts over
// TCP ran at 0.88-0.99 x the classic path direct, 1 MiB ones at 1.1-1.35 x
// (tests BenchmarkClientPutGet, 2026-12-02).
const DefaultDirectPutMax = 4 << 20

// DefaultReplicaHints is Config.ReplicaHints when zero.
const DefaultReplicaHints = 4096

// DefaultLeaseCacheKeys is Config.LeaseCacheKeys when zero.
const DefaultLeaseCacheKeys = 4096

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.MasterAddr == "" {
		return kverr.New(kverr.InvalidParams, "", "client: master address is required")
	}
	for _, a := range strings.Split(c.MasterAddr, ",") {
		if _, _, err := net.SplitHostPort(strings.TrimSpace(a)); err != nil {
			return kverr.New(kverr.InvalidParams, "", "client: master address %q: %v", a, err)
		}
	}
	if c.OneShot && c.GlobalSegmentSize > 0 {
		return kverr.New(kverr.InvalidParams, "", "client: a one-shot client cannot serve a global segment (it never heartbeats)")
	}
	if c.HeartbeatInterval < 0 || c.RPCTimeout < 0 || c.LeaseCacheMargin < 0 {
		return kverr.New(kverr.InvalidParams, "", "client: negative interval")
	}
	return nil
}

func (c *Config) withDefaults() Config {
	out := *c
	if out.ClientID == "" {
		host, _ := os.Hostname()
		out.ClientID = fmt.Sprintf("%s-%d-%04x", host, os.Getpid(), rand.IntN(1<<16))
	}
	if out.Tenant == "" {
		out.Tenant = "default"
	}
	for _, e := range []struct {
		v   *string
		env string
	}{{&out.NVMeHostNQN, "KVTIER_NVME_HOSTNQN"}, {&out.NVMeSecret, "KVTIER_NVME_SECRET"}, {&out.NVMeCtrlSecret, "KVTIER_NVME_CTRL_SECRET"}} {
		if *e.v == "" {
			*e.v = os.Getenv(e.env)
		}
	}
	if out.HeartbeatInterval == 0 {
		out.HeartbeatInterval = time.Second
	}
	if out.RPCTimeout == 0 {
		out.RPCTimeout = 10 * time.Second
	}
	if out.ReplicaHints == 0 {
		out.ReplicaHints = DefaultReplicaHints
	}
	if out.DirectPutMax == 0 {
		out.DirectPutMax = DefaultDirectPutMax
	}
	out.DirectPutMax = min(out.DirectPutMax, transfer.MaxFrameLength) // one frame carries it
	if out.LeaseCacheKeys == 0 {
		out.LeaseCacheKeys = DefaultLeaseCacheKeys
	}
	if out.LeaseCacheMargin == 0 {
		out.LeaseCacheMargin = time.Second
	}
	if out.SegmentSize == 0 {
		out.SegmentSize = out.GlobalSegmentSize
	}
	if out.DataAddr == "" {
		out.DataAddr = "127.0.0.1:0"
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

// Client is a connection to a kvtier cluster. Safe for concurrent use.
type Client struct {
	cfg        Config
	conn       *grpc.ClientConn
	fast       *fastrpc.Conn // nil with Config.GRPCOnly
	master     kvtierpb.MasterClient
	engine     *transfer.Engine
	ownsEngine bool
	endpoint   string // our transfer endpoint when we serve segments

	region      *dram.Region // GlobalSegmentSize memory, nil if none
	localBuffer *dram.Region

	mu       sync.Mutex
	segments map[string]*kvtierpb.Segment // guarded by mu: announced on every beat

	nof nofControllers // NVMe/TCP controllers for NOF replicas

	leases leaseCache
	hints  leaseCache // Config.ReplicaHints: margin math.MinInt64, entries never expire

	hintHits, hintMisses atomic.Uint64 // speculative reads kept / read again
	sinceYield           atomic.Int64  // bytes of non-blocking Gets since the last yield
	activeGets           atomic.Int32  // Gets running now

	// stalled: endpoints whose replica a read gave up on for the next one
	// (replicaCtx), until when (unix ns): ordered lists them last meanwhile.
	stalled sync.Map

	direct directState // where direct puts go (directput.go)

	cachedMu sync.Mutex
	cached   map[string]*cachedRead // guarded by cachedMu: lease-cache reads not yet reported

	stop     context.CancelFunc
	done     chan struct{}
	closeOne sync.Once
	stopOne  sync.Once
	left     atomic.Bool // Leave ran
}

// New connects to the master, maps and mounts this client's own memory when
// configured, and starts heartbeating.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	nvmeSecret, nvmeCtrlSecret, err := nvmeSecrets(cfg)
	if err != nil {
		return nil, err
	}
	target, opts := masterTarget(cfg.MasterAddr)
	opts = append(grpcOptions(), opts...)
	if cfg.TLS != nil {
		opts = append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg.TLS)))
	}
	if cfg.Token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(tokenCreds{token: cfg.Token, tls: cfg.TLS != nil}))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, kverr.New(kverr.RPCFail, "", "client: connect master %s: %v", cfg.MasterAddr, err)
	}
	var cc grpc.ClientConnInterface = conn
	var fast *fastrpc.Conn
	if !cfg.GRPCOnly {
		fast, err = fastrpc.Dial(fastrpc.ClientConfig{Addrs: masterAddrs(cfg.MasterAddr), Fallback: conn, Token: cfg.Token, TLS: cfg.TLS})
		if err != nil {
			conn.Close()
			return nil, kverr.New(kverr.InvalidParams, "", "client: %v", err)
		}
		cc = fast
	}
	c := &Client{
		cfg:      cfg,
		conn:     conn,
		fast:     fast,
		master:   kvtierpb.NewMasterClient(cc),
		segments: map[string]*kvtierpb.Segment{},
		done:     make(chan struct{}),
		leases:   leaseCache{max: cfg.LeaseCacheKeys, margin: cfg.LeaseCacheMargin, m: map[string]*ReplicaList{}},
		hints:    leaseCache{max: cfg.ReplicaHints, margin: math.MinInt64, m: map[string]*ReplicaList{}},
	}
	c.nof.secret, c.nof.ctrlSecret = nvmeSecret, nvmeCtrlSecret
	// Each client's round robin over the boxes starts at a place of its
	// own: clients that put once or a few times (the CLI, short-lived
	// workers) would otherwise all put on the same box.
	c.direct.rr.Store(rand.Uint64())
	if err := c.setup(ctx); err != nil {
		if c.engine != nil {
			c.release(c.servedSegments())
		} else {
			c.release(nil)
		}
		return nil, err
	}
	if cfg.OneShot {
		return c, nil
	}
	hbCtx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	go c.heartbeatLoop(hbCtx)
	return c, nil
}

// grpcOptions are the master connection's options. Fixed flow-control
// windows switch off gRPC's bandwidth-delay-product estimator, whose PING
// frames add a round of wake-ups to the small, latency-bound master calls;
// the shared write buffer saves a buffer per connection.
func grpcOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
		grpc.WithInitialWindowSize(4 << 20),
		grpc.WithInitialConnWindowSize(16 << 20),
		grpc.WithSharedWriteBuffer(true),
	}
}

// tokenCreds sends Config.Token with every gRPC call. Without TLS the token
// crosses the network in clear, as it would over the fast path: the
// master's --insecure / loopback rule is where that is decided.
type tokenCreds struct {
	token string
	tls   bool
}

func (t tokenCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + t.token}, nil
}

func (t tokenCreds) RequireTransportSecurity() bool { return false }

// masterTarget turns "a:1,b:2" (a leader and its standbys in HA mode) into a
// gRPC target that tries the addresses in turn: only the elected master
// listens, so whichever accepts is the leader, and a broken connection makes
// gRPC try the list again after a failover.
func masterTarget(addrs string) (string, []grpc.DialOption) {
	list := masterAddrs(addrs)
	if len(list) == 1 {
		return "passthrough:///" + list[0], nil
	}
	r := manual.NewBuilderWithScheme("kvtier-masters")
	var st resolver.State
	for _, a := range list {
		st.Addresses = append(st.Addresses, resolver.Address{Addr: a})
	}
	r.InitialState(st)
	return r.Scheme() + ":///masters", []grpc.DialOption{grpc.WithResolvers(r)}
}

// masterAddrs splits a comma-separated master address list.
func masterAddrs(addrs string) []string {
	list := strings.Split(addrs, ",")
	for i := range list {
		list[i] = strings.TrimSpace(list[i])
	}
	return list
}

func (c *Client) setup(ctx context.Context) error {
	cfg := c.cfg
	if cfg.Engine != nil {
		c.engine = cfg.Engine
	} else {
		tcfg := cfg.Transfer
		if tcfg.ClientTLS == nil {
			// The master's CA also vouches for appliances' TLS data ports
			// (tls:// endpoints).
			tcfg.ClientTLS = cfg.TLS
		}
		e, err := transfer.New(tcfg)
		if err != nil {
			return err
		}
		c.engine, c.ownsEngine = e, true
		// Whether this node reads and writes over RDMA, and why not.
		if on, why := e.RDMAStatus(); on || tcfg.RDMADevice == "" || tcfg.RDMADevice == "auto" || tcfg.RDMADevice == "off" {
			cfg.Logger.Info("rdma", "status", why, "routes", e.Routes())
		} else {
			cfg.Logger.Warn("rdma device not usable: transfers go over TCP", "device", tcfg.RDMADevice, "status", why)
		}
	}
	if cfg.LocalBufferSize > 0 {
		r, err := dram.Map(cfg.LocalBufferSize, cfg.Hugepages)
		if err != nil {
			return fmt.Errorf("client: local buffer: %w", err)
		}
		c.localBuffer = r
		if err := c.engine.RegisterSegment(cfg.ClientID+"/buffer", r.Bytes()); err != nil {
			return err
		}
	}
	if cfg.GlobalSegmentSize == 0 {
		return nil
	}
	switch {
	case c.ownsEngine && cfg.Transfer.MemNet != nil:
		// In-memory transport (tests): peers reach the segments at
		// mem://CLIENTID, no socket.
		ep, err := cfg.Transfer.MemNet.Attach(cfg.ClientID, c.engine)
		if err != nil {
			return err
		}
		c.endpoint = ep
	case c.ownsEngine:
		addr, err := c.engine.Listen(cfg.DataAddr)
		if err != nil {
			return kverr.New(kverr.TransferFail, "", "client: listen %s: %v", cfg.DataAddr, err)
		}
		c.endpoint = transfer.TLSEndpoint(addr.String(), c.engine.Secure())
	}
	r, err := dram.Map(cfg.GlobalSegmentSize, cfg.Hugepages)
	if err != nil {
		return fmt.Errorf("client: global segment: %w", err)
	}
	c.region = r
	if err := r.Prefault(ctx); err != nil {
		return err
	}
	for i, mem := range dram.Split(r.Bytes(), cfg.SegmentSize) {
		name := fmt.Sprintf("%s/mem%d", cfg.ClientID, i)
		if err := c.ServeSegment(ctx, name, mem); err != nil {
			return err
		}
	}
	return nil
}

// SetEndpoint records the transfer endpoint peers use to reach segments this
// client serves (used when Config.Engine is shared and listens elsewhere).
func (c *Client) SetEndpoint(ep string) {
	c.mu.Lock()
	c.endpoint = ep
	c.mu.Unlock()
}

// ID returns the client's node identity.
func (c *Client) ID() string { return c.cfg.ClientID }

// Tenant returns the tenant the client's calls carry.
func (c *Client) Tenant() string { return c.cfg.Tenant }

// Engine returns the transfer engine the client moves bytes with.
func (c *Client) Engine() *transfer.Engine { return c.engine }

// Master returns the raw gRPC stub, for node-level calls (offload, disk
// registration) made by the appliance.
func (c *Client) Master() kvtierpb.MasterClient { return c.master }

// LocalBuffer returns the registered staging buffer (nil when not configured).
func (c *Client) LocalBuffer() []byte {
	if c.localBuffer == nil {
		return nil
	}
	return c.localBuffer.Bytes()
}

// ServeSegment registers mem with the transfer engine under name and mounts it
// on the master as a MEMORY segment owned by this client.
func (c *Client) ServeSegment(ctx context.Context, name string, mem []byte) error {
	if err := c.engine.RegisterSegment(name, mem); err != nil {
		return err
	}
	seg, err := c.MemorySegment(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.segments[name] = seg
	c.mu.Unlock()
	return c.MountSegment(ctx, seg)
}

// MemorySegment is the mount announcement of memory segment name as the
// transfer engine's registry (the one record of a node's segments) holds
// it: its size, this client's endpoint, and what the engine offers for it
// beyond TCP (RDMA side channel, region base and rkey when RDMA is on).
func (c *Client) MemorySegment(name string) (*kvtierpb.Segment, error) {
	mem, ok := c.engine.Segment(name)
	if !ok {
		return nil, kverr.New(kverr.SegmentNotFound, "", "client: segment %q is not registered in the transfer engine", name)
	}
	off := c.engine.Offer(name)
	c.mu.Lock()
	defer c.mu.Unlock()
	return &kvtierpb.Segment{
		Name: name, Type: kvtierpb.ReplicaType_MEMORY, Node: c.cfg.ClientID,
		Endpoint: c.endpoint, Size: uint64(len(mem)),
		RdmaAddr: off.RDMAAddr, RdmaBase: off.RDMABase, RdmaRkey: off.RDMAKey,
		RdmaFreesBase: off.RDMAFreesBase, RdmaFreesRkey: off.RDMAFreesKey,
		DirectPut: c.engine.TakesDirectPuts(), DirectPutLocal: c.engine.PlacesDirectPutsLocally(),
	}, nil
}

// servedSegments are the memory segments this client announces that its
// engine serves (mounted through ServeSegment).
func (c *Client) servedSegments() []string {
	c.mu.Lock()
	names := make([]string, 0, len(c.segments))
	for n, s := range c.segments {
		if s.GetType() == kvtierpb.ReplicaType_MEMORY {
			names = append(names, n)
		}
	}
	c.mu.Unlock()
	out := names[:0]
	for _, n := range names {
		if _, ok := c.engine.Segment(n); ok {
			out = append(out, n)
		}
	}
	return out
}

// MountSegment mounts seg on the master and re-announces it on every
// heartbeat (so it is remounted after a master restart or a grace period).
func (c *Client) MountSegment(ctx context.Context, seg *kvtierpb.Segment) error {
	// The heartbeat goroutine marshals announced segments concurrently: store
	// a private copy that nobody writes to afterwards.
	seg = proto.Clone(seg).(*kvtierpb.Segment)
	seg.Node = c.cfg.ClientID
	c.mu.Lock()
	c.segments[seg.Name] = seg
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	_, err := c.master.MountSegment(ctx, &kvtierpb.MountSegmentRequest{ClientId: c.cfg.ClientID, Segment: seg,
		Incarnation: c.cfg.Incarnation, DiskId: c.cfg.DiskID})
	if err == nil && c.engine != nil && len(c.engine.GrantKeyIDs()) == 0 {
		// The master signs this node's replicas from the mount on; fetch
		// the grant keys now rather than at the next beat, so the data
		// port enforces grants from the first put.
		c.Heartbeat(ctx)
	}
	return kverr.FromGRPC(err)
}

// UnmountSegment stops announcing the segment and unmounts it on the master
// after grace (reads are served until then).
func (c *Client) UnmountSegment(ctx context.Context, name string, grace time.Duration) error {
	c.mu.Lock()
	delete(c.segments, name)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout+grace)
	defer cancel()
	_, err := c.master.UnmountSegment(ctx, &kvtierpb.UnmountSegmentRequest{
		ClientId: c.cfg.ClientID, Name: name, GraceMs: grace.Milliseconds(), Incarnation: c.cfg.Incarnation})
	return kverr.FromGRPC(err)
}

func (c *Client) heartbeatLoop(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		bctx, done := finishOnStop(ctx)
		c.Heartbeat(bctx)
		done()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beatFinishWait is how long a heartbeat in flight may still take once
// its loop is stopped.
const beatFinishWait = time.Second

// finishOnStop is the loop's context for one beat: when the loop is
// stopped (Close, Leave) a beat in flight is given beatFinishWait to
// finish instead of being abandoned at once. An abandoned beat may still
// reach the master after the goodbye that Leave sends next, on another
// stream, and bring the departed client's row back (seen under load:
// TestCLICallsAreNotNodes); a finished one was applied before it.
// done releases it once the beat returned.
func finishOnStop(loop context.Context) (ctx context.Context, done func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(loop))
	stop := context.AfterFunc(loop, func() { time.AfterFunc(beatFinishWait, cancel) })
	return ctx, func() { stop(); cancel() }
}

// Heartbeat sends one beat now. Errors are logged, not returned: the next beat
// retries, and the master's grace state covers short outages.
func (c *Client) Heartbeat(ctx context.Context) {
	c.mu.Lock()
	req := &kvtierpb.HeartbeatRequest{ClientId: c.cfg.ClientID, Endpoint: c.endpoint,
		Incarnation: c.cfg.Incarnation, DiskId: c.cfg.DiskID,
		HeartbeatIntervalMs: uint32(min(c.cfg.HeartbeatInterval.Milliseconds(), math.MaxUint32))}
	for _, s := range c.segments {
		req.Segments = append(req.Segments, s)
	}
	c.mu.Unlock()
	if c.engine != nil {
		if req.GrantKeyIds = c.engine.GrantKeyIDs(); len(req.GrantKeyIds) > 0 {
			req.GrantRefusals = c.engine.Stats().GrantRefusals
		}
	}
	req.CachedReads = c.takeCachedReads()
	if c.cfg.OnHeartbeat != nil {
		c.cfg.OnHeartbeat(req)
	}
	cctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	resp, err := c.master.Heartbeat(cctx, req)
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("heartbeat failed", "master", c.cfg.MasterAddr, "err", kverr.FromGRPC(err))
		}
		return
	}
	c.installGrantKeys(resp.GetGrantKeys())
	if c.cfg.OnHeartbeatReply != nil {
		c.cfg.OnHeartbeatReply(resp)
	}
}

// installGrantKeys hands the data-plane grant keys of a heartbeat answer
// to the transfer engine, which from then on refuses requests for this
// node's segments without a valid grant (internal/grant). An answer
// without keys (an older master) leaves the engine as it is.
func (c *Client) installGrantKeys(pks []*kvtierpb.GrantKey) {
	if len(pks) == 0 || c.engine == nil {
		return
	}
	keys := make([]grant.Key, 0, len(pks))
	for _, pk := range pks {
		if len(pk.GetSecret()) != len(grant.Key{}.Secret) || pk.GetId() == 0 {
			c.cfg.Logger.Warn("heartbeat answer carries a malformed grant key; keys unchanged", "id", pk.GetId(), "secret_bytes", len(pk.GetSecret()))
			return
		}
		k := grant.Key{ID: pk.GetId()}
		copy(k.Secret[:], pk.GetSecret())
		keys = append(keys, k)
	}
	c.engine.SetGrantKeys(keys...)
}

// stopHeartbeats ends the heartbeat goroutine and waits for it (once).
func (c *Client) stopHeartbeats() {
	c.stopOne.Do(func() {
		if c.stop != nil {
			c.stop()
			<-c.done
		}
	})
}

// Leave stops heartbeating and sends one last beat saying this node is
// shutting down, so the master stops handing out its replicas at once
// rather than after the silence. The master keeps them (a restart under
// the same name serves them again). Close still has to be called.
func (c *Client) Leave(ctx context.Context) error {
	if c.cfg.OneShot || c.left.Swap(true) {
		return nil
	}
	c.stopHeartbeats()
	// The incarnation keeps a refused duplicate's goodbye from marking the
	// live holder of the name as gone (the master admits it like any beat).
	req := &kvtierpb.HeartbeatRequest{ClientId: c.cfg.ClientID, Endpoint: c.endpoint, Leaving: true,
		Incarnation: c.cfg.Incarnation, DiskId: c.cfg.DiskID,
		HeartbeatIntervalMs: uint32(min(c.cfg.HeartbeatInterval.Milliseconds(), math.MaxUint32))}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RPCTimeout)
	defer cancel()
	_, err := c.master.Heartbeat(ctx, req)
	return kverr.FromGRPC(err)
}

// Close stops heartbeating, says goodbye (Leave), unmounts this client's own segments and releases
// its memory. It does not unmount segments added by an embedding appliance
// unless they were mounted through ServeSegment.
func (c *Client) Close() error {
	var err error
	c.closeOne.Do(func() {
		c.stopHeartbeats()
		served := c.servedSegments() // before the unmounts forget them
		if c.region != nil {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RPCTimeout)
			for _, n := range served {
				if e := c.UnmountSegment(ctx, n, 0); e != nil && !kverr.Is(e, kverr.SegmentNotFound) {
					err = errors.Join(err, e)
				}
			}
			cancel()
		}
		// Goodbye: a pure caller leaves no row behind, a storage node is
		// suspect at once instead of after the silence. Best effort.
		lctx, lcancel := context.WithTimeout(context.Background(), min(c.cfg.RPCTimeout, time.Second))
		_ = c.Leave(lctx)
		lcancel()
		err = errors.Join(err, c.release(served))
	})
	return err
}

// release unregisters served (the memory segments this client registered)
// and frees the client's memory.
func (c *Client) release(served []string) error {
	var err error
	if c.engine != nil {
		for _, n := range served {
			_ = c.engine.UnregisterSegment(n)
		}
		if c.localBuffer != nil {
			_ = c.engine.UnregisterSegment(c.cfg.ClientID + "/buffer")
		}
		if c.ownsEngine {
			err = errors.Join(err, c.engine.Close())
		}
	}
	if c.region != nil {
		err = errors.Join(err, c.region.Close())
	}
	if c.localBuffer != nil {
		err = errors.Join(err, c.localBuffer.Close())
	}
	err = errors.Join(err, c.closeNOF())
	if c.fast != nil {
		err = errors.Join(err, c.fast.Close())
	}
	if c.conn != nil {
		err = errors.Join(err, c.conn.Close())
	}
	return err
}

func (c *Client) rpcCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.RPCTimeout)
}

func (c *Client) isLocal(r *kvtierpb.Replica) bool {
	if r.Node == c.cfg.ClientID {
		return true
	}
	_, ok := c.engine.Segment(r.Segment)
	return ok
}

// cachedRead counts reads of one key served from the lease cache.
type cachedRead struct {
	count uint32
	last  time.Time
}

// maxCachedReadKeys bounds the keys one heartbeat reports (the master's
// MaxCachedReads); reads of further keys in the same beat are not reported.
const maxCachedReadKeys = 1 << 16

// noteCachedRead records a read served from the lease cache.
func (c *Client) noteCachedRead(key string) {
	now := time.Now()
	c.cachedMu.Lock()
	defer c.cachedMu.Unlock()
	r := c.cached[key]
	if r == nil {
		if len(c.cached) >= maxCachedReadKeys {
			return
		}
		if c.cached == nil {
			c.cached = map[string]*cachedRead{}
		}
		r = &cachedRead{}
		c.cached[key] = r
	}
	if r.count < ^uint32(0) {
		r.count++
	}
	r.last = now
}

// takeCachedReads hands the unreported cached reads to a heartbeat.
func (c *Client) takeCachedReads() []*kvtierpb.CachedRead {
	c.cachedMu.Lock()
	m := c.cached
	c.cached = nil
	c.cachedMu.Unlock()
	if len(m) == 0 {
		return nil
	}
	now := time.Now()
	out := make([]*kvtierpb.CachedRead, 0, len(m))
	for k, r := range m {
		out = append(out, &kvtierpb.CachedRead{Tenant: c.cfg.Tenant, Key: []byte(k), Count: r.count,
			LastReadAgeMs: uint64(max(now.Sub(r.last), 0).Milliseconds())})
	}
	return out
}

// leaseCache keeps replica lists whose read lease is still running
// (Config.LeaseCacheKeys).
type leaseCache struct {
	max    int
	margin time.Duration

	mu sync.Mutex
	// guarded by mu:
	m map[string]*ReplicaList
}

// get returns key's list while its lease has more than margin left.
func (l *leaseCache) get(key string) *ReplicaList {
	if l.max <= 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rl := l.m[key]
	if rl != nil && time.Until(rl.LeaseDeadline) <= l.margin {
		delete(l.m, key)
		return nil
	}
	return rl
}

func (l *leaseCache) put(key string, rl *ReplicaList) {
	if l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !revocable(rl) {
		delete(l.m, key)
		return
	}
	if len(l.m) >= l.max {
		now := time.Now()
		for k, v := range l.m { // drop expired entries, else any one
			if v.LeaseDeadline.Sub(now) <= l.margin {
				delete(l.m, k)
			}
		}
		for k := range l.m {
			if len(l.m) < l.max {
				break
			}
			delete(l.m, k)
		}
	}
	l.m[key] = rl
}

// revocable reports whether every replica of rl stops being served once
// the master frees it, so that a read through a cached list cannot return
// an object another client removed (Remove with force): a MEMORY replica's
// grant is revoked at its box (and in its shared-memory free table), a
// LOCAL_DISK replica is served by the SSD tier's index, which the removal
// updates before it returns. A NOF replica is read by block address
// straight from its namespace, which knows nothing of frees; and when a
// MEMORY replica is refused, the read would go on to it.
func revocable(rl *ReplicaList) bool {
	for _, r := range rl.Replicas {
		if r.Type == kvtierpb.ReplicaType_NOF {
			return false
		}
	}
	return true
}

func (l *leaseCache) drop(keys ...string) {
	if l.max <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		delete(l.m, k)
	}
}
