package appliance

// SPDK backend (--nvme-backend spdk): instead of serving namespaces with the
// built-in target, the appliance makes an operator's SPDK application
// (nvmf_tgt or spdk_tgt) export them, through SPDK's JSON-RPC socket and the
// idempotent plan Manager of package nof/spdk, and mounts each exported
// namespace on the master as a NOF segment "<appliance>/spdk<nsid>".
//
// The appliance keeps no SPDK connection open: Start dials, applies the plan
// and hangs up; SPDKIOStat, SPDKTeardown and the liveness watch dial again.
// The watch (pollSPDKStats) unmounts the NOF segments while SPDK does not
// answer and re-applies the plan and remounts them when it does again (a
// restarted spdk_tgt has forgotten the export). SPDK's state belongs
// to the operator: Close unmounts the NOF segments on the master and leaves
// SPDK exporting, unless SPDKConfig.Teardown asks for the plan's objects to
// be removed.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/spdk"
)

// NVMe backends (NVMeConfig.Backend).
const (
	BackendBuiltin = "builtin" // the built-in NVMe/TCP target (also "")
	BackendSPDK    = "spdk"    // an operator's SPDK target, driven over JSON-RPC
)

// SPDKConfig describes what the appliance makes SPDK export when
// NVMeConfig.Backend is "spdk". The exported block devices are, in this
// order: the NVMe controllers' namespaces, NVMeConfig.Namespaces as aio bdevs
// (named SPDKAioBdevName(appliance, i); files created at their size when
// missing, so SPDK must run on this host to use them), the malloc disks and
// the lvols; a bdev that carries the lvol store is not exported itself.
// NVMeConfig.Addr is SPDK's TCP listener and also the address the master
// hands GPU nodes, so it must be a concrete host and port. NVMeConfig.
// AllowHosts become the subsystem's allowed hosts (empty: any host). The
// subsystem NQN is SubsystemNQN(appliance name).
type SPDKConfig struct {
	Socket      string                // SPDK's JSON-RPC Unix socket; "" = /var/tmp/spdk.sock
	Controllers []spdk.ControllerSpec // NVMe controllers to attach: PCIe BDF or NVMe/TCP
	Mallocs     []spdk.MallocSpec     // RAM disks (demos, tests)
	Lvstore     *spdk.LvstoreSpec     // optional lvol store on one of the bdevs above
	Lvols       []spdk.LvolSpec       // lvols carved from Lvstore
	// Teardown makes Close remove what the plan describes (subsystem, lvols,
	// lvol store, bdevs, controllers). Default false: operators own SPDK.
	Teardown    bool
	CallTimeout time.Duration // per RPC without a ctx deadline; 0 = 60 s
	// KeyDir holds the DH-HMAC-CHAP secrets of NVMeConfig.HostSecrets and
	// CtrlSecrets as files SPDK's keyring_file module reads (mode 0600, in
	// a 0700 directory; SPDK must run on this host as the appliance's
	// user). "" = <os.TempDir>/kvtier-spdk-keys/<appliance name>. The files
	// are rewritten at every (re)apply and left in place on Close (SPDK
	// keeps using them) unless Teardown.
	KeyDir string
	// WatchInterval is how often SPDK's liveness is probed (and its
	// figures refreshed); 0 = 1 s. Two failed probes in a row unmount the
	// NOF segments until SPDK answers again (see pollSPDKStats).
	WatchInterval time.Duration
}

var bdevUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// SPDKAioBdevName is the name of the aio bdev the SPDK backend creates for
// NVMeConfig.Namespaces[i] of the appliance called name (use it as an lvol
// store's BaseBdev): "<name, sanitised, ≤40 chars>-ns<i+1>".
func SPDKAioBdevName(name string, i int) string {
	safe := bdevUnsafe.ReplaceAllString(name, "-")
	if len(safe) > 40 {
		safe = safe[:40]
	}
	return fmt.Sprintf("%s-ns%d", safe, i+1)
}

