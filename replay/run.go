package replay

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/kvtier/kvtier/bench/hdr"
	"github.com/kvtier/kvtier/bench/progress"
)

// Store is what a replay needs from a kvtier client (the same signatures as
// kvtier/client). "Already stored" must not be reported as a Put error.
type Store interface {
	BatchExist(ctx context.Context, keys []string) ([]bool, error)
	BatchGet(ctx context.Context, keys []string) ([][]byte, []error)
	BatchPut(ctx context.Context, keys []string, values [][]byte) []error
}

// Options configures Run. The zero value replays as fast as possible with
// DefaultBlockBytes per block.
type Options struct {
	BlockBytes int           // payload bytes per block; 0 means DefaultBlockBytes
	Speed      float64       // trace time / wall time; 0 means as fast as possible
	Window     time.Duration // report window in trace time; 0 means DefaultWindow, < 0 none
	KeyPrefix  string        // key = KeyPrefix + decimal block id; "" means "blk-"
	// Evictions, when set, returns the store's cumulative eviction count; it
	// is sampled at the start, at every window boundary and at the end.
	Evictions func(ctx context.Context) (int64, error)
	// Label names the run in the report (e.g. the policy under test).
	Label string
	// CapacityBlocks is copied into the report (the store's DRAM size in blocks).
	CapacityBlocks int
	// BeforeRequest, when set, is called before each request is replayed
	// (e.g. to advance a fake clock to the record's trace time).
	BeforeRequest func(i int, rec *Record)
}

// Validate reports options Run cannot use.
func (o Options) Validate() error {
	switch {
	case o.BlockBytes < 0:
		return fmt.Errorf("block bytes %d is negative", o.BlockBytes)
	case o.Speed < 0:
		return fmt.Errorf("speed %v is negative", o.Speed)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.BlockBytes == 0 {
		o.BlockBytes = DefaultBlockBytes
	}
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "blk-"
	}
	return o
}

// BlockKey is the store key of block id.
func BlockKey(prefix string, id int64) string { return prefix + strconv.FormatInt(id, 10) }

// FillPayload writes the deterministic payload of block id into b: 8-byte
// little-endian words of a SplitMix64 sequence seeded with id (the last word
// truncated). Readers verify with VerifyPayload.
func FillPayload(id int64, b []byte) {
	s := uint64(id)
	for i := 0; i < len(b); i += 8 {
		s += 0x9E3779B97F4A7C15
		z := s
		z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
		z = (z ^ (z >> 27)) * 0x94D049BB133111EB
		z ^= z >> 31
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(z >> (8 * j))
		}
	}
}

// VerifyPayload reports whether b is the payload of block id of length want.
func VerifyPayload(id int64, b []byte, want int, scratch []byte) bool {
	if len(b) != want {
		return false
	}
	scratch = scratch[:want]
	FillPayload(id, scratch)
	return string(scratch) == string(b)
}

// runner holds the reusable state of one Run.
type runner struct {
	o       Options
	s       Store
	keys    []string
	missing []string
	ids     []int64
	vals    [][]byte
	slab    []byte
	scratch []byte
}

