package bench

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kvtier/kvtier/bench/chart"
)

// WriteJSONLines writes one JSON object per result and line.
func WriteJSONLines(w io.Writer, rs []Result) error {
	enc := json.NewEncoder(w)
	for i := range rs {
		if err := enc.Encode(&rs[i]); err != nil {
			return err
		}
	}
	return nil
}

// ReadResults parses JSON lines of Result (blank lines skipped; a bad line is
// an error naming it).
func ReadResults(r io.Reader) ([]Result, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []Result
	for line := 1; sc.Scan(); line++ {
		b := strings.TrimSpace(sc.Text())
		if b == "" {
			continue
		}
		var res Result
		if err := json.Unmarshal([]byte(b), &res); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if res.System == "" || res.Size < 0 || res.Concurrency < 0 {
			return nil, fmt.Errorf("line %d: result without system or with negative size/concurrency", line)
		}
		out = append(out, res)
	}
	return out, sc.Err()
}

// ParseRedisCSV converts redis-benchmark --csv output (Redis 6/7: a header
// line then one row per test) for one value size and client count.
func ParseRedisCSV(r io.Reader, size, clients int) ([]Result, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("redis csv: %w", err)
	}
	col := map[string]int{"test": 0, "rps": 1}
	var out []Result
	for _, row := range rows {
		if len(row) > 0 && row[0] == "test" {
			for i, h := range row {
				col[h] = i
			}
			continue
		}
		get := func(name string) float64 {
			i, ok := col[name]
			if !ok || i >= len(row) {
				return 0
			}
			v, _ := strconv.ParseFloat(row[i], 64)
			return v
		}
		if len(row) < 2 {
			continue
		}
		op := strings.ToLower(strings.Fields(row[col["test"]] + " x")[0])
		if op == "set" {
			op = OpPut
		}
		rps := get("rps")
		if rps <= 0 {
			return nil, fmt.Errorf("redis csv: bad rps in %q", strings.Join(row, ","))
		}
		out = append(out, Result{System: "redis", Op: op, Size: size, Concurrency: clients, Batch: 1,
			OpsPerSec: rps, GBytesPerSec: rps * float64(size) / 1e9,
			P50US: get("p50_latency_ms") * 1e3, P99US: get("p99_latency_ms") * 1e3, Note: "redis-benchmark"})
	}
	if len(out) == 0 {
		return nil, errors.New("redis csv: no rows")
	}
	return out, nil
}