// spdkPlan turns the appliance's NVMe config into a Manager plan. It is a
// pure function of (name, cfg), so Start and SPDKTeardown agree on the plan
// without the appliance keeping it. Errors are kverr.InvalidParams.
func spdkPlan(name string, cfg NVMeConfig) (spdk.Plan, string, error) {
	bad := func(format string, args ...any) error {
		return kverr.New(kverr.InvalidParams, "", "--nvme-backend spdk: "+format, args...)
	}
	if cfg.Addr == "" {
		return spdk.Plan{}, "", bad("--nvme-addr HOST:PORT is required (SPDK's NVMe/TCP listener)")
	}
	host, port, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return spdk.Plan{}, "", bad("--nvme-addr %q: %v", cfg.Addr, err)
	}
	ip := net.ParseIP(host)
	if host == "" || (ip != nil && ip.IsUnspecified()) || port == "0" {
		return spdk.Plan{}, "", bad("--nvme-addr %q: SPDK needs the concrete host and port GPU nodes connect to (no wildcard host, no port 0)", cfg.Addr)
	}
	adrfam := "IPv4"
	if ip != nil && ip.To4() == nil {
		adrfam = "IPv6"
	}
	serial := "KVT" + bdevUnsafe.ReplaceAllString(name, "-")
	if len(serial) > 20 {
		serial = serial[:20]
	}
	p := spdk.Plan{
		Controllers: cfg.SPDK.Controllers,
		Mallocs:     cfg.SPDK.Mallocs,
		Lvstore:     cfg.SPDK.Lvstore,
		Lvols:       cfg.SPDK.Lvols,
		Subsystem: spdk.SubsystemSpec{
			NQN: SubsystemNQN(name), Serial: serial, Model: "kvtier appliance", Hosts: cfg.AllowHosts,
			Listen: spdk.ListenAddress{Trtype: "TCP", Adrfam: adrfam, Traddr: host, Trsvcid: port},
		},
	}
	keys, err := spdkKeyFiles(name, cfg)
	if err != nil {
		return spdk.Plan{}, "", err
	}
	if len(keys) > 0 {
		// With secrets, exactly the hosts that have one are allowed, as with
		// the built-in target (a host listed without a secret is refused).
		p.Subsystem.Hosts = nil
		p.Subsystem.HostKeys = map[string]spdk.HostKeys{}
		for _, k := range keys {
			p.Keys = append(p.Keys, spdk.KeySpec{Name: k.name, Path: k.path})
			hk := p.Subsystem.HostKeys[k.host]
			if k.ctrl {
				hk.CtrlrKey = k.name
			} else {
				hk.Key = k.name
			}
			p.Subsystem.HostKeys[k.host] = hk
		}
	}
	for i, n := range cfg.Namespaces {
		abs, err := filepath.Abs(n.Path)
		if err != nil {
			return spdk.Plan{}, "", bad("--nvme-namespace %q: %v", n.Path, err)
		}
		if n.Size%4096 != 0 {
			return spdk.Plan{}, "", bad("--nvme-namespace %q: size %d is not a multiple of 4096", n.Path, n.Size)
		}
		p.AioFiles = append(p.AioFiles, spdk.AioSpec{Name: SPDKAioBdevName(name, i), Filename: abs, BlockSize: 4096})
	}
	if cfg.SPDK.WatchInterval < 0 {
		return spdk.Plan{}, "", bad("negative SPDK watch interval %v", cfg.SPDK.WatchInterval)
	}
	if err := (spdk.Config{Socket: cfg.SPDK.Socket}).Validate(); err != nil {
		return spdk.Plan{}, "", err
	}
	if err := p.Validate(); err != nil {
		return spdk.Plan{}, "", err
	}
	return p, net.JoinHostPort(host, port), nil
}

// spdkKey is one DH-HMAC-CHAP secret handed to SPDK's keyring as a file.
type spdkKey struct {
	host   string
	ctrl   bool // the controller's secret for host, else the host's
	name   string
	path   string
	secret string // DHHC-1 form
}

