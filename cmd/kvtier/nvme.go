package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/auth"
	"github.com/kvtier/kvtier/nof/initiator"
)

// nvmeFlags configure the appliance's built-in NVMe/TCP target.
type nvmeFlags struct {
	addr       string
	namespaces []string
	allowHosts []string
	hostKeys   []string
	ctrlKeys   []string
	backend    string
	spdkSocket string
	spdkCtrls  []string
	spdkMalloc []string
	spdkLvs    string
	spdkLvols  []string
	spdkTear   bool
	spdkKeyDir string
	pollSpin   time.Duration
}

func (f *nvmeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.addr, "nvme-addr", "", "built-in NVMe/TCP target listen address (off unless given)")
	cmd.Flags().StringArrayVar(&f.namespaces, "nvme-namespace", nil, "NVMe namespace backing file or device PATH[:SIZE] (repeatable; a file is created at SIZE if missing)")
	cmd.Flags().StringSliceVar(&f.allowHosts, "nvme-allow-host", nil, "host NQNs allowed to connect (default: any)")
	cmd.Flags().StringArrayVar(&f.hostKeys, "nvme-host-key", nil, "DH-HMAC-CHAP: HOSTNQN=DHHC-1:... or HOSTNQN=@FILE (repeatable); with any, every host must authenticate with its secret")
	cmd.Flags().StringArrayVar(&f.ctrlKeys, "nvme-ctrl-key", nil, "DH-HMAC-CHAP controller secret for bidirectional authentication: HOSTNQN=DHHC-1:... or HOSTNQN=@FILE (repeatable)")
	cmd.Flags().StringVar(&f.backend, "nvme-backend", "builtin", "NVMe-oF backend: builtin (our target) | spdk (manage an SPDK target)")
	cmd.Flags().StringVar(&f.spdkSocket, "spdk-socket", "/var/tmp/spdk.sock", "SPDK JSON-RPC socket (with --nvme-backend spdk)")
	cmd.Flags().StringArrayVar(&f.spdkCtrls, "spdk-nvme-controller", nil, "spdk: attach an NVMe controller NAME=PCI_BDF or NAME=HOST:PORT/SUBNQN (repeatable)")
	cmd.Flags().StringArrayVar(&f.spdkMalloc, "spdk-malloc", nil, "spdk: a RAM bdev NAME:SIZE (repeatable; for tests)")
	cmd.Flags().StringVar(&f.spdkLvs, "spdk-lvstore", "", "spdk: an lvol store NAME=BASE_BDEV[:CLUSTER_SIZE]")
	cmd.Flags().StringArrayVar(&f.spdkLvols, "spdk-lvol", nil, "spdk: an lvol NAME:SIZE[:thin] in the lvol store (repeatable)")
	cmd.Flags().BoolVar(&f.spdkTear, "spdk-teardown", false, "spdk: remove the plan's SPDK objects on shutdown (default: leave them)")
	cmd.Flags().DurationVar(&f.pollSpin, "nvme-poll-spin", 50*time.Microsecond, "built-in target: poll an empty connection this long before sleeping, as SPDK's target polls (costs that CPU while hosts are busy; 0: sleep at once). 4 KiB randread QD32: 1.1 x SPDK's nvmf_tgt with 50us, 0.7 x without")
	cmd.Flags().StringVar(&f.spdkKeyDir, "spdk-key-dir", "", "spdk: directory for the DH-HMAC-CHAP key files SPDK's keyring reads (default: $TMPDIR/kvtier-spdk-keys/NAME)")
}

