package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/bench"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/dram"
	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/replay"
)

// store adapts the client SDK to the bench and replay Store interfaces,
// applying the replica count to every put.
type store struct {
	*client.Client
	replicas int
}

// warmUp puts (and removes) a small object until the client has mapped the
// shared memory of an appliance on this host, if there is one (at most 2 s),
// so the first timed operations do not go over TCP while the mapping is
// being set up.
func warmUp(ctx context.Context, c *client.Client, key string) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		if err := c.Put(ctx, key, []byte("warm-up")); err != nil {
			return // the workloads will report it
		}
		_ = c.Remove(ctx, key, true)
		if !c.Engine().SharedPending() || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// AnyUnder reports whether any object's key starts with prefix
// (bench.Remainer: the run's clean-up repeats until none is left).
func (s store) AnyUnder(ctx context.Context, prefix string) (bool, error) {
	objs, _, err := s.Client.List(ctx, prefix, "", 1)
	return len(objs) > 0, err
}

// TransferCounts reports the client engine's transfers by path (bench).
func (s store) TransferCounts() (shared, tcp, local uint64) {
	st := s.Client.Engine().Stats()
	return st.SharedRequests, st.TCPRequests, st.LocalRequests
}

func (s store) Put(ctx context.Context, key string, value []byte) error {
	return s.Client.Put(ctx, key, value, client.WithReplicas(s.replicas))
}

func (s store) BatchPut(ctx context.Context, keys []string, values [][]byte) []error {
	return s.Client.BatchPut(ctx, keys, values, client.WithReplicas(s.replicas))
}

var (
	_ bench.Store  = store{}
	_ replay.Store = store{}
)

// localCluster is a master and an appliance started in this process for
// `bench` and `replay` when no --master is given.
type localCluster struct {
	rm *runningMaster
	a  *appliance.Appliance
}

func startLocal(ctx context.Context, dramBytes uint64, mf masterFlags) (*localCluster, error) {
	log := slog.New(slog.DiscardHandler)
	mf.grpcAddr, mf.httpAddr = "127.0.0.1:0", "127.0.0.1:0"
	rm, err := startMaster(&mf, log)
	if err != nil {
		return nil, err
	}
	a, err := appliance.Start(ctx, appliance.Config{Name: "local", MasterAddr: rm.grpcAddr.String(), DRAM: dramBytes,
		Hugepages: dram.HugepageAuto, Logger: log, PutMaster: rm.ms,
		DramRecords: inprocDramRecords(rm.m)})
	if err != nil {
		rm.stop()
		return nil, err
	}
	return &localCluster{rm: rm, a: a}, nil
}

func (l *localCluster) stop() {
	_ = l.a.Close(context.Background())
	l.rm.stop()
}

func defaultMasterFlags() masterFlags {
	cmd := &cobra.Command{}
	var f masterFlags
	f.register(cmd, false)
	f.offload = "off"
	return f
}

func parseSizes(list []string) ([]int, error) {
	var out []int
	for _, s := range list {
		n, err := parseSize(s)
		if err != nil {
			return nil, err
		}
		if n == 0 || n > 1<<30 {
			return nil, fmt.Errorf("size %s: want 1 byte to 1GiB", s)
		}
		out = append(out, int(n))
	}
	return out, nil
}