// spdkKeyFiles names the keyring keys and files of cfg's secrets, hosts in
// NQN order: "<name>-host<i>" and "<name>-ctrl<i>" (a pure function, like
// spdkPlan). A controller secret for a host without a host secret is
// refused, as SPDK refuses it.
func spdkKeyFiles(name string, cfg NVMeConfig) ([]spdkKey, error) {
	if len(cfg.HostSecrets) == 0 && len(cfg.CtrlSecrets) == 0 {
		return nil, nil
	}
	dir := cfg.SPDK.KeyDir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "kvtier-spdk-keys", bdevUnsafe.ReplaceAllString(name, "-"))
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, kverr.New(kverr.InvalidParams, "", "--spdk-key-dir: %v", err)
	}
	hosts := slices.Sorted(maps.Keys(cfg.HostSecrets))
	for h := range cfg.CtrlSecrets {
		if cfg.HostSecrets[h] == nil {
			return nil, kverr.New(kverr.InvalidParams, "", "--nvme-ctrl-key for %s needs an --nvme-host-key for it too", h)
		}
	}
	prefix := SPDKAioBdevName(name, 0)
	prefix = prefix[:len(prefix)-len("-ns1")]
	var out []spdkKey
	for i, h := range hosts {
		n := fmt.Sprintf("%s-host%d", prefix, i+1)
		out = append(out, spdkKey{host: h, name: n, path: filepath.Join(dir, n+".key"), secret: cfg.HostSecrets[h].String()})
		if c := cfg.CtrlSecrets[h]; c != nil {
			n := fmt.Sprintf("%s-ctrl%d", prefix, i+1)
			out = append(out, spdkKey{host: h, ctrl: true, name: n, path: filepath.Join(dir, n+".key"), secret: c.String()})
		}
	}
	return out, nil
}

// writeSPDKKeys writes the secrets' files for SPDK's keyring (0600 in a
// 0700 directory, replaced atomically so SPDK never reads half a secret).
func writeSPDKKeys(keys []spdkKey) error {
	for _, k := range keys {
		dir := filepath.Dir(k.path)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("appliance: SPDK key directory: %w", err)
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("appliance: SPDK key directory: %w", err)
		}
		tmp, err := os.CreateTemp(dir, ".key-*")
		if err != nil {
			return fmt.Errorf("appliance: SPDK key file: %w", err)
		}
		_, werr := tmp.WriteString(k.secret)
		if cerr := tmp.Close(); werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = os.Chmod(tmp.Name(), 0o600)
		}
		if werr == nil {
			werr = os.Rename(tmp.Name(), k.path)
		}
		if werr != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("appliance: SPDK key file %s: %w", k.path, werr)
		}
	}
	return nil
}

func newSPDKClient(cfg SPDKConfig) (*spdk.Client, error) {
	return spdk.New(spdk.Config{Socket: cfg.Socket, CallTimeout: cfg.CallTimeout})
}

func spdkSocket(cfg SPDKConfig) string {
	if cfg.Socket == "" {
		return spdk.DefaultSocket
	}
	return cfg.Socket
}

// startSPDK applies the plan to SPDK and mounts every exported namespace as
// a NOF segment. On failure nothing of this appliance's NOF segments stays
// mounted; SPDK keeps whatever the Manager created (a re-run converges).
func (a *Appliance) startSPDK(ctx context.Context, cfg NVMeConfig) error {
	plan, targetAddr, err := spdkPlan(a.cfg.Name, cfg)
	if err != nil {
		return err
	}
	for _, n := range cfg.Namespaces {
		if err := ensureFile(n); err != nil {
			return err
		}
	}
	c, err := newSPDKClient(cfg.SPDK)
	if err != nil {
		return err
	}
	defer c.Close()
	sock := spdkSocket(cfg.SPDK)
	v, err := c.SpdkGetVersion(ctx)
	if err != nil {
		return fmt.Errorf("appliance: SPDK JSON-RPC socket %s (is nvmf_tgt/spdk_tgt running?): %w", sock, err)
	}
	a.log.Info("spdk connected", "socket", sock, "version", v.Version)
	mounted, err := a.applySPDKPlan(ctx)
	if err != nil {
		return err
	}
	a.nvme = &nvmeExport{addr: targetAddr, nqn: plan.Subsystem.NQN, watch: &spdkWatch{mounted: mounted}}
	a.nofSegments = append(a.nofSegments, mounted...)
	a.log.Info("nvme/tcp export via spdk", "addr", targetAddr, "nqn", plan.Subsystem.NQN, "namespaces", len(mounted))
	if a.log.Enabled(ctx, slog.LevelDebug) {
		a.logSPDKIOStat(ctx, c, plan.Subsystem.NQN)
	}
	return nil
}

// ensureFile creates a missing namespace file at its size (an existing file
// keeps its size and contents, as with the built-in target).
func ensureFile(n NVMeNamespace) error {
	if _, err := os.Stat(n.Path); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("appliance: NVMe namespace %s: %w", n.Path, err)
	}
	if n.Size == 0 {
		return kverr.New(kverr.InvalidParams, "", "--nvme-namespace %s: file missing and no size given (PATH:SIZE)", n.Path)
	}
	f, err := os.OpenFile(n.Path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("appliance: create NVMe namespace %s: %w", n.Path, err)
	}
	err = f.Truncate(n.Size)
	return errors.Join(err, f.Close())
}

