package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// testMemStore is an in-memory Store for tests: a mutex-guarded map with
// per-method call counters. It copies values in and out like a real store.
type testMemStore struct {
	mu    sync.Mutex
	data  map[string][]byte // guarded by mu
	calls map[string]int    // guarded by mu
	keys  map[string]int    // guarded by mu: keys touched per method
}

var _ Store = (*testMemStore)(nil)

func newTestMemStore() *testMemStore {
	return &testMemStore{data: map[string][]byte{}, calls: map[string]int{}, keys: map[string]int{}}
}

func (s *testMemStore) count(m string, n int) { s.calls[m]++; s.keys[m] += n }

func (s *testMemStore) Put(_ context.Context, k string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count("put", 1)
	if _, ok := s.data[k]; !ok {
		s.data[k] = append([]byte(nil), v...)
	}
	return nil
}

func (s *testMemStore) Get(_ context.Context, k string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count("get", 1)
	v, ok := s.data[k]
	if !ok {
		return nil, kverr.New(kverr.ObjectNotFound, k, "absent")
	}
	return append([]byte(nil), v...), nil
}

func (s *testMemStore) GetInto(_ context.Context, k string, buf []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count("getinto", 1)
	v, ok := s.data[k]
	if !ok {
		return 0, kverr.New(kverr.ObjectNotFound, k, "absent")
	}
	if len(buf) < len(v) {
		return 0, kverr.New(kverr.InvalidParams, k, "buffer too small")
	}
	return copy(buf, v), nil
}

func (s *testMemStore) Exist(_ context.Context, k string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count("exist", 1)
	_, ok := s.data[k]
	return ok, nil
}

func (s *testMemStore) BatchExist(_ context.Context, keys []string) ([]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count("batchexist", len(keys))
	out := make([]bool, len(keys))
	for i, k := range keys {
		_, out[i] = s.data[k]
	}
	return out, nil
}

func (s *testMemStore) BatchGet(_ context.Context, keys []string) ([][]byte, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count("batchget", len(keys))
	vals, errs := make([][]byte, len(keys)), make([]error, len(keys))
	for i, k := range keys {
		if v, ok := s.data[k]; ok {
			vals[i] = append([]byte(nil), v...)
		} else {
			errs[i] = kverr.New(kverr.ObjectNotFound, k, "absent")
		}
	}
	return vals, errs
}

func (s *testMemStore) BatchPut(_ context.Context, keys []string, values [][]byte) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count("batchput", len(keys))
	for i, k := range keys {
		if _, ok := s.data[k]; !ok {
			s.data[k] = append([]byte(nil), values[i]...)
		}
	}
	return make([]error, len(keys))
}