func (f *nvmeFlags) config() (appliance.NVMeConfig, error) {
	cfg := appliance.NVMeConfig{Addr: f.addr, AllowHosts: f.allowHosts, PollSpin: f.pollSpin}
	for _, kv := range []struct {
		flag  string
		specs []string
		dst   *map[string]*auth.Secret
	}{{"nvme-host-key", f.hostKeys, &cfg.HostSecrets}, {"nvme-ctrl-key", f.ctrlKeys, &cfg.CtrlSecrets}} {
		for _, spec := range kv.specs {
			nqn, sec, err := appliance.ParseNVMeSecretFlag(kv.flag, spec)
			if err != nil {
				return cfg, err
			}
			if *kv.dst == nil {
				*kv.dst = map[string]*auth.Secret{}
			}
			(*kv.dst)[nqn] = sec
		}
	}
	switch f.backend {
	case "builtin":
	case "spdk":
		cfg.Backend = appliance.BackendSPDK
		cfg.SPDK = appliance.SPDKConfig{Socket: f.spdkSocket, Teardown: f.spdkTear, KeyDir: f.spdkKeyDir}
		for _, s := range f.spdkCtrls {
			c, err := appliance.ParseSPDKController(s)
			if err != nil {
				return cfg, err
			}
			cfg.SPDK.Controllers = append(cfg.SPDK.Controllers, c)
		}
		for _, s := range f.spdkMalloc {
			m, err := appliance.ParseSPDKMalloc(s, parseSize)
			if err != nil {
				return cfg, err
			}
			cfg.SPDK.Mallocs = append(cfg.SPDK.Mallocs, m)
		}
		if f.spdkLvs != "" {
			l, err := appliance.ParseSPDKLvstore(f.spdkLvs, parseSize)
			if err != nil {
				return cfg, err
			}
			cfg.SPDK.Lvstore = l
		}
		for _, s := range f.spdkLvols {
			l, err := appliance.ParseSPDKLvol(s, parseSize)
			if err != nil {
				return cfg, err
			}
			cfg.SPDK.Lvols = append(cfg.SPDK.Lvols, l)
		}
	default:
		return cfg, fmt.Errorf("--nvme-backend %q: want builtin or spdk", f.backend)
	}
	for _, spec := range f.namespaces {
		ns, err := appliance.ParseNVMeNamespace(spec, parseSize)
		if err != nil {
			return cfg, err
		}
		cfg.Namespaces = append(cfg.Namespaces, ns)
	}
	return cfg, nil
}

// describeListeners names the appliance's listeners beyond its data address: the
// NVMe/TCP target and the shared-memory socket.
func describeListeners(a *appliance.Appliance) string {
	s := ""
	if a.NVMeAddr() != "" {
		s = " nvme=" + a.NVMeAddr() + " nqn=" + a.NVMeNQN()
	}
	if sh := a.SharedAddr(); sh != "" {
		s += " shm=" + sh
	}
	return s
}

func extraCommands() []*cobra.Command {
	return []*cobra.Command{newNVMeCmd(), newBenchCmd(), newReplayCmd()}
}

// nvmeCLIFlags are shared by the `kvtier nvme` initiator verbs.
type nvmeCLIFlags struct {
	target     string
	nqn        string
	hostNQN    string
	hdgst      bool
	ddgst      bool
	nsid       uint32
	jsonOut    bool
	timeout    time.Duration
	queues     int
	queueDepth int
	secret     string
	ctrlSecret string
	pollSpin   time.Duration // perf only: --poll-spin
}

func (f *nvmeCLIFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.target, "target", "127.0.0.1:4420", "NVMe/TCP target HOST:PORT")
	fs.StringVar(&f.nqn, "nqn", "", "subsystem NQN (default: the first one the discovery log lists)")
	fs.StringVar(&f.hostNQN, "hostnqn", "nqn.2014-08.org.nvmexpress:kvtier:cli", "our host NQN")
	fs.StringVar(&f.hostNQN, "host-nqn", "nqn.2014-08.org.nvmexpress:kvtier:cli", "our host NQN (same as --hostnqn)")
	fs.StringVar(&f.secret, "dhchap-secret", "", "DH-HMAC-CHAP host secret DHHC-1:... or @FILE [$KVTIER_NVME_SECRET]")
	fs.StringVar(&f.ctrlSecret, "dhchap-ctrl-secret", "", "DH-HMAC-CHAP controller secret DHHC-1:... or @FILE: authenticate the target too [$KVTIER_NVME_CTRL_SECRET]")
	fs.BoolVar(&f.hdgst, "hdgst", false, "request header digests")
	fs.BoolVar(&f.ddgst, "ddgst", false, "request data digests")
	fs.Uint32Var(&f.nsid, "nsid", 1, "namespace id")
	fs.BoolVar(&f.jsonOut, "json", false, "print JSON")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up after this long")
	// One I/O queue per CPU, as the Linux host connects by default: over
	// loopback on two vCPUs two queues moved 128 KiB reads 1.1-1.3 x and
	// writes 1.3 x faster than one (kvtier nvme perf from another process).
	fs.IntVar(&f.queues, "queues", min(runtime.NumCPU(), 8), "I/O queues (connections; default one per CPU, at most 8)")
	fs.IntVar(&f.queueDepth, "queue-depth", 128, "entries per I/O queue")
}

