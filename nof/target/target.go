package target

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kvtier/kvtier/internal/clock"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/auth"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/nvme"
)

// Config tunes the target. The zero value means the defaults in brackets.
type Config struct {
	// MaxQueueDepth is the most entries per queue (MQES+1) [128].
	MaxQueueDepth int
	// MaxIOQueues is the most I/O queues per controller [127].
	MaxIOQueues int
	// InCapsuleDataSize is the in-capsule data accepted on I/O queues [4096].
	InCapsuleDataSize int
	// MaxTransfer is the largest data transfer of one command, a power of two
	// multiple of 4096 (MDTS) [131072].
	MaxTransfer int
	// MaxH2CData is the MAXH2CDATA granted in ICResp [131072].
	MaxH2CData int
	// PollSpin, when positive, makes each connection's reader poll an
	// empty socket this long before it sleeps (nof/sockpoll), as SPDK's
	// target polls: fewer wake-ups for that CPU [0: sleep at once].
	PollSpin time.Duration
	// KeepAliveGranularity is KAS: KATO is rounded up to it [1s].
	KeepAliveGranularity time.Duration
	// KeepAliveCheck is how often expiry is checked [KeepAliveGranularity/2].
	KeepAliveCheck time.Duration
	// DiscoveryKATO applies to discovery controllers that asked for none [120s].
	DiscoveryKATO time.Duration
	// C2HSuccess sets SUCCESS on the last C2HData of a successful read and
	// skips the CapsuleResp even when the host kept SQ flow control on (what
	// SPDK's target does). Off: only when the host disabled SQ flow control
	// (what Linux nvmet does).
	C2HSuccess bool
	// HeaderTimeout bounds how long one PDU may take to arrive once its
	// first byte has (header, data and digests), and how long a new
	// connection may take to send its ICReq and then its Fabrics Connect
	// [10s]. A host that sends half a header is cut off after it.
	HeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next PDU on a queue whose
	// controller has keep-alive disabled (KATO 0) [0: no bound, since such a
	// host asked not to be timed out]. Queues of a controller with a KATO
	// need none: a host sends Keep Alive on the admin queue within KATO, the
	// keep-alive timer tears the whole controller down when it does not,
	// and an I/O queue may rightly stay silent as long as its controller
	// lives. Connections without a controller get HeaderTimeout. A host
	// that vanished without closing is found by TCP keep-alive, which Go
	// enables on accepted connections (15 s probes), whatever the KATO.
	IdleTimeout time.Duration
	// AcceptBackoffMax caps the wait between retries when Accept fails with
	// a temporary error (out of file descriptors, ...) [1s].
	AcceptBackoffMax time.Duration
	// Clock supplies time for keep-alive rules [clock.Real].
	Clock clock.Clock
	// Logger receives connection-level events [slog.Default].
	Logger *slog.Logger
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.MaxQueueDepth != 0 && (c.MaxQueueDepth < 2 || c.MaxQueueDepth > 65536) {
		return kverr.New(kverr.InvalidParams, "", "MaxQueueDepth %d not in 2..65536", c.MaxQueueDepth)
	}
	if c.MaxIOQueues < 0 || c.MaxIOQueues > 65535 {
		return kverr.New(kverr.InvalidParams, "", "MaxIOQueues %d not in 0..65535", c.MaxIOQueues)
	}
	if c.InCapsuleDataSize < 0 || c.InCapsuleDataSize%16 != 0 || c.InCapsuleDataSize > 1<<20 {
		return kverr.New(kverr.InvalidParams, "", "InCapsuleDataSize %d must be a multiple of 16 up to 1 MiB", c.InCapsuleDataSize)
	}
	if m := c.MaxTransfer; m != 0 && (m < 4096 || m&(m-1) != 0 || m > 1<<24) {
		return kverr.New(kverr.InvalidParams, "", "MaxTransfer %d must be a power of two in 4096..16 MiB", m)
	}
	if m := c.MaxH2CData; m != 0 && (m < 4096 || m%4 != 0) {
		return kverr.New(kverr.InvalidParams, "", "MaxH2CData %d must be >= 4096 and a multiple of 4", m)
	}
	if c.KeepAliveGranularity < 0 || c.KeepAliveCheck < 0 || c.DiscoveryKATO < 0 {
		return kverr.New(kverr.InvalidParams, "", "negative keep-alive duration")
	}
	if c.HeaderTimeout < 0 || c.IdleTimeout < 0 || c.AcceptBackoffMax < 0 {
		return kverr.New(kverr.InvalidParams, "", "negative HeaderTimeout, IdleTimeout or AcceptBackoffMax")
	}
	return nil
}

