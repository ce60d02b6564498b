package initiator

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// PerfConfig describes a load run. Zero values mean the defaults in
// brackets.
type PerfConfig struct {
	RW         string        // "randread" | "read" | "write" | "randwrite" [randread]
	BlockSize  int           // bytes per I/O, a multiple of the LBA size [4096]
	QueueDepth int           // outstanding I/Os [32]
	Duration   time.Duration // [5s]
	NSID       uint32        // [first active namespace]
}

// Validate checks the fields that do not depend on the namespace.
func (c *PerfConfig) Validate() error {
	switch c.RW {
	case "", "randread", "read", "write", "randwrite":
	default:
		return kverr.New(kverr.InvalidParams, c.RW, "rw must be randread, read, write or randwrite")
	}
	if c.BlockSize < 0 || c.QueueDepth < 0 || c.QueueDepth > 4096 || c.Duration < 0 {
		return kverr.New(kverr.InvalidParams, "", "negative block size or duration, or queue depth beyond 4096")
	}
	return nil
}

// PerfResult summarises a run.
type PerfResult struct {
	RW        string
	BlockSize int
	IOs       uint64
	Bytes     uint64
	Elapsed   time.Duration
	IOPS      float64
	MBps      float64 // 10^6 bytes per second
	P50, P99  time.Duration
}

// Perf drives ctrl with cfg and reports IOPS, throughput and latency
// percentiles (used by `kvtier nvme perf`).
func Perf(ctx context.Context, ctrl *Controller, cfg PerfConfig) (PerfResult, error) {
	if err := cfg.Validate(); err != nil {
		return PerfResult{}, err
	}
	if cfg.RW == "" {
		cfg.RW = "randread"
	}
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 4096
	}
	if cfg.QueueDepth == 0 {
		cfg.QueueDepth = 32
	}
	if cfg.Duration == 0 {
		cfg.Duration = 5 * time.Second
	}
	write, random := false, false
	switch cfg.RW {
	case "randread":
		random = true
	case "read":
	case "write":
		write = true
	case "randwrite":
		write, random = true, true
	default:
		return PerfResult{}, kverr.New(kverr.InvalidParams, cfg.RW, "rw must be randread, read, write or randwrite")
	}
	if cfg.NSID == 0 {
		nss := ctrl.Namespaces()
		if len(nss) == 0 {
			return PerfResult{}, kverr.New(kverr.ObjectNotFound, "", "controller has no namespace")
		}
		cfg.NSID = nss[0].NSID
	}
	var ns *Namespace
	for _, n := range ctrl.Namespaces() {
		if n.NSID == cfg.NSID {
			ns = &n
		}
	}
	if ns == nil {
		return PerfResult{}, kverr.New(kverr.ObjectNotFound, "", "no namespace %d", cfg.NSID)
	}
	if cfg.QueueDepth < 1 || cfg.BlockSize <= 0 || cfg.BlockSize%ns.BlockSize != 0 || int64(cfg.BlockSize) > ns.Size() {
		return PerfResult{}, kverr.New(kverr.InvalidParams, "", "block size %d / queue depth %d invalid for namespace block %d", cfg.BlockSize, cfg.QueueDepth, ns.BlockSize)
	}
	slots := ns.Size() / int64(cfg.BlockSize)
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var seq atomic.Int64
	var ios atomic.Uint64
	lats := make([][]time.Duration, cfg.QueueDepth)
	errs := make([]error, cfg.QueueDepth)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < cfg.QueueDepth; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			buf := make([]byte, cfg.BlockSize)
			for i := range buf {
				buf[i] = byte(i + w)
			}
			for runCtx.Err() == nil {
				var slot int64
				if random {
					slot = rng.Int64N(slots)
				} else {
					slot = (seq.Add(1) - 1) % slots
				}
				t0 := time.Now()
				var err error
				if write {
					err = ctrl.WriteAt(runCtx, cfg.NSID, buf, slot*int64(cfg.BlockSize))
				} else {
					err = ctrl.ReadAt(runCtx, cfg.NSID, buf, slot*int64(cfg.BlockSize))
				}
				if err != nil {
					if runCtx.Err() == nil {
						errs[w] = err
						cancel()
					}
					return
				}
				lats[w] = append(lats[w], time.Since(t0))
				ios.Add(1)
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return PerfResult{}, err
		}
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	r := PerfResult{RW: cfg.RW, BlockSize: cfg.BlockSize, IOs: ios.Load(), Elapsed: elapsed}
	r.Bytes = r.IOs * uint64(cfg.BlockSize)
	r.IOPS = float64(r.IOs) / elapsed.Seconds()
	r.MBps = float64(r.Bytes) / elapsed.Seconds() / 1e6
	if len(all) > 0 {
		r.P50 = all[len(all)/2]
		r.P99 = all[len(all)*99/100]
	}
	return r, nil
}