func (f *nvmeCLIFlags) dial(ctx context.Context) (*initiator.Controller, error) {
	nqn := f.nqn
	if nqn == "" {
		entries, err := initiator.Discover(ctx, f.target, f.hostNQN)
		if err != nil {
			return nil, fmt.Errorf("discovery on %s: %w", f.target, err)
		}
		for _, e := range entries {
			if e.SubType == 2 {
				nqn = e.SubNQN
				break
			}
		}
		if nqn == "" {
			return nil, fmt.Errorf("%s lists no NVM subsystem; give --nqn", f.target)
		}
	}
	cfg := initiator.Config{SubNQN: nqn, HostNQN: f.hostNQN,
		HeaderDigest: f.hdgst, DataDigest: f.ddgst, IOQueues: f.queues, QueueDepth: f.queueDepth, PollSpin: f.pollSpin}
	var err error
	if cfg.DHCHAPSecret, cfg.DHCHAPCtrlSecret, err = nvmeSecrets(f.secret, f.ctrlSecret); err != nil {
		return nil, err
	}
	return initiator.Dial(ctx, f.target, cfg)
}

// nvmeSecrets loads the DH-HMAC-CHAP secrets of the initiator verbs, from
// the flags or else $KVTIER_NVME_SECRET / $KVTIER_NVME_CTRL_SECRET.
func nvmeSecrets(host, ctrl string) (hs, cs *auth.Secret, err error) {
	if host == "" {
		host = os.Getenv("KVTIER_NVME_SECRET")
	}
	if ctrl == "" {
		ctrl = os.Getenv("KVTIER_NVME_CTRL_SECRET")
	}
	if host != "" {
		if hs, err = appliance.LoadNVMeSecret(host); err != nil {
			return nil, nil, kverr.New(kverr.InvalidParams, "", "--dhchap-secret: %v", err)
		}
	}
	if ctrl != "" {
		if cs, err = appliance.LoadNVMeSecret(ctrl); err != nil {
			return nil, nil, kverr.New(kverr.InvalidParams, "", "--dhchap-ctrl-secret: %v", err)
		}
	}
	return hs, cs, nil
}

func newNVMeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "nvme", Short: "A small NVMe/TCP initiator for operators: discover, identify, read, write, perf"}
	cmd.AddCommand(nvmeDiscover(), nvmeIdentify(), nvmeRead(), nvmeWrite(), nvmePerf())
	return cmd
}

func nvmeDiscover() *cobra.Command {
	var f nvmeCLIFlags
	cmd := &cobra.Command{Use: "discover --target HOST:PORT", Short: "Read the discovery log page", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
			defer cancel()
			entries, err := initiator.Discover(ctx, f.target, f.hostNQN)
			if err != nil {
				return err
			}
			if f.jsonOut {
				return printJSON(entries)
			}
			for _, e := range entries {
				kind := "nvm"
				if e.SubType == 3 {
					kind = "discovery"
				}
				fmt.Printf("%-9s %s  %s:%s\n", kind, e.SubNQN, e.TrAddr, e.TrSvcID)
			}
			return nil
		}}
	f.register(cmd)
	return cmd
}

func nvmeIdentify() *cobra.Command {
	var f nvmeCLIFlags
	cmd := &cobra.Command{Use: "identify --target HOST:PORT [--nqn NQN]", Short: "Identify the controller and its namespaces", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
			defer cancel()
			ctrl, err := f.dial(ctx)
			if err != nil {
				return err
			}
			defer ctrl.Close()
			id := ctrl.Identify()
			nss := ctrl.Namespaces()
			if f.jsonOut {
				return printJSON(map[string]any{"controller": id, "namespaces": nss})
			}
			fmt.Printf("subsystem: %s\nmodel:     %s\nserial:    %s\nfirmware:  %s\ncntlid:    %d\nversion:   %d.%d\n",
				id.SubNQN, id.Model, id.Serial, id.Firmware, id.CNTLID, id.Version>>16, (id.Version>>8)&0xff)
			for _, ns := range nss {
				fmt.Printf("namespace %d: %d blocks of %d bytes (%s)\n", ns.NSID, ns.Blocks, ns.BlockSize, formatSize(uint64(ns.Size())))
			}
			return nil
		}}
	f.register(cmd)
	return cmd
}