// SPDKNamespaceIO is one exported namespace's I/O counters as SPDK reports
// them (bdev_get_iostat): cumulative since the bdev was created.
type SPDKNamespaceIO struct {
	Segment   string // "<appliance>/spdk<nsid>"
	NSID      uint32
	Bdev      string
	Size      uint64 // bytes
	BlockSize uint32
	spdk.BdevIOStat
	TickRate uint64 // latency ticks per second
}

// SPDKIOStat asks SPDK for the I/O figures of the namespaces this appliance
// exports (kverr.InvalidParams when not in SPDK mode). It dials the
// socket for the call; callers (REST, a periodic logger) may call it at any
// time after Start.
func (a *Appliance) SPDKIOStat(ctx context.Context) ([]SPDKNamespaceIO, error) {
	cfg := a.cfg.NVMe
	if cfg.Backend != BackendSPDK || a.nvme == nil {
		return nil, kverr.New(kverr.InvalidParams, "", "appliance %s does not export through SPDK", a.cfg.Name)
	}
	c, err := newSPDKClient(cfg.SPDK)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return a.spdkIOStat(ctx, c, a.nvme.nqn)
}

func (a *Appliance) spdkIOStat(ctx context.Context, c *spdk.Client, nqn string) ([]SPDKNamespaceIO, error) {
	nss, err := spdk.NewManager(c).Namespaces(ctx, nqn)
	if err != nil {
		return nil, fmt.Errorf("appliance: SPDK namespaces of %s: %w", nqn, err)
	}
	st, err := c.BdevGetIostat(ctx, spdk.BdevGetIostatParams{})
	if err != nil {
		return nil, fmt.Errorf("appliance: SPDK bdev_get_iostat: %w", err)
	}
	byName := make(map[string]spdk.BdevIOStat, len(st.Bdevs))
	for _, b := range st.Bdevs {
		byName[b.Name] = b
	}
	out := make([]SPDKNamespaceIO, 0, len(nss))
	for _, ns := range nss {
		io, ok := byName[ns.Bdev]
		if !ok {
			io.Name = ns.Bdev // not reported (yet): zero counters
		}
		out = append(out, SPDKNamespaceIO{Segment: fmt.Sprintf("%s/spdk%d", a.cfg.Name, ns.NSID),
			NSID: ns.NSID, Bdev: ns.Bdev, Size: ns.Size, BlockSize: ns.BlockSize, BdevIOStat: io, TickRate: st.TickRate})
	}
	return out, nil
}

// spdkStatsTimeout bounds one refresh of the SPDK figures shown by the
// master (REST /api/v1/nvme, web UI) and one liveness probe, so a stuck SPDK
// socket never delays a heartbeat (the heartbeat only reads the latest
// snapshot). spdkDownAfter probes in a row must fail before SPDK counts as
// gone, so one slow answer under load does not unmount anything.
const (
	spdkStatsTimeout = 2 * time.Second
	spdkDownAfter    = 2
)

// spdkWatch is what the SPDK backend knows of SPDK's liveness. The watch
// goroutine (pollSPDKStats) alone changes it; NVMeHealth reads it.
type spdkWatch struct {
	mu       sync.Mutex // guards the fields below
	down     error      // why SPDK counts as gone; nil while it answers
	since    time.Time  // when it went
	failures int        // probes failed in a row
	mounted  []string   // NOF segments mounted now
}

func (w *spdkWatch) health() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.down == nil {
		return nil
	}
	return fmt.Errorf("SPDK export unavailable since %s (NOF segments unmounted): %w", w.since.UTC().Format(time.RFC3339), w.down)
}

// pollSPDKStats watches SPDK until ctx ends: every SPDKConfig.WatchInterval
// it probes SPDK's JSON-RPC socket (spdk_get_version, then the export's
// subsystem and namespaces). After spdkDownAfter failed probes, or at once
// when SPDK answers without the export (it restarted between two probes),
// the NOF segments are unmounted on the master (grace 0: their
// replicas are no longer handed out, and the master publishes a segment
// event for each) and a warning is logged; when SPDK answers again (a
// restarted spdk_tgt has forgotten the export) the plan is applied again
// and the segments are remounted. While SPDK answers, the figures for the
// heartbeat are refreshed.
func (a *Appliance) pollSPDKStats(ctx context.Context) {
	t := time.NewTicker(a.cfg.NVMe.SPDK.watchInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.checkSPDK(ctx)
		}
	}
}