// Run replays t against s, one request at a time: BatchExist on all blocks,
// BatchGet on the leading present run (a failed or wrong read ends the prefix),
// then BatchPut of every block that was absent or failed to read. With Speed > 0
// each request waits until its timestamp / Speed has elapsed since the start;
// a replay that falls behind does not skip requests. progress gets a bar when
// it is a terminal. Errors from the store are counted, not returned; Run
// returns an error only for bad options or a cancelled ctx (with the partial
// report).
func Run(ctx context.Context, t *Trace, o Options, s Store, progressW io.Writer) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	r := &runner{o: o, s: s, scratch: make([]byte, o.BlockBytes)}
	bar := progress.New(progressW, "replay", int64(len(t.Records)))
	w := newWindower(o.Window)
	var total, win hdr.Histogram
	var lat []hdr.Histogram
	evBase, evLast := r.evictions(ctx, 0), int64(0)
	evLast = evBase
	start := time.Now()
	var lastTS int64
	var err error
	for i := range t.Records {
		rec := &t.Records[i]
		if o.Speed > 0 {
			due := start.Add(time.Duration(float64(rec.Timestamp) * float64(time.Millisecond) / o.Speed))
			if d := time.Until(due); d > 0 {
				tm := time.NewTimer(d)
				select {
				case <-ctx.Done():
					tm.Stop()
				case <-tm.C:
				}
			}
		}
		if err = ctx.Err(); err != nil {
			break
		}
		prevStart := w.start
		w.at(rec.Timestamp)
		if w.start != prevStart && i > 0 { // a window closed
			ev := r.evictions(ctx, evLast)
			w.out[len(w.out)-1].Evictions = ev - evLast
			w.total.Evictions += ev - evLast
			evLast = ev
			lat = append(lat, win)
			win.Reset()
		}
		lastTS = rec.Timestamp
		if o.BeforeRequest != nil {
			o.BeforeRequest(i, rec)
		}
		t0 := time.Now()
		c := r.request(ctx, rec)
		d := time.Since(t0).Nanoseconds()
		total.Record(d)
		win.Record(d)
		w.cur.add(c)
		bar.Set(int64(i+1), fmt.Sprintf("prefix-hit %.3f", ratio(w.total.PrefixBlocks+w.cur.PrefixBlocks, w.total.Blocks+w.cur.Blocks)))
	}
	ev := r.evictions(context.WithoutCancel(ctx), evLast)
	w.cur.Evictions += ev - evLast
	lat = append(lat, win)
	sum, windows := w.finish(lastTS)
	for i := range windows {
		if i < len(lat) {
			setLatency(&windows[i], &lat[i])
		}
	}
	setLatency(&sum, &total)
	bar.Done(int64(len(t.Records)), fmt.Sprintf("prefix-hit %.3f", sum.PrefixHitRate))
	if o.Window < 0 {
		windows = nil
	}
	rep := &Report{Mode: "replay", Trace: t.Name, Policy: o.Label, CapacityBlocks: o.CapacityBlocks,
		BlockBytes: o.BlockBytes, Elapsed: time.Since(start).Seconds(), Total: sum, Windows: windows}
	return rep, err
}

func setLatency(s *Summary, h *hdr.Histogram) {
	s.P50US = float64(h.Quantile(0.50)) / 1e3
	s.P99US = float64(h.Quantile(0.99)) / 1e3
	s.P999US = float64(h.Quantile(0.999)) / 1e3
}

func (r *runner) evictions(ctx context.Context, prev int64) int64 {
	if r.o.Evictions == nil {
		return prev
	}
	n, err := r.o.Evictions(ctx)
	if err != nil {
		return prev
	}
	return n
}

// request replays one record and returns its counters.
func (r *runner) request(ctx context.Context, rec *Record) Counters {
	bb := r.o.BlockBytes
	r.keys = r.keys[:0]
	for _, id := range rec.HashIDs {
		r.keys = append(r.keys, BlockKey(r.o.KeyPrefix, id))
	}
	c := Counters{Requests: 1, Blocks: int64(len(rec.HashIDs))}
	if len(r.keys) == 0 {
		return c
	}
	present, err := r.s.BatchExist(ctx, r.keys)
	if err != nil || len(present) != len(r.keys) {
		// Without an answer nothing is known to be present: put everything.
		present = make([]bool, len(r.keys))
		c.ReadErrors++
	}
	prefix := leadingTrue(present)
	served := 0
	if prefix > 0 {
		vals, errs := r.s.BatchGet(ctx, r.keys[:prefix])
		for served < prefix {
			if served >= len(vals) || (served < len(errs) && errs[served] != nil) {
				c.ReadErrors++
				break
			}
			if !VerifyPayload(rec.HashIDs[served], vals[served], bb, r.scratch) {
				c.BadPayloads++
				break
			}
			served++
		}
	}
	rc := requestCounters(rec, served, bb)
	rc.ReadErrors, rc.BadPayloads = c.ReadErrors, c.BadPayloads
	// Put what was absent, and the blocks of the prefix that could not be read.
	r.missing, r.ids = r.missing[:0], r.ids[:0]
	for j, id := range rec.HashIDs {
		if !present[j] || (j >= served && j < prefix) {
			r.missing = append(r.missing, r.keys[j])
			r.ids = append(r.ids, id)
		}
	}
	if len(r.missing) == 0 {
		return rc
	}
	if need := len(r.missing) * bb; cap(r.slab) < need {
		r.slab = make([]byte, need)
	}
	r.vals = r.vals[:0]
	for j, id := range r.ids {
		v := r.slab[j*bb : (j+1)*bb : (j+1)*bb]
		FillPayload(id, v)
		r.vals = append(r.vals, v)
	}
	errs := r.s.BatchPut(ctx, r.missing, r.vals)
	for j := range r.missing {
		if errs != nil && (j >= len(errs) || errs[j] != nil) { // nil: all stored; short: failed
			rc.PutsRejected++
			continue
		}
		rc.BytesWritten += int64(bb)
	}
	return rc
}
