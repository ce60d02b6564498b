package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/dram"
	"github.com/kvtier/kvtier/ha"
	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/internal/buildinfo"
	"github.com/kvtier/kvtier/internal/fastrpc"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/master"
	"github.com/kvtier/kvtier/ssd"
)

// masterFlags are the master's settings shared by `master` and `standalone`.
type masterFlags struct {
	grpcAddr, httpAddr string
	leaseTTL           time.Duration
	highWatermark      float64
	evictionRatio      float64
	etcd               []string
	etcdTTL            time.Duration // ha.go
	dramSync           time.Duration // ha.go
	leasePolicy        string
	frequencyBonus     time.Duration
	frequencyMaxBonus  time.Duration
	evictionHistory    int
	clientTTL          time.Duration
	clientGrace        time.Duration
	putDiscard         time.Duration
	putRelease         time.Duration
	maxObjects         int
	httpToken          string
	offload            string
	ssdPolicy          string
	rpcPoll            time.Duration
	dataGrants         bool            // sign data-plane grants (internal/grant)
	grantRotation      time.Duration   // grant secret rotation period
	putTicketLife      time.Duration   // direct puts' tickets (hidden: tests)
	rdmaTrusted        bool            // hand out RDMA offers although they bypass grants
	doctor             *applianceFlags // standalone: the host checks use the appliance's settings
	security           securityFlags
	dataTLSCA          string    // CA of appliances' TLS data ports, for the REST data plane
	sec                *security // set by startMaster
	settings           []setting // every flag of the command, for GET /api/v1/config
}

func (f *masterFlags) register(cmd *cobra.Command, standalone bool) {
	fs := cmd.Flags()
	fs.StringVar(&f.grpcAddr, "grpc-addr", "127.0.0.1:7070", "master gRPC listen address (port 0 picks a free port)")
	fs.StringVar(&f.httpAddr, "http-addr", "127.0.0.1:8080", "REST API, metrics and web UI listen address (loopback by default; port 0 picks a free port)")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", master.DefaultLeaseTTL, "read lease granted by each read")
	fs.Float64Var(&f.highWatermark, "high-watermark", master.DefaultHighWatermark, "DRAM use fraction that triggers eviction, in (0,1]")
	fs.Float64Var(&f.evictionRatio, "eviction-ratio", master.DefaultEvictionRatio, "fraction of DRAM capacity one eviction pass frees, in (0,1]")
	fs.StringSliceVar(&f.etcd, "etcd", nil, "etcd endpoints for HA mode (leader + standbys)")
	registerHAFlags(fs, f)
	fs.StringVar(&f.leasePolicy, "lease-policy", master.DefaultLeasePolicy, "eviction order policy: plain | frequency")
	fs.DurationVar(&f.frequencyBonus, "frequency-bonus", master.DefaultFrequencyBonus, "frequency policy: eviction-order bonus per read")
	fs.DurationVar(&f.frequencyMaxBonus, "frequency-max-bonus", master.DefaultFrequencyMaxBonus, "frequency policy: cap of the bonus")
	fs.IntVar(&f.evictionHistory, "eviction-history", 0, "frequency policy: evicted keys whose read counts are remembered (0: 4x the DRAM objects; negative: off)")
	fs.DurationVar(&f.clientTTL, "client-ttl", master.DefaultClientTTL, "a client silent this long enters the grace state (suspect: its replicas are not served); one that reports its heartbeat period, as appliances do, already after 2.5 periods")
	fs.DurationVar(&f.clientGrace, "client-grace", master.DefaultClientGrace, "a client in grace this long is gone: its segments are unmounted")
	fs.DurationVar(&f.putDiscard, "put-discard-timeout", master.DefaultPutDiscardTimeout, "an unfinished put older than this may be taken over by a new writer")
	fs.DurationVar(&f.putRelease, "put-release-timeout", master.DefaultPutReleaseTimeout, "an abandoned put's space is freed this long after its start")
	fs.IntVar(&f.maxObjects, "max-objects", master.DefaultMaxObjects, "maximum number of objects")
	fs.StringVar(&f.httpToken, "http-token", "", "bearer token required by mutating REST calls and UI actions (default: none)")
	fs.DurationVar(&f.rpcPoll, "rpc-poll", fastrpc.DefaultServerPoll, "longest a master connection polls for its next data-path call before sleeping, when its calls come that close together (0: off; saves a CPU wake-up per call on VMs)")
	fs.BoolVar(&f.dataGrants, "data-grants", true, "sign a data-plane grant into every replica location and have appliances refuse data-port requests without a valid one (false: the data port is open to anyone who reaches it; for measuring the grants' cost)")
	fs.DurationVar(&f.grantRotation, "grant-key-rotation", master.DefaultGrantKeyRotation, "how often each appliance's data-plane grant secret is replaced")
	fs.DurationVar(&f.putTicketLife, "put-ticket-life", master.PutTicketLife, "how long a direct put's ticket lasts (clients renew at half)")
	_ = fs.MarkHidden("put-ticket-life")
	fs.BoolVar(&f.rdmaTrusted, "rdma-trusted-fabric", false, "hand out the RDMA offers appliances announce although data-plane grants are on: an rkey opens its whole segment past grants and TLS, so only on a fabric where every host is trusted (without it clients use TCP with grants; with --data-grants=false offers are always handed out)")
	f.security.register(cmd)
	fs.StringVar(&f.dataTLSCA, "data-tls-ca", "", "PEM CA of appliances' TLS data ports (their --data-tls-cert), trusted by REST object data reads and writes (default: only this process's own --tls-cert)")
	if !standalone {
		fs.StringVar(&f.offload, "offload", master.DefaultOffloadMode, "SSD offload mode of the cluster: off | immediate | on-evict")
		fs.StringVar(&f.ssdPolicy, "ssd-policy", master.DefaultSSDPolicy, "SSD bucket eviction of every appliance: fifo | lru (cluster-wide; wins over appliances' own --ssd-policy)")
	}
}