func (c SPDKConfig) watchInterval() time.Duration {
	if c.WatchInterval > 0 {
		return c.WatchInterval
	}
	return time.Second
}

// checkSPDK is one round of the watch.
func (a *Appliance) checkSPDK(ctx context.Context) {
	w := a.nvme.watch
	pctx, cancel := context.WithTimeout(ctx, spdkStatsTimeout)
	lost, err := a.probeSPDK(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	wasDown := w.down != nil
	if err != nil {
		w.failures++
	} else {
		w.failures = 0
	}
	failures := w.failures
	w.mu.Unlock()
	switch {
	case err != nil && !wasDown && failures >= spdkDownAfter:
		a.spdkGone(ctx, err)
	case err != nil:
		a.log.Debug("spdk probe failed", "err", err, "in_a_row", failures)
	case wasDown:
		a.spdkBack(ctx)
	case lost != nil:
		// SPDK restarted between two probes: it answers, but without
		// the export. What the NOF segments held is gone with it.
		a.spdkGone(ctx, lost)
		a.spdkBack(ctx)
	default:
		a.refreshSPDKStats(ctx)
	}
}

// probeSPDK dials SPDK's socket, asks for its version (err: SPDK does not
// answer) and checks that the export is still there (lost: SPDK answers
// but the subsystem or one of its namespaces is missing, as after a
// restart).
func (a *Appliance) probeSPDK(ctx context.Context) (lost, err error) {
	c, err := newSPDKClient(a.cfg.NVMe.SPDK)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.SpdkGetVersion(ctx); err != nil {
		return nil, err
	}
	w := a.nvme.watch
	w.mu.Lock()
	want := len(w.mounted)
	down := w.down != nil
	w.mu.Unlock()
	if down {
		return nil, nil // spdkBack re-applies the plan anyway
	}
	nss, err := spdk.NewManager(c).Namespaces(ctx, a.nvme.nqn)
	var rpcErr *spdk.RPCError
	if errors.As(err, &rpcErr) {
		return fmt.Errorf("SPDK answers but the export %s is gone (restarted?): %w", a.nvme.nqn, err), nil
	}
	if err != nil {
		return nil, err
	}
	if len(nss) != want {
		return fmt.Errorf("SPDK exports %d namespaces of %s, %d are mounted (restarted?)", len(nss), a.nvme.nqn, want), nil
	}
	return nil, nil
}

// spdkGone unmounts the NOF segments: nothing on them can be read or
// written while SPDK is gone, so the master must stop placing and handing
// out NOF replicas there.
func (a *Appliance) spdkGone(ctx context.Context, cause error) {
	w := a.nvme.watch
	w.mu.Lock()
	w.down, w.since = cause, time.Now()
	segs := w.mounted
	w.mounted = nil
	w.mu.Unlock()
	a.spdkStats.Store(nil)
	a.log.Warn("spdk export unavailable (SPDK not answering, or restarted without it): unmounting its NOF segments until it is back",
		"socket", spdkSocket(a.cfg.NVMe.SPDK), "segments", segs, "err", cause)
	for _, name := range segs {
		if err := a.client.UnmountSegment(ctx, name, 0); err != nil && !kverr.Is(err, kverr.SegmentNotFound) {
			// The segment is no longer announced by heartbeats either, so
			// the master drops it when this node's heartbeat shows it gone.
			a.log.Warn("unmount NOF segment while spdk is gone", "segment", name, "err", err)
		}
	}
}

// spdkBack applies the plan to an SPDK that answers again and remounts the
// NOF segments; on failure SPDK stays "gone" and the next round retries.
func (a *Appliance) spdkBack(ctx context.Context) {
	w := a.nvme.watch
	mounted, err := a.applySPDKPlan(ctx)
	if err != nil {
		w.mu.Lock()
		w.down = err
		w.mu.Unlock()
		a.log.Warn("spdk answers again but the export could not be restored; retrying", "err", err)
		return
	}
	if a.closed.Load() {
		// Close began while we mounted: take them back (Close may have
		// unmounted before our mount landed).
		for _, name := range mounted {
			_ = a.client.UnmountSegment(ctx, name, 0)
		}
		return
	}
	w.mu.Lock()
	w.down, w.failures, w.mounted = nil, 0, mounted
	w.mu.Unlock()
	a.log.Warn("spdk is back: export re-applied and NOF segments remounted", "segments", mounted)
	a.refreshSPDKStats(ctx)
}

// applySPDKPlan applies the export plan through a new connection and mounts
// every exported namespace; on a mount failure it unmounts what it mounted.
func (a *Appliance) applySPDKPlan(ctx context.Context) ([]string, error) {
	cfg := a.cfg.NVMe
	plan, targetAddr, err := spdkPlan(a.cfg.Name, cfg)
	if err != nil {
		return nil, err
	}
	keys, err := spdkKeyFiles(a.cfg.Name, cfg)
	if err != nil {
		return nil, err
	}
	if err := writeSPDKKeys(keys); err != nil {
		return nil, err
	}
	c, err := newSPDKClient(cfg.SPDK)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	nss, err := spdk.NewManager(c).Apply(ctx, plan)
	if err != nil {
		return nil, fmt.Errorf("appliance: SPDK at %s refused the export plan %s: %w", spdkSocket(cfg.SPDK), plan.String(), err)
	}
	var mounted []string
	for _, ns := range nss {
		seg := &kvtierpb.Segment{
			Name: fmt.Sprintf("%s/spdk%d", a.cfg.Name, ns.NSID), Type: kvtierpb.ReplicaType_NOF,
			Nqn: plan.Subsystem.NQN, Nsid: ns.NSID, TargetAddr: targetAddr,
			BlockSize: ns.BlockSize, Size: ns.Size,
		}
		if err := a.client.MountSegment(ctx, seg); err != nil {
			err = fmt.Errorf("appliance: mount NOF segment %s (SPDK bdev %s): %w", seg.Name, ns.PlanName, err)
			// MountSegment records the segment for heartbeats even when the
			// RPC fails: withdraw it (the master may answer that it is not
			// ours, or not mounted) and the ones mounted before it.
			_ = a.client.UnmountSegment(ctx, seg.Name, 0)
			for _, name := range mounted {
				if e := a.client.UnmountSegment(ctx, name, 0); e != nil && !kverr.Is(e, kverr.SegmentNotFound) {
					err = errors.Join(err, fmt.Errorf("unmount %s: %w", name, e))
				}
			}
			return nil, err
		}
		mounted = append(mounted, seg.Name)
		a.log.Info("spdk namespace", "segment", seg.Name, "bdev", ns.PlanName, "nsid", ns.NSID,
			"size", ns.Size, "block_size", ns.BlockSize)
	}
	return mounted, nil
}

// refreshSPDKStats asks SPDK for the exported namespaces' I/O counters and
// keeps them, as the heartbeat's NvmeStats, for the master's NVMe view. On
// failure the previous snapshot stays (logged at debug). SPDK does not list
// connected hosts through the methods kvtier uses, so Hosts stays empty.
func (a *Appliance) refreshSPDKStats(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, spdkStatsTimeout)
	defer cancel()
	io, err := a.SPDKIOStat(rctx)
	if err != nil {
		a.log.Debug("spdk iostat for the heartbeat", "err", err)
		return
	}
	sub := &kvtierpb.NvmeSubsystem{Nqn: a.nvme.nqn}
	for _, n := range io {
		sub.Namespaces = append(sub.Namespaces, &kvtierpb.NvmeNamespace{Nsid: n.NSID, Size: n.Size, BlockSize: n.BlockSize,
			ReadOps: n.NumReadOps, ReadBytes: n.BytesRead, WriteOps: n.NumWriteOps, WriteBytes: n.BytesWritten,
			OtherOps: n.NumUnmapOps})
	}
	a.spdkStats.Store(&kvtierpb.NvmeStats{Addr: a.nvme.addr, Subsystems: []*kvtierpb.NvmeSubsystem{sub}})
}

