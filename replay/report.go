package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Counters are the raw counts of one window or of a whole replay.
type Counters struct {
	Requests     int64 `json:"requests"`
	HitRequests  int64 `json:"hit_requests"`  // requests with >= 1 prefix block
	Blocks       int64 `json:"blocks"`        // block references
	PrefixBlocks int64 `json:"prefix_blocks"` // blocks served as a leading prefix
	TokensSaved  int64 `json:"prefill_tokens_saved"`
	BytesRead    int64 `json:"bytes_read"`
	BytesWritten int64 `json:"bytes_written"`
	PutsRejected int64 `json:"puts_rejected"` // no space (all leased) or a put error
	ReadErrors   int64 `json:"read_errors"`   // failed BatchExist calls and prefix reads (a read ends the prefix)
	BadPayloads  int64 `json:"bad_payloads"`  // reads whose bytes did not verify
	Evictions    int64 `json:"evictions"`
}

func (c *Counters) add(o Counters) {
	c.Requests += o.Requests
	c.HitRequests += o.HitRequests
	c.Blocks += o.Blocks
	c.PrefixBlocks += o.PrefixBlocks
	c.TokensSaved += o.TokensSaved
	c.BytesRead += o.BytesRead
	c.BytesWritten += o.BytesWritten
	c.PutsRejected += o.PutsRejected
	c.ReadErrors += o.ReadErrors
	c.BadPayloads += o.BadPayloads
	c.Evictions += o.Evictions
}

// PrefixHitRate is prefix blocks / all blocks (0 when there are no blocks).
func (c Counters) PrefixHitRate() float64 { return ratio(c.PrefixBlocks, c.Blocks) }

// RequestHitRate is requests with a prefix hit / all requests.
func (c Counters) RequestHitRate() float64 { return ratio(c.HitRequests, c.Requests) }

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Summary is Counters plus derived rates and, for a replay, latencies.
type Summary struct {
	StartMS        int64   `json:"start_ms"` // trace time of the window start
	EndMS          int64   `json:"end_ms"`   // trace time of the window end (exclusive)
	PrefixHitRate  float64 `json:"prefix_hit_rate"`
	RequestHitRate float64 `json:"request_hit_rate"`
	Counters
	P50US  float64 `json:"p50_us,omitempty"` // per-request latency (replay only)
	P99US  float64 `json:"p99_us,omitempty"`
	P999US float64 `json:"p999_us,omitempty"`
}

func newSummary(start, end int64, c Counters) Summary {
	return Summary{StartMS: start, EndMS: end, PrefixHitRate: c.PrefixHitRate(), RequestHitRate: c.RequestHitRate(), Counters: c}
}

// Report is the result of Simulate or Run.
type Report struct {
	Mode           string    `json:"mode"` // simulate | replay
	Trace          string    `json:"trace,omitempty"`
	Policy         string    `json:"policy,omitempty"`
	CapacityBlocks int       `json:"capacity_blocks,omitempty"`
	BlockBytes     int       `json:"block_bytes"`
	Elapsed        float64   `json:"elapsed_s"`
	Total          Summary   `json:"total"`
	Windows        []Summary `json:"windows,omitempty"`
}

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes a human-readable summary and the per-window table.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	t := r.Total
	fmt.Fprintf(&b, "%s of %s: policy %s, capacity %d blocks, %d B per block, %.1fs\n",
		r.Mode, r.Trace, r.Policy, r.CapacityBlocks, r.BlockBytes, r.Elapsed)
	fmt.Fprintf(&b, "requests %d, blocks %d, prefix-hit rate %.4f, request hit rate %.4f, prefill tokens saved %d\n",
		t.Requests, t.Blocks, t.PrefixHitRate, t.RequestHitRate, t.TokensSaved)
	fmt.Fprintf(&b, "bytes read %d, written %d, puts rejected %d, read errors %d, bad payloads %d, evictions %d\n",
		t.BytesRead, t.BytesWritten, t.PutsRejected, t.ReadErrors, t.BadPayloads, t.Evictions)
	if t.P50US > 0 {
		fmt.Fprintf(&b, "request latency p50 %.0f us, p99 %.0f us, p99.9 %.0f us\n", t.P50US, t.P99US, t.P999US)
	}
	if len(r.Windows) > 0 {
		b.WriteString("\n| window (s) | requests | prefix-hit | request-hit | evictions |\n|---|---:|---:|---:|---:|\n")
		for _, s := range r.Windows {
			fmt.Fprintf(&b, "| %d-%d | %d | %.4f | %.4f | %d |\n", s.StartMS/1000, s.EndMS/1000, s.Requests, s.PrefixHitRate, s.RequestHitRate, s.Evictions)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// windower splits counters into windows of trace time.
type windower struct {
	width   int64 // ms; <= 0 means a single window
	cur     Counters
	start   int64
	started bool
	out     []Summary
	total   Counters
}

func newWindower(d time.Duration) *windower { return &windower{width: d.Milliseconds()} }

// at moves to the window holding trace time ts (ms).
func (w *windower) at(ts int64) {
	if !w.started {
		w.started = true
		w.start = w.floor(ts)
		return
	}
	if w.width <= 0 || ts < w.start+w.width {
		return
	}
	w.flush()
	w.start = w.floor(ts)
}

func (w *windower) floor(ts int64) int64 {
	if w.width <= 0 {
		return 0
	}
	return ts - ts%w.width
}

func (w *windower) flush() {
	end := w.start + w.width
	if w.width <= 0 {
		end = w.start
	}
	w.out = append(w.out, newSummary(w.start, end, w.cur))
	w.total.add(w.cur)
	w.cur = Counters{}
}

func (w *windower) finish(lastTS int64) (Summary, []Summary) {
	if w.started {
		w.flush()
		if w.width <= 0 {
			w.out[len(w.out)-1].EndMS = lastTS + 1
		}
	}
	return newSummary(0, lastTS+1, w.total), w.out
}