func (f *masterFlags) config() master.Config {
	return master.Config{
		LeaseTTL: f.leaseTTL, HighWatermark: f.highWatermark, EvictionRatio: f.evictionRatio,
		LeasePolicy: f.leasePolicy, FrequencyBonus: f.frequencyBonus, FrequencyMaxBonus: f.frequencyMaxBonus, EvictionHistory: f.evictionHistory, ClientTTL: f.clientTTL, ClientGrace: f.clientGrace,
		PutDiscardTimeout: f.putDiscard, PutReleaseTimeout: f.putRelease, MaxObjects: f.maxObjects,
		OffloadMode: f.offload, SSDPolicy: f.ssdPolicy, DramSyncTimeout: f.dramSync, DisableGrants: !f.dataGrants, GrantKeyRotation: f.grantRotation, PutTicketLife: f.putTicketLife, RDMATrustedFabric: f.rdmaTrusted,
	}
}

// applianceFlags are the storage-box settings shared by `appliance` and `standalone`.
type applianceFlags struct {
	name        string
	master      string
	dramSize    sizeValue
	segmentSize sizeValue
	hugepages   string
	ssdDir      string
	ssdCapacity sizeValue
	ssdPolicy   string
	offload     string
	dataAddr    string
	drainGrace  time.Duration
	shm         bool
	rdmaDevice  string
	noDramDir   bool // ha.go
	noRevoke    bool // ha.go
	nvme        nvmeFlags
	respAddr    string
	respPwFile  string
	respLoop    bool
	clientSec   clientSecurityFlags // appliance command: its token and the master's CA
	dataTLS     dataTLSFlags        // appliance command: TLS on the data port
}