func (c *Config) defaults() {
	if c.MaxQueueDepth == 0 {
		c.MaxQueueDepth = 128
	}
	if c.MaxIOQueues == 0 {
		c.MaxIOQueues = 127
	}
	if c.InCapsuleDataSize == 0 {
		c.InCapsuleDataSize = 4096
	}
	if c.MaxTransfer == 0 {
		c.MaxTransfer = 128 << 10
	}
	if c.MaxH2CData == 0 {
		c.MaxH2CData = 128 << 10
	}
	if c.KeepAliveGranularity == 0 {
		c.KeepAliveGranularity = time.Second
	}
	if c.KeepAliveCheck == 0 {
		c.KeepAliveCheck = c.KeepAliveGranularity / 2
	}
	if c.DiscoveryKATO == 0 {
		c.DiscoveryKATO = 120 * time.Second
	}
	if c.HeaderTimeout == 0 {
		c.HeaderTimeout = 10 * time.Second
	}
	if c.AcceptBackoffMax == 0 {
		c.AcceptBackoffMax = time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Subsystem describes an NVM subsystem to export.
type Subsystem struct {
	NQN    string
	Serial string
	Model  string
	// AllowHosts are the host NQNs allowed to connect; empty = any host,
	// including one that sends an empty Host NQN. Entries must be valid NQNs.
	AllowHosts []string
	// Namespaces become NSIDs 1..len(Namespaces).
	Namespaces []namespace.Namespace
	// HostSecrets turn on in-band authentication (DH-HMAC-CHAP, package
	// nof/auth): every host must then have a secret here, by host NQN, and
	// authenticate each queue before any other command is served (the
	// Connect response sets ATR). A host without a secret is refused at
	// Connect. Hosts with a secret are allowed even if AllowHosts does not
	// list them. Empty: no authentication.
	HostSecrets map[string]*auth.Secret
	// CtrlSecrets are controller secrets by host NQN, for hosts that ask
	// to authenticate the controller too (bidirectional). A host missing
	// here that asks for it fails authentication.
	CtrlSecrets map[string]*auth.Secret
}

// NamespaceStats are the I/O figures of one namespace.
type NamespaceStats struct {
	NSID       uint32
	Size       int64
	BlockSize  int
	ReadOps    uint64
	ReadBytes  uint64
	WriteOps   uint64
	WriteBytes uint64
	OtherOps   uint64 // flush, write zeroes, deallocate
	Errors     uint64
}

// HostStats describes one connected controller (association).
type HostStats struct {
	CNTLID     uint16
	HostNQN    string
	SubNQN     string
	RemoteAddr string
	IOQueues   int
}

// SubsystemStats groups a subsystem's figures.
type SubsystemStats struct {
	NQN        string
	Namespaces []NamespaceStats
}

// Stats is a snapshot of the target.
type Stats struct {
	Subsystems []SubsystemStats
	Hosts      []HostStats
	Transport  TransportStats
	Auth       AuthStats
}

// AuthStats count in-band authentication outcomes over the target's life.
type AuthStats struct {
	Succeeded uint64 // queues that authenticated
	Failed    uint64 // transactions that failed (wrong secret, bad message...)
	Refused   uint64 // Connects refused for want of a secret, and commands refused as Authentication Required
}

// TransportStats counts the target's socket system calls over all
// connections, past and present: divided by the commands served they say
// how well PDUs are batched per read and per write.
type TransportStats struct {
	ReadCalls  uint64 // socket reads (each one read system call)
	WriteCalls uint64 // write/writev rounds (one system call each, more only for a short write)
}

type nsState struct {
	nsid  uint32
	ns    namespace.Namespace
	nguid [16]byte
	uuid  [16]byte

	readOps, readBytes, writeOps, writeBytes, otherOps, errs atomic.Uint64
}

type subsystem struct {
	nqn, serial, model string
	allow              map[string]bool // empty = any host
	ns                 []*nsState      // index nsid-1
	hostSecrets        map[string]*auth.Secret
	ctrlSecrets        map[string]*auth.Secret
}

// allowed reports whether host may use s: with secrets configured only a
// host that has one; else any host (the empty Host NQN included) when s
// has no allow list, else only a listed one.
func (s *subsystem) allowed(host string) bool {
	if len(s.hostSecrets) > 0 {
		return s.hostSecrets[host] != nil
	}
	return len(s.allow) == 0 || s.allow[host]
}

func (s *subsystem) namespace(nsid uint32) *nsState {
	if nsid == 0 || int(nsid) > len(s.ns) {
		return nil
	}
	return s.ns[nsid-1]
}

// Target is an NVMe/TCP controller serving subsystems over TCP.
type Target struct {
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	bufs   bufPool

	mu         sync.Mutex // guards the fields below
	subsystems map[string]*subsystem
	ctrls      map[uint16]*controller
	nextCntlid uint16
	listeners  map[net.Listener]*listenerState
	conns      map[*conn]bool
	genctr     uint64
	closed     bool
	// downListeners are listeners that stopped for good before Close.
	downListeners []error
	// transport sums the TransportStats of connections that are gone.
	transport TransportStats

	authOK, authFailed, authRefused atomic.Uint64
}

// New returns a target with no subsystems; the discovery subsystem
// (nvme.DiscoveryNQN) always exists.
func New(cfg Config) (*Target, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	t := &Target{cfg: cfg, ctx: ctx, cancel: cancel, subsystems: map[string]*subsystem{},
		ctrls: map[uint16]*controller{}, nextCntlid: 1, listeners: map[net.Listener]*listenerState{}, conns: map[*conn]bool{}, genctr: 1}
	t.bufs.init(cfg.MaxTransfer)
	t.wg.Add(1)
	go t.keepAliveLoop()
	return t, nil
}

func validNQN(n string) bool {
	return len(n) > 0 && len(n) < 224 && (strings.HasPrefix(n, "nqn.") || strings.HasPrefix(n, "eui.") || strings.HasPrefix(n, "naa."))
}

// AddSubsystem exports s. Errors: InvalidParams (bad NQN, bad allowed host
// NQN, no namespace, namespace size not a multiple of its block size),
// ObjectAlreadyExists.
func (t *Target) AddSubsystem(s Subsystem) error {
	if !validNQN(s.NQN) || s.NQN == nvme.DiscoveryNQN {
		return kverr.New(kverr.InvalidParams, s.NQN, "invalid subsystem NQN")
	}
	if len(s.Namespaces) == 0 || len(s.Namespaces) > 1024 {
		return kverr.New(kverr.InvalidParams, s.NQN, "%d namespaces; want 1..1024", len(s.Namespaces))
	}
	if len(s.Serial) > 20 || len(s.Model) > 40 {
		return kverr.New(kverr.InvalidParams, s.NQN, "serial (max 20) or model (max 40) too long")
	}
	sub := &subsystem{nqn: s.NQN, serial: s.Serial, model: s.Model, allow: map[string]bool{}}
	for _, h := range s.AllowHosts {
		if !validNQN(h) {
			return kverr.New(kverr.InvalidParams, s.NQN, "allowed host %q is not a valid NQN", h)
		}
		sub.allow[h] = true
	}
	for h, sec := range s.HostSecrets {
		if !validNQN(h) || sec == nil || len(sec.Key) == 0 {
			return kverr.New(kverr.InvalidParams, s.NQN, "host secret for %q: not a valid NQN or an empty secret", h)
		}
	}
	for h, sec := range s.CtrlSecrets {
		if s.HostSecrets[h] == nil || sec == nil || len(sec.Key) == 0 {
			return kverr.New(kverr.InvalidParams, s.NQN, "controller secret for %q: that host has no host secret, or the secret is empty", h)
		}
	}
	if len(s.HostSecrets) > 0 {
		sub.hostSecrets, sub.ctrlSecrets = maps.Clone(s.HostSecrets), maps.Clone(s.CtrlSecrets)
	}
	for i, ns := range s.Namespaces {
		if ns == nil || ns.BlockSize() < 512 || ns.Size() < int64(ns.BlockSize()) || ns.Size()%int64(ns.BlockSize()) != 0 {
			return kverr.New(kverr.InvalidParams, s.NQN, "namespace %d has a bad size or block size", i+1)
		}
		st := &nsState{nsid: uint32(i + 1), ns: ns}
		h := sha256.Sum256(fmt.Appendf(nil, "kvtier-nsid\x00%s\x00%d", s.NQN, i+1))
		copy(st.nguid[:], h[:16])
		copy(st.uuid[:], h[16:32])
		st.uuid[6] = st.uuid[6]&0x0F | 0x40 // RFC 4122 version 4 layout
		st.uuid[8] = st.uuid[8]&0x3F | 0x80
		sub.ns = append(sub.ns, st)
	}
	if sub.serial == "" {
		h := sha256.Sum256([]byte(s.NQN))
		sub.serial = fmt.Sprintf("%x", h[:8])[:16]
	}
	if sub.model == "" {
		sub.model = "kvtier NVMe/TCP"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return kverr.New(kverr.UnavailableInCurrentStatus, s.NQN, "target closed")
	}
	if _, ok := t.subsystems[s.NQN]; ok {
		return kverr.New(kverr.ObjectAlreadyExists, s.NQN, "subsystem exists")
	}
	t.subsystems[s.NQN] = sub
	t.genctr++
	return nil
}

// RemoveSubsystem stops exporting nqn and disconnects its controllers.
func (t *Target) RemoveSubsystem(nqn string) error {
	t.mu.Lock()
	if _, ok := t.subsystems[nqn]; !ok {
		t.mu.Unlock()
		return kverr.New(kverr.ObjectNotFound, nqn, "no such subsystem")
	}
	delete(t.subsystems, nqn)
	t.genctr++
	var victims []*controller
	for _, c := range t.ctrls {
		if c.sub != nil && c.sub.nqn == nqn {
			victims = append(victims, c)
		}
	}
	t.mu.Unlock()
	for _, c := range victims {
		t.destroyController(c, "subsystem removed")
	}
	return nil
}

// Listen listens on addr (host:port) and serves it in the background until
// Close. It returns the bound address.
func (t *Target) Listen(addr string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, kverr.New(kverr.InvalidParams, addr, "listen: %v", err)
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		if err := t.Serve(t.ctx, ln); err != nil && !errors.Is(err, net.ErrClosed) {
			t.cfg.Logger.Warn("nvme-tcp listener stopped", "addr", addr, "err", err)
		}
	}()
	return ln.Addr(), nil
}

// listenerState is what Health reports about one listener.
type listenerState struct {
	addr     string
	retrying error // the temporary Accept error being retried, nil when accepting
}

// Serve accepts connections on ln until ctx is done, the target is closed or
// ln fails for good. A temporary Accept error (out of file descriptors,
// connection aborted before accept, ...) is retried after a pause that
// doubles from 5 ms up to Config.AcceptBackoffMax, as net/http does, and is
// reported by Health meanwhile. A listener that fails for good is reported
// by Health until the target closes. It closes ln before returning.
func (t *Target) Serve(ctx context.Context, ln net.Listener) (err error) {
	st := &listenerState{addr: ln.Addr().String()}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	t.listeners[ln] = st
	t.genctr++
	t.mu.Unlock()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer func() {
		ln.Close()
		t.mu.Lock()
		delete(t.listeners, ln)
		t.genctr++
		if err != nil && !t.closed {
			t.downListeners = append(t.downListeners, fmt.Errorf("nvme-tcp listener %s stopped: %w", st.addr, err))
		}
		t.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if !temporaryAcceptError(err) {
				return err
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), t.cfg.AcceptBackoffMax)
			t.mu.Lock()
			first := st.retrying == nil
			st.retrying = err
			t.mu.Unlock()
			if first {
				t.cfg.Logger.Warn("nvme-tcp accept failing; retrying", "addr", st.addr, "err", err)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			continue
		}
		if backoff != 0 {
			backoff = 0
			t.mu.Lock()
			st.retrying = nil
			t.mu.Unlock()
			t.cfg.Logger.Info("nvme-tcp accepting again", "addr", st.addr)
		}
		c := t.newConn(nc)
		if c == nil {
			continue
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			c.serve()
		}()
	}
}

