// Command ktgt runs kvtier's NVMe/TCP target (package nof/target) alone,
// with one DRAM or file namespace, so that SPDK's tools (spdk_nvme_perf)
// can measure it beside SPDK's own nvmf_tgt (see ../run.sh). It prints
// "ready ADDR NQN" once listening and serves until SIGINT or SIGTERM, then
// prints the target's transport counters.
//
//	ktgt -addr 127.0.0.1:4420 -mem 256MiB
//	ktgt -addr 127.0.0.1:4420 -file /tmp/ns.img -size 1GiB
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kvtier/kvtier/nof/auth"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/target"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:4420", "listen address")
	nqn := flag.String("nqn", "nqn.2016-06.io.spdk:cnode1", "subsystem NQN")
	mem := flag.String("mem", "", "DRAM namespace of this size (e.g. 256MiB)")
	file := flag.String("file", "", "file namespace at this path")
	size := flag.String("size", "", "with -file: create or extend the file to this size")
	buffered := flag.Bool("buffered", false, "with -file: no O_DIRECT")
	bs := flag.Int("bs", 4096, "LBA size (512 or 4096; run.sh gives SPDK's bdevs the same)")
	c2h := flag.Bool("c2h-success", true, "complete reads with C2HData SUCCESS (as SPDK's target does)")
	flag.DurationVar(&pollSpin, "poll-spin", 50*time.Microsecond, "poll an empty socket this long before sleeping (target.Config.PollSpin; the appliance's --nvme-poll-spin default)")
	prof := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.StringVar(&hostKey, "host-key", "", "DH-HMAC-CHAP: HOSTNQN=DHHC-1:... or HOSTNQN=@FILE: only that host, authenticated")
	flag.StringVar(&ctrlKey, "ctrl-key", "", "DH-HMAC-CHAP controller secret for -host-key's host (bidirectional): DHHC-1:... or @FILE")
	flag.Parse()
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ktgt:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if err := run(*addr, *nqn, *mem, *file, *size, *buffered, *bs, *c2h); err != nil {
		fmt.Fprintln(os.Stderr, "ktgt:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

var hostKey, ctrlKey string

var pollSpin time.Duration

func parseSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if strings.HasSuffix(s, u.suf) {
			s, mult = strings.TrimSuffix(s, u.suf), u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("size %q: want a positive number with an optional KiB, MiB or GiB suffix", s)
	}
	return n * mult, nil
}

func run(addr, nqn, mem, file, size string, buffered bool, bs int, c2h bool) error {
	var ns namespace.Namespace
	switch {
	case mem != "" && file != "":
		return fmt.Errorf("give -mem or -file, not both")
	case mem != "":
		n, err := parseSize(mem)
		if err != nil {
			return err
		}
		m, err := namespace.NewMemory(make([]byte, n), bs)
		if err != nil {
			return err
		}
		ns = m
	case file != "":
		var n int64
		if size != "" {
			var err error
			if n, err = parseSize(size); err != nil {
				return err
			}
		}
		f, err := namespace.OpenFile(file, namespace.FileConfig{Size: n, BlockSize: bs, Buffered: buffered})
		if err != nil {
			return err
		}
		defer f.Close()
		ns = f
	default:
		return fmt.Errorf("give -mem SIZE or -file PATH")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tg, err := target.New(target.Config{C2HSuccess: c2h, Logger: log, PollSpin: pollSpin})
	if err != nil {
		return err
	}
	defer tg.Close()
	sub := target.Subsystem{NQN: nqn, Namespaces: []namespace.Namespace{ns}}
	if hostKey != "" {
		host, val, ok := strings.Cut(hostKey, "=")
		sec, err := auth.LoadSecret(val)
		if !ok || err != nil {
			return fmt.Errorf("-host-key %q: want HOSTNQN=SECRET: %v", host, err)
		}
		sub.HostSecrets = map[string]*auth.Secret{host: sec}
		if ctrlKey != "" {
			cs, err := auth.LoadSecret(ctrlKey)
			if err != nil {
				return fmt.Errorf("-ctrl-key: %v", err)
			}
			sub.CtrlSecrets = map[string]*auth.Secret{host: cs}
		}
	}
	if err := tg.AddSubsystem(sub); err != nil {
		return err
	}
	la, err := tg.Listen(addr)
	if err != nil {
		return err
	}
	fmt.Printf("ready %s %s\n", la, nqn)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	st := tg.Stats()
	var ops uint64
	for _, s := range st.Subsystems {
		for _, n := range s.Namespaces {
			ops += n.ReadOps + n.WriteOps
		}
	}
	fmt.Printf("stats ops=%d read_calls=%d write_calls=%d\n", ops, st.Transport.ReadCalls, st.Transport.WriteCalls)
	return nil
}