func (f *applianceFlags) register(cmd *cobra.Command, standalone bool) {
	fs := cmd.Flags()
	host, _ := os.Hostname()
	f.dramSize = 256 << 20
	f.ssdCapacity = 1 << 30
	fs.StringVar(&f.name, "name", "", "appliance name (node identity). Default: unique per host and stable across restarts: "+
		host+"-<6 hex digits of the SSD directory's id (<ssd-dir>/appliance-id)>; without --ssd-dir, "+host+"-p<port> for a fixed "+
		"--data-addr port, else "+host+"-<random>. A restart under the same name takes over at once with the same SSD directory, "+
		"else once the old process has been silent 3s; a second live appliance under a taken name is refused and exits non-zero")
	if !standalone {
		fs.StringVar(&f.master, "master", envOr("KVTIER_MASTER", "127.0.0.1:7070"), "master gRPC address (or KVTIER_MASTER)")
		f.clientSec.register(cmd)
		f.dataTLS.register(cmd)
	}
	fs.Var(&f.dramSize, "dram", "DRAM to serve, e.g. 1GiB (pre-faulted once at start)")
	fs.Var(&f.segmentSize, "segment-size", "split DRAM into segments of this size (default: one segment)")
	fs.StringVar(&f.hugepages, "hugepages", "auto", "hugepages: auto | on | off (on fails when none are reserved)")
	defaultSSD := ""
	if standalone {
		if d, err := os.UserCacheDir(); err == nil {
			defaultSSD = filepath.Join(d, "kvtier", "ssd")
		}
	}
	fs.StringVar(&f.ssdDir, "ssd-dir", defaultSSD, "SSD tier directory (empty: no SSD tier)")
	fs.Var(&f.ssdCapacity, "ssd-capacity", "SSD tier capacity, e.g. 100GiB")
	policyHelp, offloadHelp := "SSD bucket eviction: fifo | lru (until the master's cluster-wide setting arrives; a difference is reported at start)",
		"SSD offload mode: off | immediate | on-evict (the cluster's setting applies; a difference is reported at start)"
	if standalone {
		policyHelp, offloadHelp = "SSD bucket eviction: fifo | lru", "SSD offload mode: off | immediate | on-evict"
	}
	fs.StringVar(&f.ssdPolicy, "ssd-policy", "fifo", policyHelp)
	fs.StringVar(&f.offload, "offload", master.DefaultOffloadMode, offloadHelp)
	fs.StringVar(&f.dataAddr, "data-addr", "127.0.0.1:0", "transfer-engine listen address")
	fs.DurationVar(&f.drainGrace, "drain-grace", 0, "on SIGTERM (systemctl stop), keep serving reads this long after marking segments draining, then unmount")
	registerDramDirFlag(fs, f)
	fs.BoolVar(&f.shm, "shm", true, "share DRAM segments with clients on this host (same user or root): they copy through shared memory instead of loopback TCP")
	fs.StringVar(&f.rdmaDevice, "rdma-device", "auto", rdmaDeviceHelp)
	f.nvme.register(cmd)
	fs.StringVar(&f.respAddr, "resp-addr", "", "Redis protocol (RESP2/RESP3) listen address, e.g. 127.0.0.1:6379 (empty: off; port 0 picks a free port)")
	fs.StringVar(&f.respPwFile, "resp-password-file", "", "file holding the password Redis clients must AUTH with (default: none, like redis-server without requirepass)")
	fs.BoolVar(&f.respLoop, "resp-event-loop", false, "serve Redis connections from epoll event loops (one per CPU) instead of a goroutine each (Linux)")
}