func nvmeRead() *cobra.Command {
	var f nvmeCLIFlags
	var offset, length sizeValue
	var out string
	cmd := &cobra.Command{Use: "read --target HOST:PORT --offset N --length N [-o FILE]", Short: "Read bytes from a namespace (block-aligned)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
			defer cancel()
			ctrl, err := f.dial(ctx)
			if err != nil {
				return err
			}
			defer ctrl.Close()
			buf := make([]byte, length)
			if err := ctrl.ReadAt(ctx, f.nsid, buf, int64(offset)); err != nil {
				return err
			}
			if out != "" {
				return os.WriteFile(out, buf, 0o644)
			}
			if f.jsonOut {
				return printJSON(map[string]any{"offset": uint64(offset), "length": len(buf), "hex": hex.EncodeToString(buf)})
			}
			_, err = os.Stdout.Write(buf)
			return err
		}}
	f.register(cmd)
	length = 4096
	cmd.Flags().Var(&offset, "offset", "byte offset (a multiple of the block size)")
	cmd.Flags().Var(&length, "length", "bytes to read (a multiple of the block size)")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to FILE instead of standard output")
	return cmd
}

func nvmeWrite() *cobra.Command {
	var f nvmeCLIFlags
	var offset sizeValue
	var in string
	cmd := &cobra.Command{Use: "write --target HOST:PORT --offset N FILE|-", Short: "Write a file to a namespace (block-aligned)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in = args[0]
			var data []byte
			var err error
			if in == "-" {
				data, err = io.ReadAll(os.Stdin)
			} else {
				data, err = os.ReadFile(in)
			}
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
			defer cancel()
			ctrl, err := f.dial(ctx)
			if err != nil {
				return err
			}
			defer ctrl.Close()
			if err := ctrl.WriteAt(ctx, f.nsid, data, int64(offset)); err != nil {
				return err
			}
			if err := ctrl.Flush(ctx, f.nsid); err != nil {
				return err
			}
			fmt.Printf("wrote %d bytes at offset %d of namespace %d\n", len(data), uint64(offset), f.nsid)
			return nil
		}}
	f.register(cmd)
	cmd.Flags().Var(&offset, "offset", "byte offset (a multiple of the block size)")
	return cmd
}

func nvmePerf() *cobra.Command {
	var f nvmeCLIFlags
	var rw string
	var bs sizeValue
	var qd int
	var duration, pollSpin time.Duration
	cmd := &cobra.Command{Use: "perf --target HOST:PORT [--rw randread|read|write] [--bs 4KiB] [--qd 32]", Short: "Measure IOPS and throughput", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), f.timeout+duration)
			defer cancel()
			if f.queueDepth < qd {
				f.queueDepth = qd
			}
			f.pollSpin = pollSpin
			ctrl, err := f.dial(ctx)
			if err != nil {
				return err
			}
			defer ctrl.Close()
			res, err := initiator.Perf(ctx, ctrl, initiator.PerfConfig{RW: rw, BlockSize: int(bs), QueueDepth: qd, Duration: duration, NSID: f.nsid})
			if err != nil {
				return err
			}
			if f.jsonOut {
				return printJSON(map[string]any{"rw": res.RW, "bs": res.BlockSize, "qd": qd, "queues": ctrl.IOQueues(), "ios": res.IOs, "bytes": res.Bytes,
					"seconds": res.Elapsed.Seconds(), "iops": res.IOPS, "mb_per_sec": res.MBps,
					"p50_us": res.P50.Microseconds(), "p99_us": res.P99.Microseconds()})
			}
			fmt.Printf("%s bs=%s qd=%d queues=%d: %.0f IOPS, %.1f MB/s, p50 %v, p99 %v (%d I/Os in %v)\n",
				res.RW, formatSize(uint64(res.BlockSize)), qd, ctrl.IOQueues(), res.IOPS, res.MBps, res.P50, res.P99, res.IOs, res.Elapsed.Round(time.Millisecond))
			return nil
		}}
	f.register(cmd)
	bs = 4096
	cmd.Flags().StringVar(&rw, "rw", "randread", "randread | read | write | randwrite")
	cmd.Flags().Var(&bs, "bs", "block size per I/O")
	cmd.Flags().IntVar(&qd, "qd", 32, "queue depth")
	cmd.Flags().DurationVar(&duration, "duration", 5*time.Second, "how long to run")
	cmd.Flags().DurationVar(&pollSpin, "poll-spin", 50*time.Microsecond, "poll an empty socket this long before sleeping, as spdk_nvme_perf polls (costs that CPU; 0: sleep at once; 4 KiB randread QD32 against SPDK's nvmf_tgt: 0.90 x spdk_nvme_perf with 50us, 0.6 x without)")
	return cmd
}