// LogSPDKIOStat logs SPDKIOStat at debug level, one line per namespace; a
// caller may run it periodically. It does nothing unless debug is enabled.
func (a *Appliance) LogSPDKIOStat(ctx context.Context) {
	if !a.log.Enabled(ctx, slog.LevelDebug) || a.cfg.NVMe.Backend != BackendSPDK || a.nvme == nil {
		return
	}
	c, err := newSPDKClient(a.cfg.NVMe.SPDK)
	if err != nil {
		a.log.Debug("spdk iostat", "err", err)
		return
	}
	defer c.Close()
	a.logSPDKIOStat(ctx, c, a.nvme.nqn)
}

func (a *Appliance) logSPDKIOStat(ctx context.Context, c *spdk.Client, nqn string) {
	st, err := a.spdkIOStat(ctx, c, nqn)
	if err != nil {
		a.log.Debug("spdk iostat", "err", err)
		return
	}
	for _, s := range st {
		a.log.Debug("spdk iostat", "segment", s.Segment, "bdev", s.Bdev,
			"bytes_read", s.BytesRead, "read_ops", s.NumReadOps,
			"bytes_written", s.BytesWritten, "write_ops", s.NumWriteOps,
			"bytes_unmapped", s.BytesUnmapped)
	}
}

// SPDKTeardown removes from SPDK what this appliance's plan describes:
// the subsystem, lvols, lvol store, malloc/aio bdevs and NVMe controllers
// (dependency-ordered, skipping what is gone, leaving alone objects of a
// planned name that the plan did not create). It does not unmount segments
// on the master: call it after Close. Close calls it itself when
// SPDKConfig.Teardown is set (see closeSPDK).
func (a *Appliance) SPDKTeardown(ctx context.Context) error {
	cfg := a.cfg.NVMe
	if cfg.Backend != BackendSPDK {
		return kverr.New(kverr.InvalidParams, "", "appliance %s does not export through SPDK", a.cfg.Name)
	}
	plan, _, err := spdkPlan(a.cfg.Name, cfg)
	if err != nil {
		return err
	}
	c, err := newSPDKClient(cfg.SPDK)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := spdk.NewManager(c).Teardown(ctx, plan); err != nil {
		return fmt.Errorf("appliance: SPDK teardown at %s: %w", spdkSocket(cfg.SPDK), err)
	}
	for _, k := range plan.Keys {
		if err := os.Remove(k.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			a.log.Warn("remove SPDK key file", "path", k.Path, "err", err)
		}
	}
	a.log.Info("spdk export torn down", "nqn", plan.Subsystem.NQN)
	return nil
}