// ParseIperf3 converts an iperf3 -J client report.
func ParseIperf3(r io.Reader) (Result, error) {
	var v struct {
		Start struct {
			TestStart struct {
				NumStreams int `json:"num_streams"`
				BlkSize    int `json:"blksize"`
			} `json:"test_start"`
		} `json:"start"`
		End struct {
			SumReceived struct {
				Seconds float64 `json:"seconds"`
				Bytes   float64 `json:"bytes"`
				Bps     float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(r).Decode(&v); err != nil {
		return Result{}, fmt.Errorf("iperf3 json: %w", err)
	}
	if v.Error != "" {
		return Result{}, fmt.Errorf("iperf3: %s", v.Error)
	}
	s := v.End.SumReceived
	if s.Bps <= 0 {
		return Result{}, errors.New("iperf3 json: no received throughput")
	}
	res := Result{System: "iperf3", Op: "stream", Size: v.Start.TestStart.BlkSize, Concurrency: v.Start.TestStart.NumStreams,
		Seconds: s.Seconds, GBytesPerSec: s.Bps / 8 / 1e9, Note: "iperf3 -c (loopback)"}
	if res.Size > 0 {
		res.OpsPerSec = s.Bps / 8 / float64(res.Size)
	}
	return res, nil
}

// ParseFio converts fio --output-format=json: one Result per job and
// direction that moved bytes.
func ParseFio(r io.Reader) ([]Result, error) {
	type dir struct {
		BwBytes float64 `json:"bw_bytes"`
		IOPS    float64 `json:"iops"`
		ClatNs  struct {
			Percentile map[string]float64 `json:"percentile"`
		} `json:"clat_ns"`
	}
	var v struct {
		Jobs []struct {
			Name    string `json:"jobname"`
			Error   int    `json:"error"`
			Read    dir    `json:"read"`
			Write   dir    `json:"write"`
			Options struct {
				BS      string `json:"bs"`
				IODepth string `json:"iodepth"`
			} `json:"job options"`
		} `json:"jobs"`
	}
	if err := json.NewDecoder(r).Decode(&v); err != nil {
		return nil, fmt.Errorf("fio json: %w", err)
	}
	var out []Result
	for _, j := range v.Jobs {
		if j.Error != 0 {
			return nil, fmt.Errorf("fio job %s: error %d", j.Name, j.Error)
		}
		for _, d := range []struct {
			op string
			d  dir
		}{{"seq-read", j.Read}, {"seq-write", j.Write}} {
			if d.d.BwBytes <= 0 {
				continue
			}
			res := Result{System: "fio", Op: d.op, Concurrency: 1, OpsPerSec: d.d.IOPS, GBytesPerSec: d.d.BwBytes / 1e9,
				P50US: d.d.ClatNs.Percentile["50.000000"] / 1e3, P99US: d.d.ClatNs.Percentile["99.000000"] / 1e3,
				P999US: d.d.ClatNs.Percentile["99.900000"] / 1e3, Note: "fio " + j.Name + " direct=1"}
			if d.d.IOPS > 0 {
				res.Size = int(d.d.BwBytes/d.d.IOPS + 0.5)
			}
			if qd, err := strconv.Atoi(j.Options.IODepth); err == nil {
				res.Concurrency = qd
			}
			out = append(out, res)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("fio json: no job moved bytes")
	}
	return out, nil
}

// DeploymentCluster marks results measured against a master and an
// appliance in separate processes (Result.Deployment).
const DeploymentCluster = "cluster"

// LoadDir reads the raw outputs bench.sh leaves in dir (see the package doc
// for the file names). Unknown files are ignored; a malformed file is an error.
func LoadDir(dir string) ([]Result, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		path := filepath.Join(dir, name)
		var rs []Result
		switch {
		case strings.HasSuffix(name, ".jsonl"):
			rs, err = withFile(path, ReadResults)
			if strings.HasSuffix(name, "-cluster.jsonl") {
				for i := range rs {
					if rs[i].Deployment == "" {
						rs[i].Deployment = DeploymentCluster
					}
				}
			}
		case strings.HasPrefix(name, "redis-") && strings.HasSuffix(name, ".csv"):
			var size, clients int
			if _, e := fmt.Sscanf(strings.TrimSuffix(name, ".csv"), "redis-%d-%d", &size, &clients); e != nil {
				return nil, fmt.Errorf("%s: name is not redis-SIZE-CLIENTS.csv", name)
			}
			rs, err = withFile(path, func(r io.Reader) ([]Result, error) { return ParseRedisCSV(r, size, clients) })
		case strings.HasPrefix(name, "iperf3-") && strings.HasSuffix(name, ".json"):
			rs, err = withFile(path, func(r io.Reader) ([]Result, error) {
				res, err := ParseIperf3(r)
				return []Result{res}, err
			})
		case strings.HasPrefix(name, "fio-") && strings.HasSuffix(name, ".json"):
			rs, err = withFile(path, ParseFio)
		case name == "skipped.txt":
			rs, err = withFile(path, parseSkipped)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

func withFile(path string, f func(io.Reader) ([]Result, error)) ([]Result, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return f(fh)
}

// parseSkipped reads lines "system: reason".
func parseSkipped(r io.Reader) ([]Result, error) {
	sc := bufio.NewScanner(r)
	var out []Result
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		sys, reason, ok := strings.Cut(line, ":")
		if !ok {
			reason = "skipped"
		}
		out = append(out, Result{System: strings.TrimSpace(sys), Skipped: true, Note: strings.TrimSpace(reason)})
	}
	return out, sc.Err()
}

// Report loads the raw outputs in dir/raw (or in dir itself when it has no
// raw subdirectory) and writes results.md, results.json and throughput.svg
// into dir. This is `kvtier bench --report DIR`.
func Report(dir string) error {
	in := filepath.Join(dir, "raw")
	if st, err := os.Stat(in); err != nil || !st.IsDir() {
		in = dir
	}
	return ReportTo(in, dir)
}

// ReportTo is Report with separate input and output directories.
func ReportTo(dir, outDir string) error {
	rs, err := LoadDir(dir)
	if err != nil {
		return err
	}
	if len(rs) == 0 {
		return fmt.Errorf("bench report: no results in %s", dir)
	}
	notes, err := readNotes(filepath.Join(dir, "notes.txt"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	write := func(name string, f func(io.Writer) error) error {
		fh, err := os.Create(filepath.Join(outDir, name))
		if err != nil {
			return err
		}
		if err := f(fh); err != nil {
			fh.Close()
			return err
		}
		return fh.Close()
	}
	if err := write("results.md", func(w io.Writer) error { return WriteMarkdown(w, rs, notes...) }); err != nil {
		return err
	}
	if err := write("results.json", func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Results []Result `json:"results"`
			Ratios  []Ratio  `json:"ratios"`
		}{rs, Ratios(rs)})
	}); err != nil {
		return err
	}
	return write("throughput.svg", func(w io.Writer) error { return WriteSVG(w, rs) })
}

// Ratio compares one kvtier result with the matching baselines.
type Ratio struct {
	Op          string  `json:"op"`
	Size        int     `json:"size"`
	Concurrency int     `json:"concurrency"`
	Transport   string  `json:"transport,omitempty"`
	KvtierGBps  float64 `json:"kvtier_gbytes_per_sec"`
	TCPGBps     float64 `json:"tcp_gbytes_per_sec,omitempty"`
	VsTCP       float64 `json:"kvtier_over_tcp,omitempty"`
	// The same sender with its receiver in another process (tcp-process).
	TCPProcessGBps float64 `json:"tcp_process_gbytes_per_sec,omitempty"`
	VsTCPProcess   float64 `json:"kvtier_over_tcp_process,omitempty"`
	RedisGBps      float64 `json:"redis_gbytes_per_sec,omitempty"`
	VsRedis        float64 `json:"kvtier_over_redis,omitempty"`
	// InTurns: the tcp or tcp-process figures are the baseline measured
	// in turns with this workload (kvtier bench --beside), not a separate
	// baseline run; TurnsMin and TurnsMax are the lowest and highest ratio
	// of single rounds.
	InTurns  bool    `json:"in_turns,omitempty"`
	Beside   string  `json:"beside,omitempty"` // the baseline of the turns
	TurnsMin float64 `json:"turns_min,omitempty"`
	TurnsMax float64 `json:"turns_max,omitempty"`
}

// Ratios matches every kvtier result with the tcp and tcp-process results of
// the same size and concurrency and the redis result of the same op, size
// and client count. A result measured beside a baseline in turns
// (Result.Beside) takes that baseline's figures from its own turns instead.
func Ratios(rs []Result) []Ratio {
	find := func(sys, op string, size, c int) *Result {
		for i := range rs {
			r := &rs[i]
			if r.System == sys && !r.Skipped && r.Size == size && r.Concurrency == c && (op == "" || r.Op == op) {
				return r
			}
		}
		return nil
	}
	var out []Ratio
	for _, r := range rs {
		if r.System != "kvtier" || r.Skipped {
			continue
		}
		q := Ratio{Op: r.Op, Size: r.Size, Concurrency: r.Concurrency, Transport: r.Transport, KvtierGBps: r.GBytesPerSec}
		if t := find(BaselineTCP, "", r.Size, r.Concurrency); t != nil && t.GBytesPerSec > 0 {
			q.TCPGBps, q.VsTCP = t.GBytesPerSec, r.GBytesPerSec/t.GBytesPerSec
		}
		if t := find(BaselineTCPProcess, "", r.Size, r.Concurrency); t != nil && t.GBytesPerSec > 0 {
			q.TCPProcessGBps, q.VsTCPProcess = t.GBytesPerSec, r.GBytesPerSec/t.GBytesPerSec
		}
		if d := find("redis", r.Op, r.Size, r.Concurrency); d != nil && d.GBytesPerSec > 0 {
			q.RedisGBps, q.VsRedis = d.GBytesPerSec, r.GBytesPerSec/d.GBytesPerSec
		}
		if r.BesideGBytesPerSec > 0 {
			switch r.Beside {
			case BaselineTCP:
				q.TCPGBps, q.VsTCP = r.BesideGBytesPerSec, r.VsBeside
			case BaselineTCPProcess, BaselineTCPProcessCold, BaselineTCPProcessStore:
				q.TCPProcessGBps, q.VsTCPProcess = r.BesideGBytesPerSec, r.VsBeside
			}
			q.InTurns, q.Beside, q.TurnsMin, q.TurnsMax = true, r.Beside, r.VsBesideMin, r.VsBesideMax
		}
		out = append(out, q)
	}
	return out
}

// SizeString prints a byte count as KiB/MiB/GiB when exact.
func SizeString(n int) string {
	for _, u := range []struct {
		s string
		v int
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.v && n%u.v == 0 {
			return strconv.Itoa(n/u.v) + " " + u.s
		}
	}
	return strconv.Itoa(n) + " B"
}

func ratioCell(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

func gbCell(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f", v)
}

// readNotes returns the non-empty lines of path; a missing file has none.
func readNotes(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out, nil
}

// WriteMarkdown writes the setup notes, the comparison table, the baseline
// table and the list of skipped baselines.
func WriteMarkdown(w io.Writer, rs []Result, notes ...string) error {
	var b strings.Builder
	b.WriteString("# kvtier benchmark\n\nAll figures from one run on this host; GB/s = 10^9 bytes of object data per second.\n\n")
	for _, n := range notes {
		b.WriteString("- " + n + "\n")
	}
	if len(notes) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("## kvtier against the baselines\n\n")
	b.WriteString("TCP: a Go sender and receiver in one process (hot buffers); TCP 2-proc: the same with the receiver in another process, as kvtier's client and appliance are.\n\n")
	b.WriteString("| op | size | clients | path | kvtier GB/s | ops/s | p50 µs | p99 µs | p99.9 µs | TCP GB/s | kvtier/TCP | TCP 2-proc GB/s | kvtier/2-proc | Redis GB/s | kvtier/Redis |\n")
	b.WriteString("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	// A cluster's rows after the standalone's (its file sorts first).
	rs = slices.Clone(rs)
	slices.SortStableFunc(rs, func(a, b Result) int { return cmp.Compare(a.Deployment, b.Deployment) })
	ratios := Ratios(rs)
	i, turns, clustered := 0, false, false
	for _, r := range rs {
		if r.System != "kvtier" || r.Skipped {
			continue
		}
		q := ratios[i]
		i++
		path := r.Transport
		if path == "" {
			path = "–"
		}
		if r.Deployment != "" {
			path += " · " + r.Deployment
			clustered = true
		}
		vsTCP, vsProc := ratioCell(q.VsTCP), ratioCell(q.VsTCPProcess)
		if q.InTurns {
			turns = true
			cell := fmt.Sprintf("%s (%.2f–%.2f)†", ratioCell(r.VsBeside), q.TurnsMin, q.TurnsMax)
			switch r.Beside {
			case BaselineTCPProcessCold:
				cell += " cold"
			case BaselineTCPProcessStore:
				cell += " store"
			}
			if r.Beside == BaselineTCP {
				vsTCP = cell
			} else {
				vsProc = cell
			}
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %.3f | %.0f | %.0f | %.0f | %.0f | %s | %s | %s | %s | %s | %s |\n",
			r.Op, SizeString(r.Size), r.Concurrency, path, r.GBytesPerSec, r.OpsPerSec, r.P50US, r.P99US, r.P999US,
			gbCell(q.TCPGBps), vsTCP, gbCell(q.TCPProcessGBps), vsProc, gbCell(q.RedisGBps), ratioCell(q.VsRedis))
	}
	if clustered {
		b.WriteString("\n· cluster: against `kvtier master` and `kvtier appliance` in separate processes (BENCH_CLUSTER_SIZES), as a cluster runs; every other row against a standalone, whose box calls its master in-process.\n")
	}
	if turns {
		b.WriteString("\n† measured in turns with the workload (kvtier bench --beside): the two alternate in short rounds, so both see the same machine; in brackets the lowest and highest ratio of single rounds; \"cold\": raw TCP sending from a working set in DRAM (tcp-process-cold), as a get reads objects nobody touched lately; \"store\": that, and the receiving process lands each message at the next place of a working set in DRAM (tcp-process-store), as an appliance stores a put.\n")
	}
	b.WriteString("\n## Baselines\n\n| system | op | size | clients | GB/s | ops/s | p50 µs | p99 µs | note |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n")
	base := make([]Result, 0, len(rs))
	for _, r := range rs {
		if r.System != "kvtier" && !r.Skipped {
			base = append(base, r)
		}
	}
	sort.SliceStable(base, func(i, j int) bool { return base[i].System < base[j].System })
	for _, r := range base {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.3f | %.0f | %.0f | %.0f | %s |\n", r.System, r.Op, SizeString(r.Size),
			r.Concurrency, r.GBytesPerSec, r.OpsPerSec, r.P50US, r.P99US, r.Note)
	}
	var skipped []string
	for _, r := range rs {
		if r.Skipped {
			skipped = append(skipped, fmt.Sprintf("- %s: %s\n", r.System, r.Note))
		}
	}
	if len(skipped) > 0 {
		b.WriteString("\n## Skipped\n\n" + strings.Join(skipped, ""))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteSVG draws throughput by object size: one line per system and op, at
// the best client count measured for each size.
func WriteSVG(w io.Writer, rs []Result) error {
	best := map[string]map[int]float64{}
	var names []string
	for _, r := range rs {
		if r.Skipped || r.Size <= 0 || r.GBytesPerSec <= 0 {
			continue
		}
		name := r.System + " " + r.Op
		if r.Transport == "tcp" && r.System == "kvtier" {
			name += " (tcp)" // the TCP-only pass, beside the default path
		}
		if r.Deployment != "" {
			name += " " + r.Deployment
		}
		if best[name] == nil {
			best[name] = map[int]float64{}
			names = append(names, name)
		}
		best[name][r.Size] = max(best[name][r.Size], r.GBytesPerSec)
	}
	c := &chart.Line{Title: "Throughput by object size (best client count)", XLabel: "object size",
		YLabel: "GB/s (10^9 B/s)", LogX: true, XTick: func(x float64) string { return SizeString(int(x)) }}
	for _, n := range names {
		s := chart.Series{Name: n}
		sizes := make([]int, 0, len(best[n]))
		for sz := range best[n] {
			sizes = append(sizes, sz)
		}
		sort.Ints(sizes)
		for _, sz := range sizes {
			s.Points = append(s.Points, chart.Point{X: float64(sz), Y: best[n][sz]})
		}
		c.Series = append(c.Series, s)
	}
	return c.WriteSVG(w)
}
