package tests

import (
	"bufio"
	"encoding/json"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/internal/shared"
)

func runKvtier(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(kvtierBin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kvtier %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// TestBenchJSONAgainstACluster: `kvtier bench --json` prints one JSON object
// per workload with the documented fields, measured against a real cluster.
func TestBenchJSONAgainstACluster(t *testing.T) {
	c := startCluster(t)
	// Large enough for the keys bench pre-loads (256 MiB at most), so no
	// eviction turns a get into a miss.
	c.appliance("bench-box", "--dram", "512MiB")
	out := runKvtier(t, "bench", "--master", c.grpc, "--json", "--op", "get,exist", "--size", "64KiB,256KiB",
		"--concurrency", "2", "--duration", "300ms")
	lines := 0
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("not JSON: %q: %v", sc.Text(), err)
		}
		for _, f := range []string{"op", "size", "concurrency", "ops_per_sec", "gbytes_per_sec", "p50_us", "p99_us", "p999_us"} {
			if _, ok := r[f]; !ok {
				t.Fatalf("result without %s: %s", f, sc.Text())
			}
		}
		if r["ops_per_sec"].(float64) <= 0 || r["errors"].(float64) != 0 {
			t.Fatalf("workload did no successful operation: %s", sc.Text())
		}
		// Gets move bytes, through the appliance's shared memory by
		// default (the bench client runs on the same host); exist moves none.
		if tr, _ := r["transport"].(string); (r["op"] == "get") != strings.Contains(tr, "shm") {
			t.Fatalf("transport %q for %v: %s", tr, r["op"], sc.Text())
		}
		lines++
	}
	if lines != 4 {
		t.Fatalf("%d result lines, want 4 (2 ops x 2 sizes):\n%s", lines, out)
	}

	out = runKvtier(t, "bench", "--master", c.grpc, "--json", "--op", "get", "--size", "64KiB",
		"--duration", "200ms", "--shm=false")
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil || r["transport"] != "tcp" {
		t.Fatalf("--shm=false: want transport tcp: %q (%v)", out, err)
	}

	// In turns with raw TCP to a second kvtier process: the result carries
	// the baseline's rate and kvtier's ratio to it, whole and per round.
	out = runKvtier(t, "bench", "--master", c.grpc, "--json", "--op", "put", "--size", "64KiB", "--concurrency", "2",
		"--duration", "600ms", "--shm=false", "--beside", "tcp-process", "--rounds", "3")
	var tr struct {
		Ops        int64   `json:"ops"`
		Rounds     int     `json:"rounds"`
		GBps       float64 `json:"gbytes_per_sec"`
		Beside     string  `json:"beside"`
		BesideGBps float64 `json:"beside_gbytes_per_sec"`
		Over       float64 `json:"over_beside"`
		OverMin    float64 `json:"over_beside_min"`
		OverMax    float64 `json:"over_beside_max"`
	}
	if err := json.Unmarshal([]byte(out), &tr); err != nil {
		t.Fatalf("--beside: %q: %v", out, err)
	}
	if tr.Beside != "tcp-process" || tr.Rounds != 3 || tr.Ops <= 0 || tr.BesideGBps <= 0 ||
		math.Abs(tr.Over-tr.GBps/tr.BesideGBps) > 1e-6*tr.Over || tr.OverMin <= 0 || tr.OverMin > tr.OverMax {
		t.Fatalf("--beside tcp-process: want the baseline's figures and kvtier's ratio: %s", out)
	}
	// The baseline's receiver started by a command of the user's (as ssh
	// would start it on the appliance's host), listening where it is told:
	// a second loopback address stands in for that host.
	dir := t.TempDir()
	marker, script := filepath.Join(dir, "sink-ran"), filepath.Join(dir, "sink.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$@\" >"+marker+"\nexec "+kvtierBin+" bench --tcp-sink-listen 127.0.0.2:0 --tcp-sink \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out = runKvtier(t, "bench", "--master", c.grpc, "--json", "--op", "put", "--size", "64KiB", "--duration", "400ms",
		"--shm=false", "--beside", "tcp-process", "--rounds", "2", "--sink-command", script)
	tr.BesideGBps = 0
	if err := json.Unmarshal([]byte(out), &tr); err != nil || tr.BesideGBps <= 0 {
		t.Fatalf("--sink-command: want the baseline's figures: %q (%v)", out, err)
	}
	if got, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(got)) != "65536" {
		t.Fatalf("the sink command ran with %q (%v), want the message size 65536 appended", got, err)
	}
	for _, bad := range [][]string{
		{"--sink-command", script},
		{"--beside", "redis"},
		{"--rounds", "3"},
		{"--beside", "tcp", "--baseline", "tcp"},
		{"--beside", "tcp", "--rounds", "50", "--duration", "1s"},
	} {
		args := append([]string{"bench", "--master", c.grpc, "--op", "put", "--size", "4KiB"}, bad...)
		_, errs, code := runKvtierCode(t, nil, args...)
		if code == 0 || (!strings.Contains(errs, "beside") && !strings.Contains(errs, "turns")) {
			t.Errorf("bench %v: exit %d, stderr %q; want a refusal", bad, code, errs)
		}
	}
}