// temporaryAcceptError reports whether Accept may succeed if retried:
// errors that say so (net.Error.Temporary, deprecated for other uses but
// still what net/http's accept loop relies on) and the resource
// exhaustion errnos, which Go classifies as temporary too.
func temporaryAcceptError(err error) bool {
	var te interface{ Temporary() bool }
	if errors.As(err, &te) && te.Temporary() {
		return true
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Health returns nil while every listener accepts connections, else an
// error naming each listener that is retrying a temporary Accept error or
// stopped for good (an appliance reports itself unhealthy with it).
func (t *Target) Health() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	errs := slices.Clone(t.downListeners)
	for _, st := range t.listeners {
		if st.retrying != nil {
			errs = append(errs, fmt.Errorf("nvme-tcp listener %s cannot accept: %w", st.addr, st.retrying))
		}
	}
	return errors.Join(errs...)
}

// Close stops all listeners, disconnects every host and waits for the
// connection goroutines to finish.
func (t *Target) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	lns := make([]net.Listener, 0, len(t.listeners))
	for ln := range t.listeners {
		lns = append(lns, ln)
	}
	conns := make([]*conn, 0, len(t.conns))
	for c := range t.conns {
		conns = append(conns, c)
	}
	t.mu.Unlock()
	t.cancel()
	for _, ln := range lns {
		ln.Close()
	}
	for _, c := range conns {
		c.close()
	}
	t.wg.Wait()
	return nil
}