// closeSPDK is Close's SPDK step, after the NOF segments are unmounted:
// SPDK state is removed only when SPDKConfig.Teardown asks for it.
// It also unmounts NOF segments that a restarted SPDK exported under NSIDs
// that the first start did not have (Close unmounted the first start's).
func (a *Appliance) closeSPDK(ctx context.Context) error {
	if a.cfg.NVMe.Backend != BackendSPDK || a.nvme == nil {
		return nil
	}
	var err error
	if w := a.nvme.watch; w != nil {
		w.mu.Lock()
		extra := slices.DeleteFunc(slices.Clone(w.mounted), func(n string) bool { return slices.Contains(a.nofSegments, n) })
		w.mu.Unlock()
		for _, name := range extra {
			if e := a.client.UnmountSegment(ctx, name, 0); e != nil && !kverr.Is(e, kverr.SegmentNotFound) {
				err = errors.Join(err, fmt.Errorf("unmount %s: %w", name, e))
			}
		}
	}
	if !a.cfg.NVMe.SPDK.Teardown {
		return err
	}
	return errors.Join(err, a.SPDKTeardown(ctx))
}

// Flag syntax for the SPDK plan (cmd/kvtier parses flags with these; sizes
// go through the caller's size parser, as in ParseNVMeNamespace). Errors are
// kverr.InvalidParams naming the flag; the whole plan is validated again at
// Start.