func (f *applianceFlags) config(masterAddr string, log *slog.Logger) (appliance.Config, error) {
	hp, err := dram.ParseHugepageMode(f.hugepages)
	if err != nil {
		return appliance.Config{}, fmt.Errorf("--hugepages: %w", err)
	}
	pol, err := ssd.ParsePolicy(f.ssdPolicy)
	if err != nil {
		return appliance.Config{}, fmt.Errorf("--ssd-policy: %w", err)
	}
	switch f.offload {
	case master.OffloadImmediate, master.OffloadOnEvict, master.OffloadOff:
	default:
		return appliance.Config{}, fmt.Errorf("--offload %q: want off, immediate or on-evict", f.offload)
	}
	nv, err := f.nvme.config()
	if err != nil {
		return appliance.Config{}, err
	}
	return appliance.Config{
		NVMe: nv,
		Name: f.name, MasterAddr: masterAddr, DRAM: uint64(f.dramSize), SegmentSize: uint64(f.segmentSize),
		Hugepages: hp, DataAddr: f.dataAddr, SSDDir: f.ssdDir, SSDCapacity: uint64(f.ssdCapacity),
		SSDPolicy: pol, DrainGrace: f.drainGrace, Logger: log,
		Transfer: transfer.Config{DisableSharedMemory: !f.shm, RDMADevice: f.rdmaDevice}, NoDramDirectory: f.noDramDir,
		NoGrantRevocation: f.noRevoke,
	}, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// runningMaster is a master with its gRPC and HTTP servers.
type runningMaster struct {
	m        *master.Master
	ms       kvtierpb.MasterServer
	grpc     *grpc.Server
	fast     *fastrpc.Server // the unary methods' fast path, on the gRPC listener
	grpcAddr net.Addr
	httpAddr net.Addr
	fe       *frontEnd
	cancel   context.CancelFunc
	done     chan struct{}
	httpDone chan struct{}
	sec      *security
	lead     *ha.Leadership // nil without --etcd
	lost     chan struct{}  // closed when leadership is lost
}

func startMaster(f *masterFlags, log *slog.Logger) (*runningMaster, error) {
	if f.rpcPoll < 0 || f.rpcPoll > fastrpc.MaxPoll {
		return nil, fmt.Errorf("--rpc-poll %v: want 0 (off) up to %v", f.rpcPoll, fastrpc.MaxPoll)
	}
	sec, err := f.security.setup(log, f.grpcAddr, f.httpAddr)
	if err != nil {
		return nil, err
	}
	f.sec = sec
	lead, err := campaign(f, log)
	if err != nil {
		return nil, err
	}
	cfg := f.config()
	if lead != nil {
		cfg.LeaderEpoch = lead.Epoch() // reported with every PutEnd
	}
	m, err := master.New(cfg)
	if err != nil {
		return nil, err
	}
	ms := master.NewGRPCServer(m)
	fe, err := newFrontEnd(ms, f, log)
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", f.grpcAddr)
	if err != nil {
		return nil, fmt.Errorf("--grpc-addr %s: %w", f.grpcAddr, err)
	}
	hl, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		lis.Close()
		return nil, fmt.Errorf("--http-addr %s: %w", f.httpAddr, err)
	}
	if err := fe.start(ms, m.Config(), lis.Addr().String(), f, log); err != nil {
		lis.Close()
		hl.Close()
		return nil, err
	}
	rm := &runningMaster{m: m, ms: ms, grpcAddr: lis.Addr(), httpAddr: hl.Addr(), fe: fe, sec: sec,
		done: make(chan struct{}), httpDone: make(chan struct{})}
	if sec.tls != nil {
		// TLS ends at the listener, before the fast path and gRPC split,
		// so both run over it (GRPCServerCreds hands gRPC the peer's
		// certificate).
		lis = tls.NewListener(lis, sec.tls.Config("h2"))
		hl = tls.NewListener(hl, sec.tls.Config("http/1.1"))
	}
	unary, stream := sec.interceptors(m, fe.metrics.UnaryServerInterceptor(), fe.metrics.StreamServerInterceptor())
	opts := append(fe.grpcOptions(), grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	if sec.tls != nil {
		opts = append(opts, grpc.Creds(auth.GRPCServerCreds{}))
	}
	rm.grpc = grpc.NewServer(opts...)
	kvtierpb.RegisterMasterServer(rm.grpc, ms)
	rm.fast = fastrpc.NewServer(&kvtierpb.Master_ServiceDesc, ms, chainUnary(unary))
	rm.fast.SetPoll(f.rpcPoll)
	if sec.store != nil {
		rm.fast.SetAuthenticate(sec.fastAccept)
	}
	if sec.tls != nil {
		rm.fast.SetConnContext(fastConnContext)
	}
	glis := rm.fast.Split(lis)
	ctx, cancel := context.WithCancel(context.Background())
	rm.cancel = cancel
	sec.watchReload(ctx, log)
	go func() { defer close(rm.done); m.Run(ctx) }()
	go fe.metrics.Track(ctx, 2*time.Second) // appliance SSD counters stay monotonic across restarts
	go func() { _ = rm.grpc.Serve(glis) }()
	rm.lead = lead
	rm.lost = make(chan struct{})
	if lead != nil {
		go func() {
			select {
			case <-lead.Lost():
				// Another master may already be leader: stop answering at once.
				m.Fence()
				rm.grpc.Stop()
				_ = rm.fast.Close()
				close(rm.lost)
			case <-ctx.Done():
			}
		}()
	}
	go func() {
		defer close(rm.httpDone)
		if err := fe.rest.Serve(ctx, hl); err != nil {
			log.Error("http server", "err", err)
		}
	}()
	return rm, nil
}

func (rm *runningMaster) stop() {
	if rm.lead != nil {
		defer rm.lead.Close()
	}
	rm.fe.dp.close()
	rm.cancel()
	<-rm.httpDone
	stopped := make(chan struct{})
	go func() { rm.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(3 * time.Second):
		rm.grpc.Stop() // open WatchEvents streams must not hold shutdown
	}
	_ = rm.fast.Close()
	<-rm.done
}

func newMasterCmd() *cobra.Command {
	var f masterFlags
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "master",
		Short: "Run the control plane: metadata, allocation, leases, eviction (gRPC + REST + web UI)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd)
			if err != nil {
				return err
			}
			stopProfile, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			f.settings = effectiveSettings(cmd)
			rm, err := startMaster(&f, log)
			if err != nil {
				return err
			}
			line := fmt.Sprintf("listening grpc=%s http=%s", rm.grpcAddr, rm.httpAddr)
			log.Info(line, "version", buildinfo.Get().Version)
			fmt.Println(line)
			ctx, cancel := signalContext()
			defer cancel()
			notifyReady(log, line)
			go logSummaries(ctx, log, rm.ms, summaryInterval(cmd))
			select {
			case <-ctx.Done():
			case <-rm.lost:
				rm.stop()
				return fmt.Errorf("lost leadership in etcd; exiting so that this master restarts as a standby")
			}
			log.Info("shutting down")
			notifyStopping("shutting down")
			rm.stop()
			return nil
		},
	}
	f.register(cmd, false)
	registerCPUProfile(cmd, &cpuProfile)
	return cmd
}