// Stats returns per-namespace I/O figures and the connected hosts.
func (t *Target) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	var st Stats
	for _, s := range t.subsystems {
		ss := SubsystemStats{NQN: s.nqn}
		for _, n := range s.ns {
			ss.Namespaces = append(ss.Namespaces, NamespaceStats{NSID: n.nsid, Size: n.ns.Size(), BlockSize: n.ns.BlockSize(),
				ReadOps: n.readOps.Load(), ReadBytes: n.readBytes.Load(), WriteOps: n.writeOps.Load(), WriteBytes: n.writeBytes.Load(),
				OtherOps: n.otherOps.Load(), Errors: n.errs.Load()})
		}
		st.Subsystems = append(st.Subsystems, ss)
	}
	for _, c := range t.ctrls {
		st.Hosts = append(st.Hosts, c.hostStats())
	}
	st.Transport = t.transport
	st.Auth = AuthStats{Succeeded: t.authOK.Load(), Failed: t.authFailed.Load(), Refused: t.authRefused.Load()}
	for c := range t.conns {
		st.Transport.ReadCalls += c.dr.reads.Load()
		st.Transport.WriteCalls += c.w.Rounds()
	}
	sort.Slice(st.Subsystems, func(i, j int) bool { return st.Subsystems[i].NQN < st.Subsystems[j].NQN })
	sort.Slice(st.Hosts, func(i, j int) bool { return st.Hosts[i].CNTLID < st.Hosts[j].CNTLID })
	return st
}

