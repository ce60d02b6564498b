package appliance

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/dram"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/ssd"
)

// Config configures an appliance. Zero values mean defaults.
type Config struct {
	Name        string      // node identity (client id), stable across restarts; "": DefaultName(SSDDir, DataAddr)
	MasterAddr  string      // master gRPC address; required
	Token       string      // credential sent to the master (client.Config.Token)
	MasterTLS   *tls.Config // reach the master over TLS (client.Config.TLS); nil: plain
	DRAM        uint64      // bytes of DRAM to serve; default 256 MiB
	SegmentSize uint64      // default: DRAM (one segment)
	Hugepages   dram.HugepageMode
	DataAddr    string // transfer-engine listener; default 127.0.0.1:0

	SSDDir        string // empty: no SSD tier
	SSDCapacity   uint64 // default 4 GiB
	SSDPolicy     ssd.Policy
	SSDBucketSize uint64 // default from package ssd

	HeartbeatInterval time.Duration // default 1s
	OffloadWorkers    int           // default 2
	OffloadQueue      int           // default 256 tasks
	DrainGrace        time.Duration // reads served this long after SIGTERM before unmount

	NVMe NVMeConfig // built-in NVMe/TCP target (off unless NVMe.Addr is set)

	// NoDramDirectory: keep no DRAM directory (dramdir.go). A master
	// restart or failover then loses the objects only in this box's DRAM;
	// for benchmark baselines.
	NoDramDirectory bool
	// NoGrantRevocation: the DRAM directory's free records do not revoke
	// the freed replicas' data-plane grants (grant.Revocations), which
	// then work until their expiry; for benchmark baselines.
	NoGrantRevocation bool

	// PutMaster is the master a standalone's box places direct puts with
	// in-process (its master's kvtierpb.MasterServer); nil: through the
	// box's client connection (directput.go). NoDirectPut: the data port
	// takes no direct puts (clients use the three-trip path).
	PutMaster   PutMaster
	NoDirectPut bool
	// DramRecords opens the DRAM directory's records stream
	// (TakeDramRecords) to a master in this process, without a socket
	// (a standalone); nil: over the box's client connection.
	DramRecords func(context.Context) (DramRecordsStream, error)

	Transfer transfer.Config
	Logger   *slog.Logger
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.MasterAddr == "" {
		return kverr.New(kverr.InvalidParams, "", "appliance: --master is required")
	}
	if c.SegmentSize > 0 && c.DRAM > 0 && c.SegmentSize > c.DRAM {
		return kverr.New(kverr.InvalidParams, "", "appliance: segment size %d exceeds DRAM %d", c.SegmentSize, c.DRAM)
	}
	if c.OffloadWorkers < 0 || c.OffloadQueue < 0 || c.DrainGrace < 0 {
		return kverr.New(kverr.InvalidParams, "", "appliance: negative worker, queue or grace setting")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.DRAM == 0 {
		c.DRAM = 256 << 20
	}
	if c.SegmentSize == 0 {
		c.SegmentSize = c.DRAM
	}
	if c.DataAddr == "" {
		c.DataAddr = "127.0.0.1:0"
	}
	if c.SSDCapacity == 0 {
		c.SSDCapacity = 4 << 30
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.OffloadWorkers == 0 {
		c.OffloadWorkers = 2
	}
	if c.OffloadQueue == 0 {
		c.OffloadQueue = 256
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Appliance is one running storage box.
type Appliance struct {
	cfg    Config
	log    *slog.Logger
	region *dram.Region
	engine *transfer.Engine
	addr   net.Addr
	tier   *ssd.Tier // nil without SSD
	client *client.Client

	offload     chan *kvtierpb.OffloadTask
	slotFreed   chan struct{} // a worker took a task from offload (capacity 1)
	taking      atomic.Bool   // TakeOffload calls succeed: heartbeats offer no slots
	offloadBusy atomic.Int64
	// singleReports: the master has no BatchOffloadDone (an older one);
	// offloads are reported one OffloadDone each.
	singleReports atomic.Bool
	skipped       atomic.Uint64
	failed        atomic.Uint64
	failLogAt     atomic.Int64  // unix ns of the last "offload failed" log line
	failQuiet     atomic.Uint64 // failures not logged since (rate limit)

	nvme        *nvmeExport
	nvmeLive    atomic.Pointer[nvmeExport] // a.nvme once started whole (NVMeHealth reads it from the heartbeat loop)
	nofSegments []string
	spdkStats   atomic.Pointer[kvtierpb.NvmeStats] // SPDK mode: latest figures for the heartbeat

	settingsMu sync.Mutex
	settings   *kvtierpb.TierSettings // guarded by settingsMu: last applied

	// incarnation is random per Start; diskID identifies the SSD directory
	// (identity.go). Both go with every mount and heartbeat.
	incarnation, diskID string
	// removeMu orders removals recorded in the SSD tier (write lock)
	// against offload reports (read lock, held across the report): see
	// stillStored.
	removeMu sync.RWMutex

	reregistering atomic.Bool // a re-registration with a restarted master is running
	dir           *dramDir    // the objects in the DRAM segments (dramdir.go)
	dirSeen       dramSeen    // how far dir applied the master's records (direct puts wait on it)
	staged        staging     // staged direct puts' bytes until their commit records land them (staged.go)
	dramNames     []string    // the DRAM segments Start mounts (set before the data port takes puts; not changed after)
	rec           recState    // who applies those records, one at a time (dramdir.go)
	reportingDram atomic.Bool // a DRAM directory report is running
	// clientSet is closed once Start has assigned a.client: the first
	// heartbeat's reply arrives inside client.New, before that.
	clientSet  chan struct{}
	registered atomic.Bool // Start registered the SSD objects (before: beats' "unknown" is just the first contact)
	// life ends when the appliance is torn down (endLife, first thing):
	// work started from a heartbeat's reply, which can come before Start
	// makes the run context, stops waiting then.
	life    context.Context
	endLife context.CancelFunc

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// Start brings an appliance up and joins it to the cluster.
func Start(ctx context.Context, cfg Config) (_ *Appliance, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	a := &Appliance{cfg: cfg, log: cfg.Logger, incarnation: randomHex(8), dir: newDramDir(),
		offload: make(chan *kvtierpb.OffloadTask, cfg.OffloadQueue), slotFreed: make(chan struct{}, 1), clientSet: make(chan struct{})}
	a.life, a.endLife = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			a.unmountAll(ctx)
			a.teardown()
		}
	}()

	if !cfg.Transfer.DisableSharedMemory {
		// Shared (a memfd) so clients on this host map the segments and
		// move bytes by memcpy instead of loopback TCP.
		a.region, err = dram.MapShared(cfg.DRAM, cfg.Hugepages)
		if err != nil {
			a.log.Warn("dram: shared mapping failed; clients on this host will use TCP", "err", err)
		}
	}
	if a.region == nil {
		a.region, err = dram.Map(cfg.DRAM, cfg.Hugepages)
	}
	if err != nil {
		return nil, fmt.Errorf("appliance: map %d bytes of DRAM: %w", cfg.DRAM, err)
	}
	for _, w := range a.region.Warnings() {
		a.log.Warn("dram", "warning", w)
	}
	start := time.Now()
	// First touch runs at ~0.3 GB/s here: say why the box is not serving yet.
	a.log.Info("pre-faulting DRAM (the appliance mounts it when done)", "bytes", cfg.DRAM, "pages", a.region.Kind())
	if err := a.region.Prefault(ctx); err != nil {
		return nil, fmt.Errorf("appliance: pre-fault DRAM: %w", err)
	}
	a.log.Info("dram mapped", "bytes", cfg.DRAM, "pages", a.region.Kind(), "locked", a.region.Locked(), "prefault", time.Since(start).Round(time.Millisecond))

	tcfg := cfg.Transfer
	if tcfg.ClientTLS == nil {
		tcfg.ClientTLS = cfg.MasterTLS // other appliances' tls:// data ports
	}
	if tcfg.OnGrantRefused == nil {
		tcfg.OnGrantRefused = grantRefusalLogger(a.log)
	}
	a.engine, err = transfer.New(tcfg)
	if err != nil {
		return nil, err
	}
	// Whether segments are offered over RDMA, and why not (an operator
	// who named a device is told louder than one who left it on auto).
	if on, why := a.engine.RDMAStatus(); on || tcfg.RDMADevice == "" || tcfg.RDMADevice == "auto" || tcfg.RDMADevice == "off" {
		a.log.Info("rdma", "status", why, "routes", a.engine.Routes())
	} else {
		a.log.Warn("rdma device not usable: remote clients read over TCP", "device", tcfg.RDMADevice, "status", why)
	}
	if f := a.region.File(); f != nil {
		if err := a.engine.ShareMemory(a.region.Bytes(), f); err != nil {
			return nil, fmt.Errorf("appliance: share DRAM with local clients: %w", err)
		}
	}
	a.addr, err = a.engine.Listen(cfg.DataAddr)
	if err != nil {
		return nil, fmt.Errorf("appliance: listen %s: %w", cfg.DataAddr, err)
	}

	if cfg.SSDDir != "" {
		if a.diskID, err = DiskID(cfg.SSDDir); err != nil {
			return nil, err
		}
	}
	if a.cfg.Name == "" {
		if a.cfg.Name, err = DefaultName(cfg.SSDDir, a.addr.String()); err != nil {
			return nil, err
		}
		cfg.Name = a.cfg.Name
	}
	a.log.Info("appliance identity", "name", cfg.Name, "incarnation", a.incarnation, "disk_id", a.diskID)
	if cfg.SSDDir != "" {
		a.tier, err = ssd.Open(ctx, ssd.Config{
			Dir: cfg.SSDDir, Capacity: cfg.SSDCapacity, Policy: cfg.SSDPolicy,
			BucketSize: cfg.SSDBucketSize, Notifier: notifier{a},
		})
		if err != nil {
			return nil, fmt.Errorf("appliance: SSD tier in %s: %w", cfg.SSDDir, err)
		}
		for _, q := range a.tier.Quarantined() {
			a.log.Warn("ssd bucket quarantined", "reason", q)
		}
		if err := a.engine.RegisterSource(a.diskSegment(), a.tier); err != nil {
			return nil, err
		}
	}

	a.client, err = client.New(ctx, client.Config{
		MasterAddr: cfg.MasterAddr, ClientID: cfg.Name, Engine: a.engine, Token: cfg.Token, TLS: cfg.MasterTLS,
		HeartbeatInterval: cfg.HeartbeatInterval, Logger: cfg.Logger,
		OnHeartbeat: a.fillHeartbeat, OnHeartbeatReply: a.heartbeatReply,
		Incarnation: a.incarnation, DiskID: a.diskID,
	})
	close(a.clientSet) // a.client is set (nil when New failed)
	if err != nil {
		return nil, err
	}
	a.client.SetEndpoint(a.endpoint())
	dramMem := dram.Split(a.region.Bytes(), cfg.SegmentSize)
	for i := range dramMem {
		a.dramNames = append(a.dramNames, fmt.Sprintf("%s/mem%d", cfg.Name, i))
	}
	if !cfg.NoDirectPut {
		// Before the mounts: they announce that the data port takes
		// direct puts (Segment.direct_put).
		pm := cfg.PutMaster
		if pm == nil { // a master in another process: coalesce its calls
			pm = newCoalescer(masterPuts{a.client.Master()})
		}
		a.engine.SetPutHandler(cfg.Name, &putHandler{a: a, pm: pm, inproc: cfg.PutMaster != nil})
	}
	for i, mem := range dramMem {
		if err := a.mountSegment(ctx, a.dramNames[i], mem); err != nil {
			return nil, err
		}
	}
	if err := a.startNVMe(ctx, cfg.NVMe); err != nil {
		return nil, err
	}
	if a.tier != nil {
		if err := a.registerDisk(ctx); err != nil {
			return nil, err
		}
		a.registered.Store(true)
	}

	runCtx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.wg.Go(func() { a.runOffload(runCtx, cfg.OffloadWorkers) })
	if a.tier != nil {
		a.wg.Go(func() { a.tier.Run(runCtx) })
	}
	if cfg.NVMe.Backend == BackendSPDK && a.nvme != nil {
		a.refreshSPDKStats(ctx)
		a.wg.Go(func() { a.pollSPDKStats(runCtx) })
	}
	if !cfg.NoDramDirectory {
		a.wg.Go(func() { a.takeDramRecords(runCtx) })
	}
	a.client.Heartbeat(ctx) // report SSD figures and take offload slots now
	if a.tier != nil {
		a.wg.Go(func() { a.takeOffload(runCtx) })
		a.wg.Go(func() { a.takeRemovals(runCtx) })
	}
	return a, nil
}

// DataAddr is the transfer-engine address the appliance serves on.
func (a *Appliance) DataAddr() net.Addr { return a.addr }

// endpoint is the data endpoint handed to the master, and by it to clients:
// "tls://host:port" when Transfer.ServerTLS makes the data port speak TLS
// (transfer.TLSScheme), else host:port.
func (a *Appliance) endpoint() string {
	return transfer.TLSEndpoint(a.addr.String(), a.engine.Secure())
}

// SharedAddr is the socket through which clients on this host map the DRAM
// segments ("" when they are not shared).
func (a *Appliance) SharedAddr() string { return a.engine.SharedAddr() }

// Name is the appliance's node identity.
func (a *Appliance) Name() string { return a.cfg.Name }

// Client is the appliance's own connection to the cluster.
func (a *Appliance) Client() *client.Client { return a.client }

// Tier is the SSD tier (nil without one).
func (a *Appliance) Tier() *ssd.Tier { return a.tier }

// Region is the DRAM region the segments live in.
func (a *Appliance) Region() *dram.Region { return a.region }

// Segments lists the names of the DRAM segments this appliance serves.
func (a *Appliance) Segments() []string {
	if a.engine == nil {
		return nil
	}
	return a.engine.Segments()
}

// segment is the memory of DRAM segment name, from the transfer engine's
// registry (the one record of what this box serves).
func (a *Appliance) segment(name string) ([]byte, bool) { return a.engine.Segment(name) }

func (a *Appliance) diskSegment() string { return a.cfg.Name + "/ssd" }

// registerDisk re-announces every object recovered from SSD, in chunks;
// the last call (Last, sent even when there is nothing to register) tells
// the master the registration is over, so it drops the copies of this
// appliance it still holds unconfirmed (master/diskindex.go, "Restarts").
//
// Each chunk is checked and sent with removeMu read-locked, as offload
// reports are (see stillStored): a removal recorded while a
// re-registration runs (TakeRemovals runs beside the one a heartbeat
// starts) either came first, and the copy is left out, or is recorded
// after the master saw the chunk, so it was still pending there and the
// master refused the copy. A copy the master refuses as unknown (its
// object was removed, or the master never acknowledged it: an offload
// written after the master forgot the task) or as stale (the key holds an
// object of another size) is removed, if still at the refused place: kept,
// the master would never name it in a removal, and a later registration
// (after a master restart) would bring it back.
func (a *Appliance) registerDisk(ctx context.Context) error {
	objs := a.tier.Objects()
	const chunk = 1024
	registered, dropped := 0, 0
	for first := true; first || len(objs) > 0; first = false {
		n := min(chunk, len(objs))
		req := &kvtierpb.RegisterDiskObjectsRequest{ClientId: a.cfg.Name, Last: n == len(objs)}
		a.removeMu.RLock()
		for _, e := range objs[:n] {
			if cur, ok := a.tier.Lookup(e.Tenant, e.Key); !ok || cur.Loc != e.Loc {
				continue // removed (or replaced) since the listing
			}
			req.Objects = append(req.Objects, &kvtierpb.DiskObject{
				Tenant: e.Tenant, Key: []byte(e.Key), Size: e.Size, Crc32C: e.CRC32C,
				Bucket: e.Loc.Bucket, Offset: e.Loc.Offset, Length: e.Loc.Length})
		}
		resp, err := a.client.Master().RegisterDiskObjects(ctx, req)
		a.removeMu.RUnlock()
		if err != nil {
			return fmt.Errorf("appliance: re-register SSD objects: %w", kverr.FromGRPC(err))
		}
		var stale []*kvtierpb.DiskObject
		for i, r := range resp.Results {
			if i >= len(req.Objects) {
				break
			}
			if r.Code == kvtierpb.ErrorCode_OK {
				registered++
				continue
			}
			a.log.Warn("ssd object not re-registered", "key", string(req.Objects[i].Key), "code", r.Code, "msg", r.Message)
			if r.Code == kvtierpb.ErrorCode_OBJECT_ALREADY_EXISTS || r.Code == kvtierpb.ErrorCode_OBJECT_NOT_FOUND {
				stale = append(stale, req.Objects[i])
			}
		}
		dropped += a.dropStale(ctx, stale)
		objs = objs[n:]
	}
	a.log.Info("ssd index loaded", "objects_registered", registered, "stale_removed", dropped)
	return nil
}

// dropStale removes the copies in ds the master refused, each
// only if it is still the key's copy at the refused place (removeMu held:
// an offload stores a key anew only through a removal, see putReplacing).
func (a *Appliance) dropStale(ctx context.Context, ds []*kvtierpb.DiskObject) int {
	if len(ds) == 0 {
		return 0
	}
	a.removeMu.Lock()
	defer a.removeMu.Unlock()
	var rs []ssd.Removal
	for _, d := range ds {
		if e, ok := a.tier.Lookup(d.Tenant, string(d.Key)); ok && e.Loc == (ssd.Location{Bucket: d.Bucket, Offset: d.Offset, Length: d.Length}) {
			rs = append(rs, ssd.Removal{Tenant: d.Tenant, Key: string(d.Key)})
		}
	}
	if len(rs) == 0 {
		return 0
	}
	if _, err := a.tier.Remove(ctx, rs); err != nil {
		a.log.Warn("cannot remove stale SSD copies", "copies", len(rs), "err", err)
		return 0
	}
	return len(rs)
}

// Close drains and shuts the appliance down. Safe to call twice.
func (a *Appliance) Close(ctx context.Context) error {
	if !a.closed.CompareAndSwap(false, true) {
		return nil
	}
	if a.engine != nil {
		a.engine.SetPutHandler("", nil) // direct puts now go the classic way
	}
	var err error
	if a.client != nil {
		for _, name := range append(a.Segments(), a.nofSegments...) {
			if e := a.client.UnmountSegment(ctx, name, a.cfg.DrainGrace); e != nil && !kverr.Is(e, kverr.SegmentNotFound) {
				err = errors.Join(err, fmt.Errorf("unmount %s: %w", name, e))
			}
		}
		if a.cfg.DrainGrace > 0 {
			select {
			case <-time.After(a.cfg.DrainGrace):
			case <-ctx.Done():
			}
		}
		// Say goodbye before the SSD tier and the listener go: the master
		// stops handing out this box's replicas now, not after the silence.
		if e := a.client.Leave(ctx); e != nil {
			a.log.Warn("could not tell the master this appliance is leaving", "err", e)
		}
	}
	err = errors.Join(err, a.closeSPDK(ctx))
	return errors.Join(err, a.teardown())
}

// unmountAll takes back whatever a failed Start had mounted, so the master
// does not list segments of a box that never came up.
func (a *Appliance) unmountAll(ctx context.Context) {
	if a.client == nil {
		return
	}
	for _, name := range append(a.Segments(), a.nofSegments...) {
		_ = a.client.UnmountSegment(context.WithoutCancel(ctx), name, 0)
	}
}

func (a *Appliance) teardown() error {
	a.endLife()
	if a.cancel != nil {
		a.cancel()
	}
	a.wg.Wait()
	var err error
	if a.client != nil {
		err = errors.Join(err, a.client.Close())
	}
	if a.engine != nil {
		err = errors.Join(err, a.engine.Close())
	}
	if a.tier != nil {
		err = errors.Join(err, a.tier.Close())
	}
	err = errors.Join(err, a.nvme.close())
	if a.region != nil {
		err = errors.Join(err, a.region.Close())
	}
	return err
}

// heartbeatReply notices a master that no longer knows this node (it
// restarted, or declared the node gone): the heartbeat already re-announced
// the segments, and the SSD objects are registered again so a master restart
// does not silently empty the cache.
func (a *Appliance) heartbeatReply(resp *kvtierpb.HeartbeatResponse) {
	if !resp.Known && !a.cfg.NoDramDirectory && a.reportingDram.CompareAndSwap(false, true) {
		// The master waits for this report before it allocates in the
		// segments the beat re-announced (dramdir.go).
		forget, outbox := resp.ForgetDram, resp.GetDramOutbox()
		a.wg.Go(func() {
			defer a.reportingDram.Store(false)
			ctx, cancel := context.WithTimeout(a.life, time.Minute)
			defer cancel()
			select {
			case <-a.clientSet:
			case <-ctx.Done():
				return
			}
			if a.client == nil {
				return // Start failed
			}
			if err := a.reportDram(ctx, forget, outbox); err != nil {
				a.log.Warn("DRAM directory report failed; retrying on the next beat", "err", err)
			}
		})
	}
	if !resp.Known && a.tier != nil && a.registered.Load() && a.reregistering.CompareAndSwap(false, true) {
		a.log.Warn("master does not know this appliance (restarted?): re-registering SSD objects")
		a.wg.Go(func() {
			defer a.reregistering.Store(false)
			ctx, cancel := context.WithTimeout(a.life, time.Minute)
			defer cancel()
			if err := a.registerDisk(ctx); err != nil {
				a.log.Warn("re-registration failed; retrying on the next beat", "err", err)
			}
		})
	}
	a.onHeartbeatReply(resp)
}

// notifier lets the SSD tier ask the master before deleting a bucket.
type notifier struct{ a *Appliance }

func (n notifier) DropBucket(ctx context.Context, bucket uint64) error {
	if n.a.client == nil {
		return kverr.New(kverr.RPCFail, "", "not joined to a master yet")
	}
	_, err := n.a.client.Master().DropBucket(ctx, &kvtierpb.DropBucketRequest{ClientId: n.a.cfg.Name, Bucket: bucket})
	return kverr.FromGRPC(err)
}

// grantRefusalLogger logs data-port requests refused for their grant, at
// most one line a second (a flood is counted, not logged line by line: the
// totals travel in heartbeats to kvtier_grant_refusals_total and the
// master's events).
func grantRefusalLogger(log *slog.Logger) func(reason, detail string) {
	var last atomic.Int64
	var skipped atomic.Uint64
	return func(reason, detail string) {
		now := time.Now().UnixNano()
		if l := last.Load(); now-l < int64(time.Second) || !last.CompareAndSwap(l, now) {
			skipped.Add(1)
			return
		}
		log.Warn("data port refused a request for its grant", "reason", reason, "detail", detail, "not_logged_since", skipped.Swap(0))
	}
}