// registerCPUProfile adds the hidden --cpuprofile flag (for go tool pprof;
// used by the benchmarks, not part of the public surface).
func registerCPUProfile(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVar(path, "cpuprofile", "", "write a Go CPU profile of this process to this file until it stops (for go tool pprof)")
	_ = cmd.Flags().MarkHidden("cpuprofile")
}

// startCPUProfile profiles this process into path until the returned stop
// runs (on SIGINT/SIGTERM); an empty path profiles nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	fh, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(fh); err != nil {
		fh.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); _ = fh.Close() }, nil
}

func newApplianceCmd() *cobra.Command {
	var f applianceFlags
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "appliance",
		Short: "Run a storage box: DRAM segments, SSD tier, transfer engine, joined to a master",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd)
			if err != nil {
				return err
			}
			if err := f.validateDRAM(); err != nil {
				return err
			}
			stopProfile, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			ctx, cancel := signalContext()
			defer cancel()
			cfg, err := f.config(f.master, log)
			if err != nil {
				return err
			}
			if cfg.Token, cfg.MasterTLS, err = f.clientSec.load(); err != nil {
				return err
			}
			if cfg.Transfer.ServerTLS, err = f.dataTLS.load(ctx, log); err != nil {
				return err
			}
			a, err := appliance.Start(ctx, cfg)
			if err != nil {
				return err
			}
			reportTierConflicts(ctx, cmd, &f, a, log)
			respDesc, stopRESP, err := startRESP(f.respAddr, f.respPwFile, f.respLoop, a, log)
			if err != nil {
				_ = a.Close(context.Background())
				return err
			}
			line := fmt.Sprintf("listening data=%s%s%s name=%s", a.DataAddr(), describeListeners(a), respDesc, a.Name())
			log.Info(line, "version", buildinfo.Get().Version)
			fmt.Println(line)
			notifyReady(log, line)
			go logApplianceSummaries(ctx, log, a, summaryInterval(cmd))
			<-ctx.Done()
			log.Info("draining and unmounting", "drain_grace", f.drainGrace.String())
			notifyStopping("draining for " + f.drainGrace.String())
			stopRESP()
			return a.Close(context.Background())
		},
	}
	f.register(cmd, false)
	registerCPUProfile(cmd, &cpuProfile)
	return cmd
}