func newBenchCmd() *cobra.Command {
	var master, report, baseline, beside string
	var ops, sizes []string
	var conc []int
	var batch, replicas, rounds int
	var duration time.Duration
	var jsonOut, shm, directPut, keepKeys bool
	var rdmaDevice string
	var cpuProfile string
	var tcpSink int
	var sinkCommand, sinkListen string
	var sinkLands bool
	var sec clientSecurityFlags
	dramSize := sizeValue(2 << 30)
	cmd := &cobra.Command{
		Use:   "bench [--master ADDR] [--op put|get|mixed|exist] [--size 64KiB,1MiB,16MiB]",
		Short: "Measure put/get/exist throughput and latency (against --master, or a store it starts itself)",
		Long: `Measure kvtier: one workload per op, size and concurrency, with p50/p99/p999 latency.
Without --master it starts a master and an appliance in this process (DRAM --dram, no SSD).
--baseline tcp|memcpy measures the physical limits instead; --beside tcp-process measures
raw TCP in turns with every workload, for a ratio both sides earned on the same machine
state; --report DIR turns the raw results of a 'make bench' run into results.md,
results.json and throughput.svg.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if report != "" {
				return bench.Report(report)
			}
			if cmd.Flags().Changed("tcp-sink") {
				ctx, cancel := signalContext()
				defer cancel()
				// Landing is asked for in the environment by a sink
				// command of this host (bench.StartSink), or by the
				// flag where the command crosses to another host.
				lands := sinkLands || os.Getenv(bench.SinkLandsEnv) == "1"
				return bench.RunSinkOn(ctx, sinkListen, tcpSink, lands, os.Stdin, os.Stdout)
			}
			stopProfile, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			sz, err := parseSizes(sizes)
			if err != nil {
				return fmt.Errorf("--size: %w", err)
			}
			o := bench.Options{Ops: ops, Sizes: sz, Concurrency: conc, Batch: batch, Duration: duration, Replicas: replicas, KeepKeys: keepKeys,
				Beside: beside, Rounds: rounds}
			if baseline != "" && beside != "" {
				return errors.New("--beside measures a baseline in turns with kvtier's workloads; --baseline measures one alone: give one of them")
			}
			switch needs := bench.NeedsSink(baseline) || bench.NeedsSink(beside); {
			case sinkCommand != "" && !needs:
				return errors.New("--sink-command starts the receiver of the tcp-process baselines: give --beside or --baseline tcp-process, tcp-process-cold or tcp-process-store")
			case sinkCommand != "":
				o.SinkCommand = strings.Fields(sinkCommand)
			case needs:
				if o.SinkCommand, err = bench.SelfSink(); err != nil {
					return err
				}
			}
			if err := o.Validate(); err != nil {
				return err
			}
			ctx, cancel := signalContext()
			defer cancel()
			var progress io.Writer = os.Stderr
			var results []bench.Result
			switch {
			case baseline != "":
				results, err = bench.RunBaseline(ctx, baseline, o)
			default:
				addr := master
				if addr == "" {
					l, err := startLocal(ctx, uint64(dramSize), defaultMasterFlags())
					if err != nil {
						return err
					}
					defer l.stop()
					addr = l.rm.grpcAddr.String()
				}
				token, tc, err := sec.load()
				if err != nil {
					return err
				}
				c, err := client.New(ctx, client.Config{MasterAddr: addr, Transfer: transfer.Config{DisableSharedMemory: !shm, RDMADevice: rdmaDevice}, Token: token, TLS: tc,
					DisableDirectPut: !directPut})
				if err != nil {
					return err
				}
				defer c.Close()
				// Under the run's prefix, so the run's clean-up also
				// takes a warm-up object the master would not remove yet
				// (still being copied to SSD).
				if o.KeyPrefix == "" {
					o.KeyPrefix = bench.RandomKeyPrefix()
				}
				warmUp(ctx, c, o.KeyPrefix+"warm-up")
				results, err = bench.Run(ctx, o, store{c, replicas}, progress)
				if ce := (*bench.CleanupError)(nil); errors.As(err, &ce) {
					fmt.Fprintln(os.Stderr, "warning:", err)
					err = nil
				}
				if err != nil {
					return err
				}
			}
			if err != nil {
				return err
			}
			if jsonOut {
				err = bench.WriteJSONLines(os.Stdout, results)
			} else {
				err = bench.WriteMarkdown(os.Stdout, results)
			}
			for _, w := range bench.PartlyFailed(results) {
				fmt.Fprintln(os.Stderr, "warning:", w)
			}
			return errors.Join(err, bench.Failed(results))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&master, "master", os.Getenv("KVTIER_MASTER"), "master gRPC address (default: start a store in this process)")
	fs.StringSliceVar(&ops, "op", []string{"put", "get"}, "workloads: put, get, mixed, exist")
	fs.StringSliceVar(&sizes, "size", []string{"64KiB", "1MiB", "16MiB"}, "object sizes")
	fs.IntSliceVar(&conc, "concurrency", []int{1}, "parallel callers (a list runs each)")
	fs.IntVar(&batch, "batch", 1, "keys per call (> 1 uses the batch calls)")
	fs.IntVar(&replicas, "replicas", 1, "replicas per put")
	fs.DurationVar(&duration, "duration", 5*time.Second, "time per workload")
	fs.BoolVar(&jsonOut, "json", false, "one JSON object per line and workload")
	fs.StringVar(&baseline, "baseline", "", "measure a baseline instead: tcp | tcp-process (receiver in another process) | tcp-process-cold (that, sending from 256 MiB in DRAM, as gets read objects nobody touched lately) | tcp-process-store (that, the receiver also landing each message in 256 MiB of DRAM, as an appliance stores puts) | memcpy")
	fs.StringVar(&beside, "beside", "", "measure a baseline in turns with every workload: tcp | tcp-process | tcp-process-cold | tcp-process-store (same size, a connection per caller; the results carry its rate and kvtier's ratio to it)")
	fs.IntVar(&rounds, "rounds", 0, "turns of each workload and its --beside baseline, each duration/rounds long (default 4)")
	fs.IntVar(&tcpSink, "tcp-sink", 0, "serve as the receiving process of --baseline tcp-process for messages of this many bytes")
	_ = fs.MarkHidden("tcp-sink")
	fs.StringVar(&sinkCommand, "sink-command", "", "`CMD` starts the receiver of the tcp-process baselines (split at spaces, the message size appended); it must run kvtier bench --tcp-sink-listen HOST:0 --tcp-sink (add --tcp-sink-lands for tcp-process-store when the command crosses to another host), e.g. \"ssh box kvtier bench --tcp-sink-listen 10.0.0.5:0 --tcp-sink\", so raw TCP crosses the same network as the appliance's transfers (default: this program, on loopback)")
	fs.StringVar(&sinkListen, "tcp-sink-listen", bench.DefaultSinkListen, "where the receiver of a tcp-process baseline (--tcp-sink) listens: an address the sender dials, port 0 for a free one")
	fs.BoolVar(&sinkLands, "tcp-sink-lands", false, "the receiver of a tcp-process baseline (--tcp-sink) lands each message in a working set in DRAM, as tcp-process-store needs")
	fs.StringVar(&report, "report", "", "write the report of a results directory (make bench)")
	fs.Var(&dramSize, "dram", "DRAM of the store started without --master")
	fs.BoolVar(&shm, "shm", true, "map the memory of appliances on this host (false: every transfer over TCP)")
	fs.BoolVar(&keepKeys, "keep", false, "leave the objects the run stored (default: removed when it ends, under the run's key prefix)")
	fs.BoolVar(&directPut, "direct-put", true, "puts over TCP go to the appliance in one frame (false: PutStart, write, PutEnd)")
	fs.StringVar(&rdmaDevice, "rdma-device", "auto", rdmaDeviceHelp)
	sec.register(cmd)
	registerCPUProfile(cmd, &cpuProfile)
	return cmd
}

func parseIntList(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive whole number", p)
		}
		out = append(out, n)
	}
	return out, nil
}

func newReplayCmd() *cobra.Command {
	var master, capacities, policies, chart string
	var blockBytes int
	var speed float64
	var simulate, jsonOut bool
	mf := defaultMasterFlags()
	cmd := &cobra.Command{
		Use:   "replay TRACE.jsonl [--master ADDR | --simulate] [--capacity-blocks 1000,5000]",
		Short: "Replay a Mooncake FAST'25 request trace and report prefix-hit rates",
		Long: `Replays a request trace (JSON lines with timestamp, input_length, output_length,
hash_ids; one id per 512-token block): for each request it finds the longest prefix
of its blocks present (batch Exist), reads them, and puts the missing ones.

--master ADDR replays against a running cluster. Without it, each --capacity-blocks
value gets a fresh store started in this process with DRAM for that many blocks.
--simulate applies the same policies in memory (no store), for fast sweeps.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			trace, err := replay.LoadTrace(args[0])
			if err != nil {
				return err
			}
			caps, err := parseIntList(capacities)
			if err != nil {
				return fmt.Errorf("--capacity-blocks: %w", err)
			}
			pols := strings.Split(policies, ",")
			ctx, cancel := signalContext()
			defer cancel()
			if simulate {
				sw, err := replay.Sweep(trace, caps, pols, replay.SimOptions{Speed: speed, BlockBytes: blockBytes,
					Lease: replay.LeasePolicy{LeaseTTL: mf.leaseTTL, FrequencyBonus: mf.frequencyBonus,
						FrequencyMaxBonus: mf.frequencyMaxBonus, History: mf.evictionHistory}})
				if err != nil {
					return err
				}
				if chart != "" {
					if err := writeFileWith(chart, sw.WriteSVG); err != nil {
						return err
					}
				}
				if jsonOut {
					return sw.WriteJSON(os.Stdout)
				}
				return sw.WriteMarkdown(os.Stdout)
			}
			if master != "" {
				caps = caps[:1]
			} else {
				speed = localReplayTime(cmd, speed, &mf)
			}
			var reports []*replay.Report
			for _, capBlocks := range caps {
				for _, pol := range pols {
					rep, err := replayOnce(ctx, trace, master, capBlocks, pol, blockBytes, speed, mf)
					if err != nil {
						return err
					}
					reports = append(reports, rep)
					if !jsonOut {
						if err := rep.WriteText(os.Stdout); err != nil {
							return err
						}
					}
				}
			}
			if jsonOut {
				for _, r := range reports {
					if err := r.WriteJSON(os.Stdout); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&master, "master", "", "replay against this cluster (default: a store per capacity started in this process)")
	fs.BoolVar(&simulate, "simulate", false, "pure in-memory simulation of the same policies (no store)")
	fs.StringVar(&capacities, "capacity-blocks", "5000", "DRAM capacities in blocks (comma-separated) to sweep")
	fs.StringVar(&policies, "policy", "frequency", "lease policies to compare (comma-separated: plain, frequency; --simulate also lru)")
	fs.IntVar(&blockBytes, "block-bytes", 4096, "payload bytes per 512-token block")
	fs.Float64Var(&speed, "speed", 0, "trace time / wall time (0: as fast as possible; a store started here replays at 100 unless this is given)")
	fs.BoolVar(&jsonOut, "json", false, "JSON output")
	fs.StringVar(&chart, "chart", "", "with --simulate: write an SVG chart of hit rate against capacity to this file")
	fs.DurationVar(&mf.leaseTTL, "lease-ttl", mf.leaseTTL, "read lease of the store started here (scale with --speed)")
	fs.DurationVar(&mf.frequencyBonus, "frequency-bonus", mf.frequencyBonus, "frequency policy bonus per read (scale with --speed)")
	fs.IntVar(&mf.evictionHistory, "eviction-history", 0, "frequency policy: evicted keys remembered by the store started here (0: 4x its DRAM objects)")
	fs.DurationVar(&mf.frequencyMaxBonus, "frequency-max-bonus", mf.frequencyMaxBonus, "frequency policy bonus cap (scale with --speed)")
	return cmd
}

// localReplaySpeed is the speed of a replay through a store started here
// when --speed is not given: fast enough (the conversation trace's hour in
// 36 s) and slow enough for the store to keep up, so the store's own
// durations, scaled by it, follow the trace's time.
const localReplaySpeed = 100

// localReplayTime returns the speed of a replay through a store started
// here and scales that store's durations (lease TTL, frequency bonuses)
// to it where they were not given: they run on wall time, and at speed S
// the trace's time passes S times faster. As fast as possible (--speed 0)
// nothing can be scaled, and the hit rates then are not the trace's (the
// lease alone outlives most of it): said on standard error.
func localReplayTime(cmd *cobra.Command, speed float64, mf *masterFlags) float64 {
	if !cmd.Flags().Changed("speed") {
		speed = localReplaySpeed
	}
	if speed == 0 {
		fmt.Fprintln(os.Stderr, "kvtier replay: --speed 0: the store's lease and frequency bonuses run on wall time while the trace's time races ahead, so its hit rates are not the trace's (give a speed, e.g. 100, to scale them)")
		return speed
	}
	for _, d := range []struct {
		flag string
		v    *time.Duration
	}{{"lease-ttl", &mf.leaseTTL}, {"frequency-bonus", &mf.frequencyBonus}, {"frequency-max-bonus", &mf.frequencyMaxBonus}} {
		if !cmd.Flags().Changed(d.flag) {
			*d.v = time.Duration(float64(*d.v) / speed)
		}
	}
	fmt.Fprintf(os.Stderr, "kvtier replay: speed %g (trace time / wall time); the store's lease TTL %v, frequency bonus %v, cap %v\n",
		speed, mf.leaseTTL, mf.frequencyBonus, mf.frequencyMaxBonus)
	return speed
}

// replayOnce replays the trace against master, or against a fresh local
// store sized for capBlocks blocks.
func replayOnce(ctx context.Context, trace *replay.Trace, master string, capBlocks int, policy string, blockBytes int, speed float64, mf masterFlags) (*replay.Report, error) {
	addr := master
	if addr == "" {
		mf.leasePolicy = policy
		// The master allocates in 64-byte units: size DRAM in those.
		per := (uint64(blockBytes) + 63) / 64 * 64
		l, err := startLocal(ctx, uint64(capBlocks)*per, mf)
		if err != nil {
			return nil, err
		}
		defer l.stop()
		addr = l.rm.grpcAddr.String()
	}
	cfg := client.Config{MasterAddr: addr}
	if master != "" { // a running cluster: KVTIER_TOKEN and KVTIER_TLS_CA as for the other verbs
		tok, err := auth.ClientToken("")
		if err != nil {
			return nil, err
		}
		tc, err := auth.ClientTLS("")
		if err != nil {
			return nil, err
		}
		cfg.Token, cfg.TLS = tok, tc
	}
	c, err := client.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	evictions := func(ctx context.Context) (int64, error) {
		st, err := c.Master().Stats(ctx, &kvtierpb.Empty{})
		if err != nil {
			return 0, err
		}
		return int64(st.Counters["evictions"]), nil
	}
	return replay.Run(ctx, trace, replay.Options{BlockBytes: blockBytes, Speed: speed, Evictions: evictions,
		Label: policy, CapacityBlocks: capBlocks}, store{c, 1}, os.Stderr)
}

func writeFileWith(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
