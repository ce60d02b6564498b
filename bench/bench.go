package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/bench/hdr"
	"github.com/kvtier/kvtier/bench/progress"
)

// Store is what bench needs from a kvtier client; the signatures are those of
// kvtier/client. "Already stored" must not be reported as a Put error.
type Store interface {
	Put(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
	GetInto(ctx context.Context, key string, buf []byte) (int, error)
	Exist(ctx context.Context, key string) (bool, error)
	BatchExist(ctx context.Context, keys []string) ([]bool, error)
	BatchGet(ctx context.Context, keys []string) ([][]byte, []error)
	BatchPut(ctx context.Context, keys []string, values [][]byte) []error
}

// BatchGetIntoer is a Store that reads a batch into the caller's buffers
// (the client SDK's BatchGetInto); batch gets use it when present, as
// single gets use GetInto, so the workload measures moving bytes rather
// than allocating them.
type BatchGetIntoer interface {
	BatchGetInto(ctx context.Context, keys []string, bufs [][]byte) ([]int, []error)
}

// TransferCounter is a Store that can say how its transfers travelled
// (the client SDK's engine counters); Run records it in Result.Transport.
type TransferCounter interface {
	// TransferCounts returns cumulative successful transfers by path.
	TransferCounts() (shared, tcp, local uint64)
}

// Workload names.
const (
	OpPut   = "put"
	OpGet   = "get"
	OpMixed = "mixed"
	OpExist = "exist"
)

// Defaults.
const (
	DefaultDuration         = 5 * time.Second
	DefaultMaxInFlightBytes = 256 << 20
	DefaultKeyBudgetBytes   = 256 << 20
	maxGetKeys              = 1024
)

// DefaultSizes are the object sizes measured when Options.Sizes is empty.
var DefaultSizes = []int{64 << 10, 1 << 20, 16 << 20}

// Options configures Run; the zero value measures put and get of the default
// sizes at concurrency 1, batch 1, for DefaultDuration each.
type Options struct {
	Ops         []string      // put | get | mixed | exist; nil means put, get
	Sizes       []int         // object sizes in bytes; nil means DefaultSizes
	Concurrency []int         // parallel callers; nil means 1
	SinkCommand []string      // tcp-process baseline: the receiver's command (StartSink)
	Batch       int           // keys per call (> 1 uses the Batch* calls); 0 means 1
	Duration    time.Duration // per workload; 0 means DefaultDuration
	// MaxInFlightBytes bounds the value bytes held by callers at once (value
	// buffers come from a pool of this many bytes); 0 means 256 MiB.
	MaxInFlightBytes int64
	// KeyBudgetBytes bounds the bytes pre-loaded for get, mixed and exist
	// (at most 1024 keys per size); 0 means 256 MiB.
	KeyBudgetBytes int64
	KeyPrefix      string  // key namespace; "" means "bench/<random>/"
	ReadFraction   float64 // share of gets in mixed; 0 means 0.5
	System         string  // name in results; "" means "kvtier"
	Replicas       int     // copied into results (the Store wrapper applies it)
	Seed           uint64  // key choice for gets; 0 means time-based
	// KeepKeys leaves the objects the run stored; by default Run removes
	// every key under KeyPrefix when it ends, where the Store can
	// (Cleaner).
	KeepKeys bool
	// Beside names a baseline (tcp, tcp-process, tcp-process-cold or
	// tcp-process-store, the last three with SinkCommand) measured in
	// turns with every workload: Rounds rounds, each running the workload and the baseline (same size, as many
	// connections as callers) for Duration/Rounds, in alternating order,
	// so both see the same machine. The workload's Result carries the
	// baseline's rate and the ratios (besideSession says why). Exist
	// workloads, which move no bytes, run without a baseline.
	Beside string
	Rounds int // turns with Beside; 0 means DefaultRounds
}

// Cleaner is a Store that can remove keys by pattern (the client SDK's
// RemoveByRegex). Run removes what it stored when it ends, so a store it
// measured is left as it was found: a run against a live appliance leaves
// no objects behind, and the next run does not start with DRAM full of
// this one's, evicting its own pre-loaded keys while it reads them.
type Cleaner interface {
	RemoveByRegex(ctx context.Context, expr string, force bool) (int, error)
}

// CleanupError is Run's error when the results are complete but the
// removal of the objects it stored did not succeed: refused (a credential
// without the right to remove, say), or done on the master but not
// confirmed by an appliance that died during the run (the error names
// it). The caller reports the results and warns.
type CleanupError struct {
	Prefix string
	Err    error
}

func (e *CleanupError) Error() string {
	return fmt.Sprintf("bench: removing the objects under %q: %v", e.Prefix, e.Err)
}

func (e *CleanupError) Unwrap() error { return e.Err }

// cleanupTimeout bounds Run's removal of what it stored (it runs even
// when ctx was cancelled, by an interrupt say). A variable for tests.
var cleanupTimeout = 30 * time.Second

// Remainer is a Cleaner that can say whether any key under a prefix is
// left (the client SDK's List). A bulk remove skips objects still being
// written, and those whose copy to SSD outlasts its wait (with offload
// immediate, a run's last puts are being copied), so with it Run repeats
// its removal until nothing is left, instead of leaving those behind.
type Remainer interface {
	AnyUnder(ctx context.Context, prefix string) (bool, error)
}

// removeStored removes every key under prefix from cl, repeating while a
// Remainer says some are left (every 50 ms, until ctx ends).
func removeStored(ctx context.Context, cl Cleaner, prefix string) error {
	rem, _ := cl.(Remainer)
	for {
		if _, err := cl.RemoveByRegex(ctx, "^"+regexp.QuoteMeta(prefix), true); err != nil {
			return err
		}
		if rem == nil {
			return nil
		}
		left, err := rem.AnyUnder(ctx, prefix)
		if err != nil || !left {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("objects still being written or copied to SSD when the clean-up's %v ran out: %w", cleanupTimeout, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// RandomKeyPrefix is the key namespace of a run that names none:
// "bench/<random>/".
func RandomKeyPrefix() string {
	return "bench/" + strconv.FormatUint(rand.Uint64()&0xffffffff, 36) + "/"
}

// Validate reports options Run cannot use.
func (o Options) Validate() error {
	for _, op := range o.Ops {
		switch op {
		case OpPut, OpGet, OpMixed, OpExist:
		default:
			return fmt.Errorf("bench: unknown op %q (want put, get, mixed or exist)", op)
		}
	}
	for _, s := range o.Sizes {
		if s <= 0 {
			return fmt.Errorf("bench: size %d must be > 0", s)
		}
	}
	for _, c := range o.Concurrency {
		if c <= 0 {
			return fmt.Errorf("bench: concurrency %d must be > 0", c)
		}
	}
	switch {
	case o.Batch < 0:
		return fmt.Errorf("bench: batch %d is negative", o.Batch)
	case o.Duration < 0:
		return fmt.Errorf("bench: duration %v is negative", o.Duration)
	case o.MaxInFlightBytes < 0 || o.KeyBudgetBytes < 0:
		return fmt.Errorf("bench: byte budgets must not be negative")
	case o.ReadFraction < 0 || o.ReadFraction > 1:
		return fmt.Errorf("bench: read fraction %v outside [0,1]", o.ReadFraction)
	case o.Rounds < 0:
		return fmt.Errorf("bench: rounds %d is negative", o.Rounds)
	case o.Rounds > 0 && o.Beside == "":
		return errors.New("bench: rounds are the turns of a workload measured beside a baseline: give beside too")
	}
	switch o.Beside {
	case "":
	case BaselineTCP, BaselineTCPProcess, BaselineTCPProcessCold, BaselineTCPProcessStore:
		if NeedsSink(o.Beside) && len(o.SinkCommand) == 0 {
			return fmt.Errorf("bench: beside %s needs the sink command", o.Beside)
		}
		d, rounds := o.Duration, o.Rounds
		if d == 0 {
			d = DefaultDuration
		}
		if rounds == 0 {
			rounds = DefaultRounds
		}
		if d/time.Duration(rounds) < minRound {
			return fmt.Errorf("bench: duration %v in %d rounds gives turns under %v: fewer rounds or a longer duration", d, rounds, minRound)
		}
	default:
		return fmt.Errorf("bench: beside %q: want tcp, tcp-process, tcp-process-cold or tcp-process-store", o.Beside)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Ops == nil {
		o.Ops = []string{OpPut, OpGet}
	}
	if o.Sizes == nil {
		o.Sizes = DefaultSizes
	}
	if o.Concurrency == nil {
		o.Concurrency = []int{1}
	}
	if o.Batch == 0 {
		o.Batch = 1
	}
	if o.Duration == 0 {
		o.Duration = DefaultDuration
	}
	if o.MaxInFlightBytes == 0 {
		o.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if o.KeyBudgetBytes == 0 {
		o.KeyBudgetBytes = DefaultKeyBudgetBytes
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = RandomKeyPrefix()
	}
	if o.ReadFraction == 0 {
		o.ReadFraction = 0.5
	}
	if o.System == "" {
		o.System = "kvtier"
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.Beside != "" && o.Rounds == 0 {
		o.Rounds = DefaultRounds
	}
	return o
}

// Result is one measured workload. JSON field names are a stable contract
// (kvtier bench --json prints one Result per line).
type Result struct {
	System       string  `json:"system"` // kvtier | tcp | memcpy | redis | iperf3 | fio
	Op           string  `json:"op"`
	Size         int     `json:"size"` // bytes per object
	Concurrency  int     `json:"concurrency"`
	Batch        int     `json:"batch,omitempty"`
	Replicas     int     `json:"replicas,omitempty"`
	Ops          int64   `json:"ops"`                   // successful operations (keys)
	Errors       int64   `json:"errors"`                // failed operations (keys)
	FirstError   string  `json:"first_error,omitempty"` // the first failure's message
	Seconds      float64 `json:"seconds"`
	OpsPerSec    float64 `json:"ops_per_sec"`
	GBytesPerSec float64 `json:"gbytes_per_sec"` // 10^9 bytes/s of object data
	P50US        float64 `json:"p50_us"`         // per call
	P99US        float64 `json:"p99_us"`
	P999US       float64 `json:"p999_us"`
	// Transport is how kvtier's bytes travelled during the workload: shm
	// (the appliance's memory mapped by the client on the same host), tcp,
	// local (same process), or several joined by "+"; empty for baselines.
	Transport string `json:"transport,omitempty"`
	// Deployment is "cluster" for a workload measured against a master and
	// an appliance in separate processes (make bench's cluster pass, read
	// from a file named *-cluster.jsonl); empty for a standalone.
	Deployment string `json:"deployment,omitempty"`
	Skipped    bool   `json:"skipped,omitempty"`
	Note       string `json:"note,omitempty"`
	// With Options.Beside: the baseline measured in turns with this
	// workload, in how many rounds, its rate and p50 over all its turns,
	// and this workload's rate over it: whole, and the lowest and highest
	// of single rounds (each against the baseline's turn beside it).
	Beside             string  `json:"beside,omitempty"`
	Rounds             int     `json:"rounds,omitempty"`
	BesideGBytesPerSec float64 `json:"beside_gbytes_per_sec,omitempty"`
	BesideP50US        float64 `json:"beside_p50_us,omitempty"`
	VsBeside           float64 `json:"over_beside,omitempty"`
	VsBesideMin        float64 `json:"over_beside_min,omitempty"`
	VsBesideMax        float64 `json:"over_beside_max,omitempty"`
}

func (r *Result) finish(elapsed time.Duration, h *hdr.Histogram) {
	r.Seconds = elapsed.Seconds()
	if r.Seconds > 0 {
		r.OpsPerSec = float64(r.Ops) / r.Seconds
		r.GBytesPerSec = rate(r.Ops, r.Size, elapsed)
	}
	r.P50US = float64(h.Quantile(0.50)) / 1e3
	r.P99US = float64(h.Quantile(0.99)) / 1e3
	r.P999US = float64(h.Quantile(0.999)) / 1e3
}

// bufPool hands out value buffers of one size; its capacity bounds the bytes
// callers hold at once.
type bufPool struct{ ch chan []byte }

func newBufPool(bufBytes int, maxBytes int64, want int) *bufPool {
	n := max(1, min(want, int(maxBytes/int64(bufBytes))))
	p := &bufPool{ch: make(chan []byte, n)}
	for i := 0; i < n; i++ {
		b := make([]byte, bufBytes)
		for j := 0; j < len(b); j += 4096 { // touch every page once, outside the timing
			b[j] = byte(j>>12) | 1
		}
		p.ch <- b
	}
	return p
}

func (p *bufPool) get(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.ch:
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *bufPool) put(b []byte) { p.ch <- b }

// Run measures every (op, size, concurrency) of o against s, in that order.
// A bar is drawn on progress only when it is a terminal. Store errors are
// counted in Result.Errors; Run fails only on bad options, a cancelled ctx or
// a get/exist workload whose keys could not be loaded.
func Run(ctx context.Context, o Options, s Store, progressW io.Writer) (out []Result, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	if cl, ok := s.(Cleaner); ok && !o.KeepKeys {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			defer cancel()
			if cerr := removeStored(cctx, cl, o.KeyPrefix); cerr != nil && err == nil {
				err = &CleanupError{Prefix: o.KeyPrefix, Err: cerr}
			}
		}()
	}
	total := int64(len(o.Ops) * len(o.Sizes) * len(o.Concurrency))
	bar := progress.New(progressW, "bench", total)
	done := int64(0)
	loaded := map[int][]string{} // size -> pre-loaded keys
	// One sequence of put keys for the whole run: a workload reusing an
	// earlier one's keys (still stored until the run ends) would measure
	// OBJECT_ALREADY_EXISTS answers instead of puts.
	var putSeq atomic.Int64
	for _, op := range o.Ops {
		for _, size := range o.Sizes {
			for _, c := range o.Concurrency {
				bar.Set(done, fmt.Sprintf("%s %d B x%d", op, size, c))
				keys := loaded[size]
				if op != OpPut && keys == nil {
					var err error
					if keys, err = preload(ctx, o, s, size, c); err != nil {
						return out, err
					}
					loaded[size] = keys
				}
				r, err := runOne(ctx, o, s, op, size, c, keys, &putSeq)
				if err != nil {
					return out, err
				}
				out = append(out, r)
				done++
			}
		}
	}
	bar.Done(done, "")
	return out, nil
}

// preload puts the keys that get, mixed and exist read.
func preload(ctx context.Context, o Options, s Store, size, conc int) ([]string, error) {
	n := int(o.KeyBudgetBytes / int64(size))
	n = max(min(n, maxGetKeys), 1)
	pool := newBufPool(size, int64(size), 1)
	buf, _ := pool.get(ctx)
	keys := make([]string, 0, n)
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("%sload-%d-%d", o.KeyPrefix, size, i)
		if err := s.Put(ctx, k, buf); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if len(keys) > 0 { // the store is full: read what fits
				break
			}
			return nil, fmt.Errorf("bench: loading keys of %d B: %w", size, err)
		}
		keys = append(keys, k)
	}
	return stillStored(ctx, s, size, keys)
}

// stillStored returns the keys of a preload that are still stored (one
// BatchExist call). In a full store the preload's later puts may evict
// its earlier keys (a 16 MiB put needs a free extent that large, and
// unread objects go first): a get workload over them would measure misses.
func stillStored(ctx context.Context, s Store, size int, keys []string) ([]string, error) {
	there, err := s.BatchExist(ctx, keys)
	if err == nil && len(there) != len(keys) {
		err = fmt.Errorf("%d answers for %d keys", len(there), len(keys))
	}
	if err != nil {
		return nil, fmt.Errorf("bench: checking the loaded keys of %d B: %w", size, err)
	}
	kept := keys[:0:0]
	for i, k := range keys {
		if there[i] {
			kept = append(kept, k)
		}
	}
	if len(kept) == 0 {
		return nil, fmt.Errorf("bench: none of the %d keys of %d B loaded stayed stored (the store evicted them while they were loaded)", len(keys), size)
	}
	return kept, nil
}

// worker state shared by one workload.
type shared struct {
	o     Options
	s     Store
	op    string
	size  int
	keys  []string
	pool  *bufPool
	seq   *atomic.Int64 // the run's put key sequence
	stop  atomic.Bool
	calls atomic.Int64

	errMu    sync.Mutex
	firstErr error // guarded by errMu
}

// noteErr keeps the workload's first error.
func (sh *shared) noteErr(err error) {
	if err == nil {
		return
	}
	sh.errMu.Lock()
	if sh.firstErr == nil {
		sh.firstErr = err
	}
	sh.errMu.Unlock()
}

func runOne(ctx context.Context, o Options, s Store, op string, size, conc int, keys []string, putSeq *atomic.Int64) (r Result, err error) {
	sh := &shared{o: o, s: s, op: op, size: size, keys: keys, seq: putSeq}
	tc, _ := s.(TransferCounter)
	var shm0, tcp0, loc0 uint64
	if tc != nil {
		shm0, tcp0, loc0 = tc.TransferCounts()
	}
	sh.pool = newBufPool(size*o.Batch, o.MaxInFlightBytes, conc)
	var side *besideSession
	rounds := 1
	if o.Beside != "" && op != OpExist { // an exist moves no bytes to compare
		if side, err = startBeside(ctx, o, size, conc); err != nil {
			return Result{}, err
		}
		defer func() {
			if cerr := side.close(); cerr != nil && err == nil {
				err = cerr
			}
		}()
		rounds = o.Rounds
	}
	turn := o.Duration / time.Duration(rounds)
	w := &workers{hists: make([]hdr.Histogram, conc), ok: make([]int64, conc), bad: make([]int64, conc), rngs: make([]*rand.Rand, conc)}
	for i := range w.rngs {
		w.rngs[i] = rand.New(rand.NewPCG(o.Seed, uint64(i)))
	}
	var elapsed time.Duration
	var t turns
	for i := range rounds {
		// Alternate which side goes first, so neither always follows
		// the other's wake-ups.
		var base float64
		if side != nil && i%2 == 1 {
			if base, err = side.round(ctx, turn); err != nil {
				return Result{}, err
			}
		}
		ops0 := w.okOps()
		d := sh.round(ctx, w, turn)
		elapsed += d
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		if side != nil && i%2 == 0 {
			if base, err = side.round(ctx, turn); err != nil {
				return Result{}, err
			}
		}
		t.add(rate(w.okOps()-ops0, size, d), base)
	}
	var h hdr.Histogram
	r = Result{System: o.System, Op: op, Size: size, Concurrency: conc, Batch: o.Batch, Replicas: o.Replicas}
	if tc != nil {
		shm1, tcp1, loc1 := tc.TransferCounts()
		r.Transport = transportName(shm1-shm0, tcp1-tcp0, loc1-loc0)
	}
	for i := range w.hists {
		h.Merge(&w.hists[i])
		r.Ops += w.ok[i]
		r.Errors += w.bad[i]
	}
	if sh.firstErr != nil {
		r.FirstError = sh.firstErr.Error()
	}
	r.finish(elapsed, &h)
	if side != nil {
		side.fill(&r, t, rounds)
	}
	return r, nil
}

// workers is the per-caller state of one workload, kept across its rounds.
type workers struct {
	hists   []hdr.Histogram
	ok, bad []int64
	rngs    []*rand.Rand
}

func (w *workers) okOps() (n int64) {
	for _, v := range w.ok {
		n += v
	}
	return n
}

// round runs one caller per worker for d and returns the time it took.
func (sh *shared) round(ctx context.Context, w *workers, d time.Duration) time.Duration {
	var wg sync.WaitGroup
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sh.stop.Store(false)
	start := time.Now()
	timer := time.AfterFunc(d, func() { sh.stop.Store(true) })
	defer timer.Stop()
	for i := range w.hists {
		wg.Go(func() {
			ok, bad := sh.work(wctx, i, w.rngs[i], &w.hists[i])
			w.ok[i] += ok
			w.bad[i] += bad
		})
	}
	wg.Wait()
	return time.Since(start)
}

// transportName names the paths that carried transfers ("shm+tcp" when the
// client mapped the appliance's memory only part-way through).
func transportName(shm, tcp, local uint64) string {
	var parts []string
	if shm > 0 {
		parts = append(parts, "shm")
	}
	if tcp > 0 {
		parts = append(parts, "tcp")
	}
	if local > 0 {
		parts = append(parts, "local")
	}
	return strings.Join(parts, "+")
}

// work runs calls until the deadline and returns successful and failed keys.
func (sh *shared) work(ctx context.Context, w int, rng *rand.Rand, h *hdr.Histogram) (ok, bad int64) {
	batch := sh.o.Batch
	keys := make([]string, batch)
	vals := make([][]byte, batch)
	// Every caller completes at least one call, however late it is scheduled.
	for first := true; first || (!sh.stop.Load() && ctx.Err() == nil); first = false {
		op := sh.op
		if op == OpMixed {
			op = OpPut
			if rng.Float64() < sh.o.ReadFraction {
				op = OpGet
			}
		}
		if op == OpPut {
			for i := range keys {
				keys[i] = sh.o.KeyPrefix + "put-" + strconv.Itoa(sh.size) + "-" + strconv.FormatInt(sh.seq.Add(1), 10)
			}
		} else {
			for i := range keys {
				keys[i] = sh.keys[rng.IntN(len(sh.keys))]
			}
		}
		var buf []byte
		if op != OpExist {
			var err error
			if buf, err = sh.pool.get(ctx); err != nil {
				return ok, bad
			}
			for i := range vals {
				vals[i] = buf[i*sh.size : (i+1)*sh.size]
			}
		}
		t0 := time.Now()
		n := sh.call(ctx, op, keys, vals)
		if n > 0 { // a failed call's latency (a miss answers fast) is not the store's speed
			h.Record(time.Since(t0).Nanoseconds())
		}
		if buf != nil {
			sh.pool.put(buf)
		}
		ok += int64(n)
		bad += int64(batch - n)
	}
	return ok, bad
}

var errShortRead = errors.New("bench: short read (or an exist that found nothing)")

// Failed reports the first workload in which every operation failed: it
// measured nothing, so the run should not pass for a measurement.
func Failed(results []Result) error {
	for _, r := range results {
		if r.Ops == 0 && r.Errors > 0 {
			return fmt.Errorf("bench: every %s of %d B with %d callers failed (%d errors); first: %s",
				r.Op, r.Size, r.Concurrency, r.Errors, r.FirstError)
		}
	}
	return nil
}

// PartlyFailed describes each workload in which some operations failed
// but not all (Failed reports those): its figures count only the
// operations that succeeded, which the report's table does not show.
func PartlyFailed(results []Result) []string {
	var out []string
	for _, r := range results {
		if r.Errors > 0 && r.Ops > 0 {
			out = append(out, fmt.Sprintf("%s of %d B with %d callers: %d of %d operations failed, its figures count the %d that succeeded; first: %s",
				r.Op, r.Size, r.Concurrency, r.Errors, r.Errors+r.Ops, r.Ops, r.FirstError))
		}
	}
	return out
}

// call performs one operation and returns how many keys succeeded.
func (sh *shared) call(ctx context.Context, op string, keys []string, vals [][]byte) int {
	s := sh.s
	if len(keys) == 1 {
		var err error
		switch op {
		case OpPut:
			err = s.Put(ctx, keys[0], vals[0])
		case OpGet:
			var n int
			if n, err = s.GetInto(ctx, keys[0], vals[0]); err == nil && n != sh.size {
				err = errShortRead
			}
		case OpExist:
			var found bool
			if found, err = s.Exist(ctx, keys[0]); err == nil && !found {
				err = errShortRead
			}
		}
		if err != nil {
			sh.noteErr(err)
			return 0
		}
		return 1
	}
	n := 0
	switch op {
	case OpPut:
		errs := s.BatchPut(ctx, keys, vals)
		for i := range keys {
			if errs == nil || (i < len(errs) && errs[i] == nil) {
				n++
			} else if i < len(errs) {
				sh.noteErr(errs[i])
			}
		}
	case OpGet:
		var got [][]byte
		var errs []error
		if bi, ok := s.(BatchGetIntoer); ok {
			var sizes []int
			sizes, errs = bi.BatchGetInto(ctx, keys, vals)
			got = make([][]byte, len(sizes))
			for i, n := range sizes {
				got[i] = vals[i][:n]
			}
		} else {
			got, errs = s.BatchGet(ctx, keys)
		}
		for i := range keys {
			switch {
			case i < len(got) && len(got[i]) == sh.size && (errs == nil || (i < len(errs) && errs[i] == nil)):
				n++
			case i < len(errs) && errs[i] != nil:
				sh.noteErr(errs[i])
			default:
				sh.noteErr(errShortRead)
			}
		}
	case OpExist:
		found, err := s.BatchExist(ctx, keys)
		sh.noteErr(err)
		for i := range keys {
			if err == nil && i < len(found) && found[i] {
				n++
			}
		}
	}
	return n
}