// keepAliveLoop tears down controllers whose keep-alive timer expired.
func (t *Target) keepAliveLoop() {
	defer t.wg.Done()
	tick := time.NewTicker(t.cfg.KeepAliveCheck)
	defer tick.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
		now := t.cfg.Clock.Now()
		t.mu.Lock()
		var expired []*controller
		for _, c := range t.ctrls {
			if c.keepAliveExpired(now) {
				expired = append(expired, c)
			}
		}
		t.mu.Unlock()
		for _, c := range expired {
			t.cfg.Logger.Info("nvme-tcp keep-alive timeout", "cntlid", c.cntlid, "host", c.hostNQN)
			t.destroyController(c, "keep-alive timeout")
		}
	}
}

// destroyController closes every queue of c and forgets it.
func (t *Target) destroyController(c *controller, why string) {
	t.mu.Lock()
	if t.ctrls[c.cntlid] == c {
		delete(t.ctrls, c.cntlid)
	}
	t.mu.Unlock()
	for _, q := range c.queues() {
		q.close()
	}
	_ = why
}

// allocCntlid picks a free controller ID in 1..0xFFEF; caller holds t.mu.
func (t *Target) allocCntlidLocked() (uint16, bool) {
	for i := 0; i < 0xFFEF; i++ {
		id := t.nextCntlid
		t.nextCntlid++
		if t.nextCntlid > 0xFFEF {
			t.nextCntlid = 1
		}
		if _, used := t.ctrls[id]; !used {
			return id, true
		}
	}
	return 0, false
}