func newStandaloneCmd() *cobra.Command {
	var mf masterFlags
	var af applianceFlags
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "standalone",
		Short: "Run master + appliance in one process with embedded defaults (the one-command start)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd)
			if err != nil {
				return err
			}
			stopProfile, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			if err := af.validateDRAM(); err != nil {
				return err
			}
			// One process is master and appliance: its tier flags are the
			// cluster's settings, so they cannot disagree.
			mf.offload = af.offload
			mf.ssdPolicy = af.ssdPolicy
			mf.doctor = &af
			mf.settings = effectiveSettings(cmd)
			rm, err := startMaster(&mf, log)
			if err != nil {
				return err
			}
			defer rm.stop()
			ctx, cancel := signalContext()
			defer cancel()
			if af.name == "" {
				af.name = "standalone"
			}
			cfg, err := af.config(rm.grpcAddr.String(), log)
			if err != nil {
				return err
			}
			cfg.Token, cfg.MasterTLS = rm.sec.internalToken(), rm.sec.selfTLS()
			if rm.lead == nil {
				// Direct puts are placed with the master in-process, and
				// the DRAM directory's records arrive in-process: no socket,
				// no encoding between the box and its master. Not with
				// --etcd: this process's master may not be the leader.
				cfg.PutMaster = rm.ms
				cfg.DramRecords = inprocDramRecords(rm.m)
			}
			if rm.sec.tls != nil {
				// --tls-cert covers the data port too (tls:// endpoints);
				// SIGHUP's reload reaches it through the same material.
				cfg.Transfer.ServerTLS = rm.sec.tls.Config()
			}
			a, err := appliance.Start(ctx, cfg)
			if err != nil {
				return err
			}
			respDesc, stopRESP, err := startRESP(af.respAddr, af.respPwFile, af.respLoop, a, log)
			if err != nil {
				_ = a.Close(context.Background())
				return err
			}
			line := fmt.Sprintf("listening grpc=%s http=%s data=%s%s%s", rm.grpcAddr, rm.httpAddr, a.DataAddr(), describeListeners(a), respDesc)
			log.Info(line, "version", buildinfo.Get().Version)
			fmt.Println(line)
			fmt.Printf("web UI: %s://%s/\n", map[bool]string{false: "http", true: "https"}[rm.sec.tls != nil], rm.httpAddr)
			notifyReady(log, line)
			go logSummaries(ctx, log, rm.ms, summaryInterval(cmd))
			<-ctx.Done()
			log.Info("draining and unmounting", "drain_grace", af.drainGrace.String())
			notifyStopping("draining for " + af.drainGrace.String())
			stopRESP()
			return a.Close(context.Background())
		},
	}
	mf.register(cmd, true)
	af.register(cmd, true)
	registerCPUProfile(cmd, &cpuProfile)
	return cmd
}

func summaryInterval(cmd *cobra.Command) time.Duration {
	d, _ := cmd.Flags().GetDuration("summary-interval")
	return d
}
