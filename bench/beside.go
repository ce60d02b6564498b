package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/kvtier/kvtier/bench/hdr"
)

// DefaultRounds is how many turns a workload measured beside a baseline
// (Options.Beside) takes when Options.Rounds is 0.
const DefaultRounds = 4

// minRound is the shortest turn Validate accepts: below it a turn is mostly
// the callers starting and stopping.
const minRound = 100 * time.Millisecond

// besideSession is the baseline of one workload measured beside kvtier:
// its receiver (a goroutine set of this process for tcp, a second process
// for tcp-process) and its connections stay up across the rounds, as
// kvtier's own connections do, so every turn measures sending, not
// dialling.
//
// Why turns: on a shared machine the rate of the same loopback transfer
// moves by half or more from one minute to the next (steal, neighbours,
// TCP's congestion state), so a kvtier figure and a baseline measured
// minutes apart give a ratio that is mostly noise. Alternated in short
// turns, both see the same mix of machine states.
type besideSession struct {
	name    string
	senders *tcpSenders
	stop    func() error
	hist    hdr.Histogram
	ops     int64
	elapsed time.Duration
	size    int
}

func startBeside(ctx context.Context, o Options, size, conc int) (*besideSession, error) {
	var addr string
	var stop func() error
	switch o.Beside {
	case BaselineTCP:
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("bench: listen: %w", err)
		}
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		served := make(chan struct{})
		go func() { defer close(served); _ = ServeSink(sctx, ln, size) }()
		addr, stop = ln.Addr().String(), func() error { cancel(); <-served; return nil }
	case BaselineTCPProcess, BaselineTCPProcessCold, BaselineTCPProcessStore:
		var err error
		if addr, stop, err = startSink(ctx, o.SinkCommand, size, o.Beside == BaselineTCPProcessStore); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("bench: cannot measure beside %q (want tcp, tcp-process, tcp-process-cold or tcp-process-store)", o.Beside)
	}
	var cold []byte
	if o.Beside == BaselineTCPProcessCold || o.Beside == BaselineTCPProcessStore {
		cold = coldWorkingSet(size)
	}
	senders, err := dialSenders(ctx, addr, size, conc, cold)
	if err != nil {
		return nil, errors.Join(err, stop())
	}
	return &besideSession{name: o.Beside, senders: senders, stop: stop, size: size}, nil
}

// round sends for d and returns the turn's rate in 10^9 B/s. A connection
// that failed fails the turn: the rate of the survivors would be a lower
// baseline and flatter kvtier's ratio.
func (b *besideSession) round(ctx context.Context, d time.Duration) (float64, error) {
	ops, failed, elapsed, err := b.senders.run(ctx, d, &b.hist)
	if err != nil {
		return 0, err
	}
	if failed > 0 {
		return 0, fmt.Errorf("bench: %s beside the workload: %d of %d connections failed during a turn", b.name, failed, len(b.senders.conns))
	}
	b.ops += ops
	b.elapsed += elapsed
	return rate(ops, b.size, elapsed), nil
}

func (b *besideSession) close() error {
	b.senders.close()
	return b.stop()
}

// rate is ops of size bytes in elapsed, in 10^9 B/s (0 for no time).
func rate(ops int64, size int, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(ops) * float64(size) / elapsed.Seconds() / 1e9
}

// turns gathers the per-round ratios of one workload.
type turns struct {
	n        int
	min, max float64
}

func (t *turns) add(kv, base float64) {
	if base <= 0 {
		return
	}
	q := kv / base
	if t.n == 0 || q < t.min {
		t.min = q
	}
	if t.n == 0 || q > t.max {
		t.max = q
	}
	t.n++
}

// fill records the baseline's figures in r (kvtier's already finished).
func (b *besideSession) fill(r *Result, t turns, rounds int) {
	r.Beside, r.Rounds = b.name, rounds
	r.BesideGBytesPerSec = rate(b.ops, b.size, b.elapsed)
	r.BesideP50US = float64(b.hist.Quantile(0.50)) / 1e3
	if r.BesideGBytesPerSec > 0 {
		r.VsBeside = r.GBytesPerSec / r.BesideGBytesPerSec
	}
	r.VsBesideMin, r.VsBesideMax = t.min, t.max
}