func TestRunAgainstMemStore(t *testing.T) {
	s := newTestMemStore()
	o := Options{Ops: []string{OpPut, OpGet, OpMixed, OpExist}, Sizes: []int{4096, 65536}, Concurrency: []int{1, 3},
		Duration: 30 * time.Millisecond, KeyPrefix: "t/", KeyBudgetBytes: 64 << 10}
	var prog bytes.Buffer
	rs, err := Run(context.Background(), o, s, &prog)
	if err != nil {
		t.Fatal(err)
	}
	if prog.Len() != 0 {
		t.Errorf("progress written to a non-terminal: %q", prog.String())
	}
	if len(rs) != 4*2*2 {
		t.Fatalf("%d results, want 16", len(rs))
	}
	var puts, gets, exists int64
	for _, r := range rs {
		if r.Ops <= 0 || r.Errors != 0 || r.OpsPerSec <= 0 || r.GBytesPerSec <= 0 || r.P50US <= 0 || r.P99US < r.P50US || r.P999US < r.P99US {
			t.Errorf("implausible result %+v", r)
		}
		if want := float64(r.Ops) * float64(r.Size) / r.Seconds / 1e9; r.GBytesPerSec < want*0.999 || r.GBytesPerSec > want*1.001 {
			t.Errorf("gbytes_per_sec %v, want %v", r.GBytesPerSec, want)
		}
		switch r.Op {
		case OpPut:
			puts += r.Ops
		case OpGet:
			gets += r.Ops
		case OpExist:
			exists += r.Ops
		}
		b, _ := json.Marshal(r)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"op", "size", "concurrency", "ops_per_sec", "gbytes_per_sec", "p50_us", "p99_us", "p999_us"} {
			if _, ok := m[f]; !ok {
				t.Errorf("JSON lacks %q: %s", f, b)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Puts: the measured ones plus 16 + 1 preloaded keys (64 KiB budget).
	if got := int64(s.keys["put"]); got < puts+16+1 {
		t.Errorf("store saw %d puts, results say %d (+17 preloads)", got, puts)
	}
	if got := int64(s.keys["getinto"]); got < gets {
		t.Errorf("store saw %d gets, results say %d", got, gets)
	}
	if int64(s.keys["exist"]) != exists {
		t.Errorf("store saw %d exists, results say %d", s.keys["exist"], exists)
	}
	// The only batch calls: the check of the preloaded keys, once for
	// each of the two sizes (stillStored).
	if s.calls["batchput"]+s.calls["batchget"] != 0 || s.calls["batchexist"] != 2 || s.keys["batchexist"] != 16+1 {
		t.Errorf("batch calls with Batch 1: %v (keys %v), want only a BatchExist of the preloaded keys per size", s.calls, s.keys)
	}
}

func TestRunBatchUsesBatchCalls(t *testing.T) {
	s := newTestMemStore()
	rs, err := Run(context.Background(), Options{Ops: []string{OpPut, OpGet, OpExist}, Sizes: []int{1024}, Batch: 8,
		Duration: 20 * time.Millisecond, KeyBudgetBytes: 64 << 10}, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if int64(s.keys["batchput"]) != rs[0].Ops || rs[0].Ops%8 != 0 {
		t.Errorf("batch put keys %d, result %d", s.keys["batchput"], rs[0].Ops)
	}
	// BatchExist also checked the 64 preloaded keys once (stillStored).
	if int64(s.keys["batchget"]) != rs[1].Ops || int64(s.keys["batchexist"]) != rs[2].Ops+64 {
		t.Errorf("batch get %d/%d, exist %d/%d (+64 preloaded keys checked)", s.keys["batchget"], rs[1].Ops, s.keys["batchexist"], rs[2].Ops)
	}
}

func TestBufferPoolBoundsBytesInFlight(t *testing.T) {
	// 8 callers of 1 MiB with a 2 MiB budget: the pool holds only 2 buffers.
	p := newBufPool(1<<20, 2<<20, 8)
	if cap(p.ch) != 2 {
		t.Fatalf("pool of %d buffers, want 2", cap(p.ch))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	a, _ := p.get(ctx)
	b, _ := p.get(ctx)
	if _, err := p.get(ctx); err == nil {
		t.Fatal("third buffer handed out beyond the budget")
	}
	p.put(a)
	p.put(b)
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{Ops: []string{"delete"}}, {Sizes: []int{0}}, {Concurrency: []int{-1}}, {Batch: -1}, {ReadFraction: 2}} {
		if _, err := Run(context.Background(), o, newTestMemStore(), nil); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func TestRawTCPAndMemcpy(t *testing.T) {
	r, err := RawTCP(context.Background(), 64<<10, 2, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ops == 0 || r.GBytesPerSec <= 0 || r.System != BaselineTCP || r.Concurrency != 2 || r.P50US <= 0 {
		t.Errorf("tcp result %+v", r)
	}
	m := Memcpy(1<<20, 20*time.Millisecond)
	if m.Ops == 0 || m.GBytesPerSec <= 0 {
		t.Errorf("memcpy result %+v", m)
	}
	rs, err := RunBaseline(context.Background(), BaselineTCP, Options{Sizes: []int{4096}, Concurrency: []int{1, 2}, Duration: 20 * time.Millisecond})
	if err != nil || len(rs) != 2 {
		t.Fatalf("RunBaseline: %v, %d results", err, len(rs))
	}
	if _, err := RunBaseline(context.Background(), "rdma", Options{}); err == nil {
		t.Error("unknown baseline accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RawTCP(ctx, 4096, 1, time.Second); err == nil {
		t.Error("cancelled RawTCP returned no error")
	}
}

func TestReportFromDir(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"iperf3-1M-1.json", "fio-seq-write.json", "redis-65536-4.csv"} {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kv := []Result{
		{System: "kvtier", Op: OpGet, Size: 65536, Concurrency: 4, GBytesPerSec: 3.6, OpsPerSec: 54932, P50US: 50, P99US: 90, P999US: 200},
		{System: "kvtier", Op: OpPut, Size: 65536, Concurrency: 4, GBytesPerSec: 1.0},
		{System: BaselineTCP, Op: "send", Size: 65536, Concurrency: 4, GBytesPerSec: 2.0},
		{System: BaselineTCPProcess, Op: "send", Size: 65536, Concurrency: 4, GBytesPerSec: 1.2},
		{System: BaselineMemcpy, Op: "copy", Size: 65536, Concurrency: 1, GBytesPerSec: 12},
	}
	var buf bytes.Buffer
	if err := WriteJSONLines(&buf, kv); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "kvtier.jsonl"), buf.Bytes(), 0o644)
	os.WriteFile(filepath.Join(dir, "skipped.txt"), []byte("spdk: skipped (not installed)\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("host: test\n"), 0o644)
	out := filepath.Join(dir, "out")
	if err := ReportTo(dir, out); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(out, "results.md"))
	for _, want := range []string{"| get | 64 KiB | 4 | – | 3.600 |", "1.80×", "3.00×", "2.01×", "| tcp-process | send | 64 KiB | 4 |", "spdk: skipped (not installed)", "| iperf3 | stream | 1 MiB | 1 |", "| fio | seq-write | 1 MiB |", "- host: test"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	// get: 3.6 / (27397.26*65536/1e9 = 1.7955) = 2.005; tcp 3.6/2 = 1.80.
	js, _ := os.ReadFile(filepath.Join(out, "results.json"))
	var parsed struct {
		Results []Result `json:"results"`
		Ratios  []Ratio  `json:"ratios"`
	}
	if err := json.Unmarshal(js, &parsed); err != nil {
		t.Fatal(err)
	}
	if len(parsed.Ratios) != 2 || parsed.Ratios[0].VsTCP < 1.79 || parsed.Ratios[0].VsTCP > 1.81 ||
		parsed.Ratios[0].VsTCPProcess < 2.99 || parsed.Ratios[0].VsTCPProcess > 3.01 || parsed.Ratios[0].TCPProcessGBps != 1.2 {
		t.Errorf("ratios %+v", parsed.Ratios)
	}
	svg, _ := os.Open(filepath.Join(out, "throughput.svg"))
	defer svg.Close()
	dec := xml.NewDecoder(svg)
	n := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("throughput.svg: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			n++
		}
	}
	if n < 5 {
		t.Errorf("%d lines in the chart, want one per system and op (>= 5)", n)
	}
	// A malformed file is an error, not a silent skip.
	os.WriteFile(filepath.Join(dir, "broken.jsonl"), []byte("{not json\n"), 0o644)
	if err := ReportTo(dir, out); err == nil || !strings.Contains(err.Error(), "broken.jsonl") {
		t.Errorf("broken input: %v", err)
	}
	// Report(dir) reads dir/raw and writes into dir.
	top := t.TempDir()
	os.MkdirAll(filepath.Join(top, "raw"), 0o755)
	os.WriteFile(filepath.Join(top, "raw", "kvtier.jsonl"), buf.Bytes(), 0o644)
	if err := Report(top); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(top, "throughput.svg")); err != nil {
		t.Error(err)
	}
	if err := Report(t.TempDir()); err == nil {
		t.Error("empty directory reported without error")
	}
}

func FuzzReadResults(f *testing.F) {
	f.Add([]byte(`{"system":"kvtier","op":"get","size":1,"concurrency":1}` + "\n\n"))
	f.Add([]byte(`{"system":"","size":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := ReadResults(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, r := range rs {
			if r.System == "" || r.Size < 0 {
				t.Fatalf("invalid result accepted: %+v", r)
			}
		}
	})
}

func FuzzParseRedisCSV(f *testing.F) {
	b, _ := os.ReadFile("testdata/redis-65536-4.csv")
	f.Add(b)
	f.Add([]byte(`"SET","123.0"` + "\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := ParseRedisCSV(bytes.NewReader(b), 100, 1)
		if err != nil {
			return
		}
		for _, r := range rs {
			if r.OpsPerSec <= 0 || r.System != "redis" {
				t.Fatalf("bad result %+v", r)
			}
		}
	})
}

// failingStore refuses every put, as an unreachable master does.
type failingStore struct{ *testMemStore }

func (failingStore) Put(context.Context, string, []byte) error {
	return kverr.New(kverr.RPCFail, "", "master unreachable")
}

func (failingStore) BatchPut(_ context.Context, keys []string, _ [][]byte) []error {
	errs := make([]error, len(keys))
	for i := range errs {
		errs[i] = kverr.New(kverr.RPCFail, "", "master unreachable")
	}
	return errs
}

// TestEveryOpFailedIsAnError: a workload that measured nothing carries its
// first error and makes Failed report it; a healthy one does not.
func TestEveryOpFailedIsAnError(t *testing.T) {
	for _, batch := range []int{1, 4} {
		o := Options{Ops: []string{OpPut}, Sizes: []int{4096}, Concurrency: []int{2}, Batch: batch, Duration: 10 * time.Millisecond}
		rs, err := Run(context.Background(), o, failingStore{newTestMemStore()}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 || rs[0].Ops != 0 || rs[0].Errors == 0 || !strings.Contains(rs[0].FirstError, "master unreachable") {
			t.Fatalf("batch %d: result %+v, want no ops, errors and the first error", batch, rs)
		}
		if err := Failed(rs); err == nil || !strings.Contains(err.Error(), "every put of 4096 B") || !strings.Contains(err.Error(), "RPC_FAIL") {
			t.Errorf("batch %d: Failed = %v", batch, err)
		}
	}
	rs, err := Run(context.Background(), Options{Ops: []string{OpPut}, Sizes: []int{4096}, Concurrency: []int{1}, Duration: 10 * time.Millisecond}, newTestMemStore(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := Failed(rs); err != nil || rs[0].FirstError != "" {
		t.Errorf("healthy run: Failed = %v, first error %q", err, rs[0].FirstError)
	}
}

// intoStore is a testMemStore that also reads batches into the caller's
// buffers (the client SDK's BatchGetInto).
type intoStore struct{ *testMemStore }

func (s intoStore) BatchGetInto(_ context.Context, keys []string, bufs [][]byte) ([]int, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count("batchgetinto", len(keys))
	sizes, errs := make([]int, len(keys)), make([]error, len(keys))
	for i, k := range keys {
		v, ok := s.data[k]
		switch {
		case !ok:
			errs[i] = kverr.New(kverr.ObjectNotFound, k, "absent")
		case len(bufs[i]) < len(v):
			errs[i] = kverr.New(kverr.InvalidParams, k, "buffer too small")
		default:
			sizes[i] = copy(bufs[i], v)
		}
	}
	return sizes, errs
}

// A store that reads batches into buffers gets its batch gets that way,
// each key counted once and checked for its size.
func TestRunBatchGetUsesBatchGetInto(t *testing.T) {
	s := intoStore{newTestMemStore()}
	rs, err := Run(context.Background(), Options{Ops: []string{OpGet}, Sizes: []int{1024}, Batch: 8,
		Duration: 20 * time.Millisecond, KeyBudgetBytes: 64 << 10}, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys["batchget"] != 0 || int64(s.keys["batchgetinto"]) != rs[0].Ops || rs[0].Ops == 0 || rs[0].Errors != 0 {
		t.Errorf("batchget %d, batchgetinto %d, result %d ops %d errors", s.keys["batchget"], s.keys["batchgetinto"], rs[0].Ops, rs[0].Errors)
	}
}

// cleanStore is a testMemStore that removes by pattern (Cleaner).
type cleanStore struct {
	*testMemStore
	exprs []string
}

func (s *cleanStore) RemoveByRegex(_ context.Context, expr string, force bool) (int, error) {
	re, err := regexp.Compile(expr)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exprs = append(s.exprs, expr)
	n := 0
	for k := range s.data {
		if re.MatchString(k) {
			delete(s.data, k)
			n++
		}
	}
	return n, nil
}

// TestRunRemovesWhatItStored: a run leaves the store as it found it (keys
// of others untouched), unless KeepKeys; a prefix with regexp
// metacharacters is matched literally.
func TestRunRemovesWhatItStored(t *testing.T) {
	for _, keep := range []bool{false, true} {
		s := &cleanStore{testMemStore: newTestMemStore()}
		s.data["other/x"] = []byte("not the benchmark's")
		s.data["t.x/load-0"] = []byte("matches t./ only as a pattern")
		o := Options{Ops: []string{OpPut, OpGet}, Sizes: []int{4096}, Duration: 20 * time.Millisecond, KeyPrefix: "t./", KeyBudgetBytes: 64 << 10, KeepKeys: keep}
		if _, err := Run(context.Background(), o, s, nil); err != nil {
			t.Fatal(err)
		}
		var left []string
		for k := range s.data {
			left = append(left, k)
		}
		switch {
		case keep && (len(s.exprs) != 0 || len(left) <= 2):
			t.Fatalf("KeepKeys: removals %q, %d keys left", s.exprs, len(left))
		case !keep && (len(s.exprs) != 1 || len(left) != 2 || s.data["other/x"] == nil || s.data["t.x/load-0"] == nil):
			t.Fatalf("removals %q, keys left %q", s.exprs, left)
		}
	}
}

// busyCleanStore refuses to remove the keys in busy for as many removal
// passes as their count says, as the master refuses objects still being
// copied to SSD, and says which keys under a prefix are left (Remainer).
type busyCleanStore struct {
	*cleanStore
	busy map[string]int // guarded by mu
}

func (s *busyCleanStore) RemoveByRegex(ctx context.Context, expr string, force bool) (int, error) {
	s.mu.Lock()
	held := map[string][]byte{}
	for k, n := range s.busy {
		if v, ok := s.data[k]; ok && n != 0 {
			held[k] = v
			s.busy[k] = n - 1 // a negative count: never removable
		}
	}
	s.mu.Unlock()
	n, err := s.cleanStore.RemoveByRegex(ctx, expr, force)
	s.mu.Lock()
	for k, v := range held {
		s.data[k] = v
		n--
	}
	s.mu.Unlock()
	return n, err
}

func (s *busyCleanStore) AnyUnder(_ context.Context, prefix string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.data {
		if strings.HasPrefix(k, prefix) {
			return true, nil
		}
	}
	return false, nil
}

// TestRunRemovesObjectsStillBeingOffloaded: objects the store refuses to
// remove for a few passes (still being copied to SSD) are removed by the
// passes that follow; one never removable ends the clean-up with a
// CleanupError once cleanupTimeout has run out, not a silent leftover.
func TestRunRemovesObjectsStillBeingOffloaded(t *testing.T) {
	defer func(d time.Duration) { cleanupTimeout = d }(cleanupTimeout)
	cleanupTimeout = 500 * time.Millisecond
	for _, never := range []bool{false, true} {
		s := &busyCleanStore{cleanStore: &cleanStore{testMemStore: newTestMemStore()}, busy: map[string]int{}}
		s.data["t/late-1"], s.data["t/late-2"] = []byte("a"), []byte("b")
		s.busy["t/late-1"], s.busy["t/late-2"] = 3, 1
		if never {
			s.busy["t/late-2"] = -1
		}
		o := Options{Ops: []string{OpPut}, Sizes: []int{4096}, Duration: 20 * time.Millisecond, KeyPrefix: "t/"}
		_, err := Run(context.Background(), o, s, nil)
		var ce *CleanupError
		s.mu.Lock()
		left := len(s.data)
		s.mu.Unlock()
		if never {
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), "still being written or copied to SSD") || left != 1 {
				t.Errorf("a key never removable: error %v, %d keys left; want a CleanupError naming the cause and that one key", err, left)
			}
			continue
		}
		if err != nil || left != 0 {
			t.Errorf("keys refused for a few passes: error %v, %d keys left; want none", err, left)
		}
		if len(s.exprs) < 4 {
			t.Errorf("%d removal passes, want at least 4 (t/late-1 refused 3 times)", len(s.exprs))
		}
	}
}

// missingStore answers three single gets in four OBJECT_NOT_FOUND at once
// (evicted keys); the others take slow.
type missingStore struct {
	*testMemStore
	n    atomic.Int64
	slow time.Duration
}

func (s *missingStore) GetInto(ctx context.Context, k string, buf []byte) (int, error) {
	if s.n.Add(1)%4 != 0 {
		return 0, kverr.New(kverr.ObjectNotFound, k, "evicted")
	}
	time.Sleep(s.slow)
	return s.testMemStore.GetInto(ctx, k, buf)
}

// TestPartlyFailedIsReported: a workload in which some operations failed
// (gets of evicted keys) is named by PartlyFailed with its counts and
// first error, and the fast failures do not enter its latencies.
func TestPartlyFailedIsReported(t *testing.T) {
	s := &missingStore{testMemStore: newTestMemStore(), slow: 3 * time.Millisecond}
	o := Options{Ops: []string{OpGet}, Sizes: []int{4096}, Concurrency: []int{1}, Duration: 100 * time.Millisecond}
	rs, err := Run(context.Background(), o, s, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	if r.Ops == 0 || r.Errors == 0 {
		t.Fatalf("result %+v: want successes and failures", r)
	}
	if r.P50US < 3000 {
		t.Errorf("p50 %.0f µs: the instant misses entered the latencies (every hit took 3 ms)", r.P50US)
	}
	w := PartlyFailed(rs)
	if len(w) != 1 || !strings.Contains(w[0], fmt.Sprintf("%d of %d operations failed", r.Errors, r.Errors+r.Ops)) || !strings.Contains(w[0], "OBJECT_NOT_FOUND") {
		t.Fatalf("PartlyFailed = %q", w)
	}
	if err := Failed(rs); err != nil {
		t.Fatalf("Failed = %v for a workload that measured something", err)
	}
	ok, err := Run(context.Background(), o, newTestMemStore(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if w := PartlyFailed(ok); len(w) != 0 {
		t.Fatalf("PartlyFailed = %q for a healthy run", w)
	}
}

// evictingStore keeps only the last keep keys put, as a full store that
// evicts a preload's earlier keys to place its later ones.
type evictingStore struct {
	*testMemStore
	keep  int
	order []string
}

func (s *evictingStore) Put(ctx context.Context, k string, v []byte) error {
	if err := s.testMemStore.Put(ctx, k, v); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.order = append(s.order, k)
	for len(s.order) > s.keep {
		delete(s.data, s.order[0])
		s.order = s.order[1:]
	}
	return nil
}

// TestGetsReadOnlyKeysStillStored: a get workload reads only the preloaded
// keys the store still holds after the preload (none missing, so no
// errors); when it held none, the run says why.
func TestGetsReadOnlyKeysStillStored(t *testing.T) {
	o := Options{Ops: []string{OpGet}, Sizes: []int{4096}, Concurrency: []int{2}, Duration: 50 * time.Millisecond, KeyBudgetBytes: 64 * 4096}
	s := &evictingStore{testMemStore: newTestMemStore(), keep: 10}
	rs, err := Run(context.Background(), o, s, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Errors != 0 || rs[0].Ops == 0 {
		t.Fatalf("result %+v: want gets of the 10 keys still stored, none failing", rs[0])
	}
	s = &evictingStore{testMemStore: newTestMemStore(), keep: 0}
	if _, err := Run(context.Background(), o, s, io.Discard); err == nil || !strings.Contains(err.Error(), "none of the 64 keys of 4096 B loaded stayed stored") {
		t.Fatalf("Run = %v, want the preload's loss named", err)
	}
}

// TestPutKeysNeverRepeatInARun: every put of a run writes a new key, also
// across workloads of the same size (the store still holds the earlier
// workloads' objects until the run ends; a repeated key measures an
// OBJECT_ALREADY_EXISTS answer, not a put).
func TestPutKeysNeverRepeatInARun(t *testing.T) {
	s := newTestMemStore()
	o := Options{Ops: []string{OpPut, OpMixed}, Sizes: []int{4096}, Concurrency: []int{1, 2}, Duration: 30 * time.Millisecond, KeepKeys: true}
	if _, err := Run(context.Background(), o, s, io.Discard); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys["put"] == 0 || len(s.data) != s.keys["put"] {
		t.Fatalf("%d puts stored %d distinct keys", s.keys["put"], len(s.data))
	}
}