var (
	spdkNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	spdkBDFRE  = regexp.MustCompile(`^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)
)

func badFlag(flag, spec, format string, args ...any) error {
	return kverr.New(kverr.InvalidParams, "", "%s %q: "+format, append([]any{flag, spec}, args...)...)
}

// ParseSPDKController parses --spdk-nvme-controller: NAME=BDF for a local
// PCIe SSD (Nvme0=0000:5e:00.0) or NAME=HOST:PORT/SUBNQN for a remote
// NVMe/TCP subsystem (HOST may be [IPv6]). Bdevs become NAMEn<nsid>.
func ParseSPDKController(spec string) (spdk.ControllerSpec, error) {
	const flag = "--spdk-nvme-controller"
	name, addr, ok := strings.Cut(spec, "=")
	if !ok || !spdkNameRE.MatchString(name) {
		return spdk.ControllerSpec{}, badFlag(flag, spec, "want NAME=BDF or NAME=HOST:PORT/SUBNQN with NAME of [A-Za-z0-9_.-]")
	}
	if spdkBDFRE.MatchString(addr) {
		return spdk.ControllerSpec{Name: name, Trtype: "pcie", Traddr: addr}, nil
	}
	hostPort, subnqn, ok := strings.Cut(addr, "/")
	if !ok || subnqn == "" {
		return spdk.ControllerSpec{}, badFlag(flag, spec, "%q is neither a PCI address nor HOST:PORT/SUBNQN", addr)
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil || host == "" {
		return spdk.ControllerSpec{}, badFlag(flag, spec, "bad HOST:PORT %q", hostPort)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return spdk.ControllerSpec{}, badFlag(flag, spec, "bad port %q", port)
	}
	c := spdk.ControllerSpec{Name: name, Trtype: "tcp", Traddr: host, Adrfam: "ipv4", Trsvcid: port, Subnqn: subnqn}
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		c.Adrfam = "ipv6"
	}
	// The plan's own rules (NQN syntax) are the single source of truth.
	probe := spdk.Plan{Controllers: []spdk.ControllerSpec{c}, Subsystem: spdk.SubsystemSpec{
		NQN: "nqn.2026-11.io.kvtier:probe", Listen: spdk.ListenAddress{Trtype: "TCP", Traddr: "127.0.0.1", Trsvcid: "4420"}}}
	if err := probe.Validate(); err != nil {
		return spdk.ControllerSpec{}, badFlag(flag, spec, "%v", err)
	}
	return c, nil
}

// ParseSPDKMalloc parses --spdk-malloc NAME:SIZE (a RAM disk, 4 KiB blocks).
func ParseSPDKMalloc(spec string, sizeOf func(string) (uint64, error)) (spdk.MallocSpec, error) {
	const flag = "--spdk-malloc"
	name, size, ok := strings.Cut(spec, ":")
	if !ok || !spdkNameRE.MatchString(name) {
		return spdk.MallocSpec{}, badFlag(flag, spec, "want NAME:SIZE")
	}
	n, err := sizeOf(size)
	if err != nil || n == 0 || n%4096 != 0 {
		return spdk.MallocSpec{}, badFlag(flag, spec, "size %q must be a positive multiple of 4 KiB", size)
	}
	return spdk.MallocSpec{Name: name, Size: n}, nil
}

// ParseSPDKLvstore parses --spdk-lvstore NAME=BASE_BDEV[:CLUSTER_SIZE].
func ParseSPDKLvstore(spec string, sizeOf func(string) (uint64, error)) (*spdk.LvstoreSpec, error) {
	const flag = "--spdk-lvstore"
	name, rest, ok := strings.Cut(spec, "=")
	base, cluster, hasCluster := strings.Cut(rest, ":")
	if !ok || !spdkNameRE.MatchString(name) || !spdkNameRE.MatchString(base) {
		return nil, badFlag(flag, spec, "want NAME=BASE_BDEV[:CLUSTER_SIZE]")
	}
	l := &spdk.LvstoreSpec{Name: name, BaseBdev: base}
	if hasCluster {
		n, err := sizeOf(cluster)
		if err != nil || n == 0 || n%4096 != 0 || n > 1<<31 {
			return nil, badFlag(flag, spec, "cluster size %q must be a positive multiple of 4 KiB up to 2 GiB", cluster)
		}
		l.ClusterSize = uint32(n)
	}
	return l, nil
}

// ParseSPDKLvol parses --spdk-lvol NAME:SIZE[:thin] (SIZE a multiple of 1 MiB).
func ParseSPDKLvol(spec string, sizeOf func(string) (uint64, error)) (spdk.LvolSpec, error) {
	const flag = "--spdk-lvol"
	parts := strings.Split(spec, ":")
	if len(parts) < 2 || len(parts) > 3 || !spdkNameRE.MatchString(parts[0]) {
		return spdk.LvolSpec{}, badFlag(flag, spec, "want NAME:SIZE[:thin]")
	}
	n, err := sizeOf(parts[1])
	if err != nil || n == 0 || n%(1<<20) != 0 {
		return spdk.LvolSpec{}, badFlag(flag, spec, "size %q must be a positive multiple of 1 MiB", parts[1])
	}
	v := spdk.LvolSpec{Name: parts[0], SizeMiB: n >> 20}
	if len(parts) == 3 {
		if parts[2] != "thin" {
			return spdk.LvolSpec{}, badFlag(flag, spec, "unknown option %q (want thin)", parts[2])
		}
		v.Thin = true
	}
	return v, nil
}
