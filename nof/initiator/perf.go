package initiator

import (
	"context"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/nvme"
	"github.com/kvtier/kvtier/nof/pdu"
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
	if r, ok, err := perfAsync(ctx, ctrl, cfg, *ns, write, random, slots); ok {
		return r, err
	}
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

// perfAsync runs the load the way spdk_nvme_perf drives SPDK's driver: a
// command for each of QueueDepth slots, spread over the I/O queues, and
// every completion callback (on the queue's receiver goroutine) submits the
// slot's next command at once, so no goroutine is woken per I/O and the
// commands that completions of one socket read queue go out in one write.
// ok is false when a transfer would need splitting (BlockSize beyond the
// controller's largest transfer) or the queues are shallower than
// QueueDepth: Perf then runs its goroutine per slot instead.
func perfAsync(ctx context.Context, ctrl *Controller, cfg PerfConfig, ns Namespace, write, random bool, slots int64) (PerfResult, bool, error) {
	ctrl.mu.RLock()
	queues, maxT, icd, closed := slices.Clone(ctrl.io), ctrl.maxTransfer, ctrl.icd, ctrl.closed
	ctrl.mu.RUnlock()
	if closed || len(queues) == 0 || cfg.BlockSize > maxT {
		return PerfResult{}, false, nil
	}
	perQueue := make([]int, len(queues))
	for s := 0; s < cfg.QueueDepth; s++ {
		perQueue[s%len(queues)]++
	}
	for i, q := range queues {
		if perQueue[i] > len(q.slots) {
			return PerfResult{}, false, nil
		}
	}
	type slot struct {
		q    *queue
		buf  []byte
		rng  *rand.Rand
		t0   time.Time
		lats []time.Duration
	}
	var (
		seq      atomic.Int64
		ios      atomic.Uint64
		inflight atomic.Int64
		stop     atomic.Bool
		errMu    sync.Mutex
		firstErr error
		drained  = make(chan struct{})
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		stop.Store(true)
	}
	start := time.Now()
	ss := make([]*slot, cfg.QueueDepth)
	var issue func(s *slot, inRecv bool)
	issue = func(s *slot, inRecv bool) {
		var n int64
		if random {
			n = s.rng.Int64N(slots)
		} else {
			n = (seq.Add(1) - 1) % slots
		}
		off := n * int64(cfg.BlockSize)
		nlb := cfg.BlockSize / ns.BlockSize
		slba := uint64(off) / uint64(ns.BlockSize)
		var cmd pdu.Command
		var inCapsule, writeBuf, readBuf []byte
		if write {
			cmd = rwCmd(nvme.CmdWrite, cfg.NSID, slba, nlb)
			if cfg.BlockSize <= icd {
				cmd.SGL = pdu.SGL{Len: uint32(cfg.BlockSize), Type: pdu.SGLInCapsule}
				inCapsule = s.buf
			} else {
				cmd.SGL = pdu.SGL{Len: uint32(cfg.BlockSize), Type: pdu.SGLTransport}
				writeBuf = s.buf
			}
		} else {
			cmd = rwCmd(nvme.CmdRead, cfg.NSID, slba, nlb)
			cmd.SGL = pdu.SGL{Len: uint32(cfg.BlockSize), Type: pdu.SGLTransport}
			readBuf = s.buf
		}
		s.t0 = time.Now()
		inflight.Add(1)
		err := s.q.submitAsync(&cmd, inCapsule, writeBuf, readBuf, inRecv, func(cpl pdu.Completion) {
			s.lats = append(s.lats, time.Since(s.t0))
			if err := statusErr(cpl); err != nil {
				fail(err)
			} else {
				ios.Add(1)
			}
			if !stop.Load() {
				issue(s, true)
			}
			if inflight.Add(-1) == 0 {
				close(drained)
			}
		})
		if err != nil {
			fail(err)
			if inflight.Add(-1) == 0 {
				close(drained)
			}
		}
	}
	inflight.Add(1) // the starter's own, so drained cannot close while filling
	for i := range ss {
		s := &slot{q: queues[i%len(queues)], buf: make([]byte, cfg.BlockSize),
			rng: rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))}
		for j := range s.buf {
			s.buf[j] = byte(j + i)
		}
		ss[i] = s
		issue(s, false)
	}
	if inflight.Add(-1) == 0 {
		close(drained)
	}
	// A queue that dies never completes its commands: stop waiting then.
	dead := make(chan struct{}) // closed once any queue died
	var deadOnce sync.Once
	quit := make(chan struct{})
	defer close(quit)
	for _, q := range queues {
		go func() {
			select {
			case <-q.recvDone:
				deadOnce.Do(func() { close(dead) })
			case <-quit:
			}
		}()
	}
	timer := time.NewTimer(cfg.Duration)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		fail(ctx.Err())
	case <-drained: // every slot failed
	case <-dead:
		fail(transportErr(net.ErrClosed))
	}
	elapsed := time.Since(start)
	n := ios.Load()
	stop.Store(true)
	select {
	case <-drained:
	case <-dead:
		fail(transportErr(net.ErrClosed))
	case <-time.After(30 * time.Second):
		fail(kverr.New(kverr.TransferFail, "", "nvme perf: commands still outstanding 30 s after the run"))
	}
	errMu.Lock()
	err := firstErr
	errMu.Unlock()
	if err != nil {
		return PerfResult{}, true, err
	}
	var all []time.Duration
	for _, s := range ss {
		all = append(all, s.lats...)
	}
	slices.Sort(all)
	r := PerfResult{RW: cfg.RW, BlockSize: cfg.BlockSize, IOs: n, Elapsed: elapsed}
	r.Bytes = r.IOs * uint64(cfg.BlockSize)
	r.IOPS = float64(r.IOs) / elapsed.Seconds()
	r.MBps = float64(r.Bytes) / elapsed.Seconds() / 1e6
	if len(all) > 0 {
		r.P50 = all[len(all)/2]
		r.P99 = all[len(all)*99/100]
	}
	return r, true, nil
}