func sampleTrace(t *testing.T, n int) string {
	t.Helper()
	src, err := os.ReadFile(shared.Path("traces", "conversation_trace.jsonl"))
	if err != nil {
		t.Skipf("shared traces not beside the checkout: %v", err)
	}
	lines := strings.SplitAfterN(string(src), "\n", n+1)
	path := filepath.Join(t.TempDir(), "sample.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines[:n], "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type replayJSON struct {
	Mode  string `json:"mode"`
	Total struct {
		PrefixHitRate float64 `json:"prefix_hit_rate"`
		Blocks        int64   `json:"blocks"`
		BadPayloads   int64   `json:"bad_payloads"`
	} `json:"total"`
}

// TestReplayThroughTheStoreAgreesWithSimulation: the same trace sample
// replayed through a real store (master + appliance, DRAM for 1,000 blocks)
// and simulated in memory give prefix-hit rates within 0.03 of each other.
func TestReplayThroughTheStoreAgreesWithSimulation(t *testing.T) {
	trace := sampleTrace(t, 1500)
	var real, sim replayJSON
	out := runKvtier(t, "replay", trace, "--capacity-blocks", "1000", "--policy", "plain", "--block-bytes", "1024", "--json")
	if err := json.Unmarshal([]byte(out), &real); err != nil {
		t.Fatalf("replay --json: %v\n%s", err, out)
	}
	out = runKvtier(t, "replay", trace, "--simulate", "--capacity-blocks", "1000", "--policy", "plain", "--block-bytes", "1024", "--json")
	var sw struct {
		Rates map[string][]float64 `json:"prefix_hit_rate"`
	}
	if err := json.Unmarshal([]byte(out), &sw); err != nil {
		t.Fatalf("replay --simulate --json: %v\n%s", err, out)
	}
	sim.Total.PrefixHitRate = sw.Rates["plain"][0]
	if real.Total.Blocks == 0 || real.Total.BadPayloads != 0 {
		t.Fatalf("real replay: %+v", real)
	}
	t.Logf("prefix-hit rate: real store %.4f, simulation %.4f", real.Total.PrefixHitRate, sim.Total.PrefixHitRate)
	if math.Abs(real.Total.PrefixHitRate-sim.Total.PrefixHitRate) > 0.03 {
		t.Fatalf("real store %.4f and simulation %.4f disagree", real.Total.PrefixHitRate, sim.Total.PrefixHitRate)
	}
}

// TestBenchFailuresAndTCPProcessBaseline: bench against a master that is
// not there exits non-zero naming the first error; the tcp-process
// baseline runs its receiver as a second kvtier process; --rpc-poll out of
// range is refused before anything starts.
func TestBenchFailuresAndTCPProcessBaseline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now
	out, errs, code := runKvtierCode(t, nil, "bench", "--master", dead, "--json", "--op", "put", "--size", "4KiB", "--duration", "200ms")
	if code == 0 || !strings.Contains(errs, "every put of 4096 B") || !strings.Contains(out, `"first_error"`) {
		t.Fatalf("bench against %s: exit %d, stdout %q, stderr %q; want a failure naming the first error", dead, code, out, errs)
	}

	out = runKvtier(t, "bench", "--baseline", "tcp-process", "--json", "--size", "64KiB", "--concurrency", "1,2", "--duration", "200ms")
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r struct {
			System       string  `json:"system"`
			Concurrency  int     `json:"concurrency"`
			Ops          int64   `json:"ops"`
			GBytesPerSec float64 `json:"gbytes_per_sec"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.System != "tcp-process" || r.Ops <= 0 || r.GBytesPerSec <= 0 {
			t.Fatalf("tcp-process line %q: %+v %v", line, r, err)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d tcp-process results, want 2:\n%s", n, out)
	}

	for _, bad := range []string{"-1ms", "1s"} {
		_, errs, code := runKvtierCode(t, nil, "master", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--rpc-poll", bad)
		if code == 0 || !strings.Contains(errs, "--rpc-poll") {
			t.Errorf("master --rpc-poll %s: exit %d, stderr %q; want a refusal naming the flag", bad, code, errs)
		}
	}
}
