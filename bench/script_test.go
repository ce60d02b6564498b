package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchScript runs scripts/bench.sh end to end with the fake kvtier CLI
// (bench/internal/fakekvtier) standing in for cmd/kvtier's bench subcommand,
// and checks the report it writes and that it leaves no process behind. The
// baselines (Go TCP, memcpy, and iperf3/redis/fio when installed) are real.
func TestBenchScript(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: runs scripts/bench.sh (~40 s)")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("bash not installed: %v", err)
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "fakekvtier")
	if out, err := exec.Command("go", "build", "-o", fake, "./internal/fakekvtier").CombinedOutput(); err != nil {
		t.Fatalf("build fake CLI: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "results")
	cmd := exec.Command("bash", "../scripts/bench.sh")
	cmd.Env = append(os.Environ(), "KVTIER_BIN="+fake, "BENCH_DURATION=1", "BENCH_SIZES=64KiB", "BENCH_CLIENTS=1,2",
		"BENCH_OUT="+out, "TMPDIR="+dir, "BENCH_TCP_BESIDE=both", "BENCH_CLUSTER_SIZES=64KiB")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bench.sh: %v\n%s", err, b)
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| put | 64 KiB | 1 |", "| get | 64 KiB | 2 |", "| tcp | send | 64 KiB | 2 |", "| tcp-process | send | 64 KiB | 2 |", "| memcpy | copy | 64 KiB |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	// The TCP-only pass (BENCH_TCP_SIZES, 1 MiB by default) runs in turns
	// with raw TCP to another process: its rows carry that baseline's rate
	// and the ratio marked as measured in turns; with BENCH_TCP_BESIDE=both
	// also beside the store-shaped baselines (puts: store, gets: cold).
	for _, want := range []string{"| put | 1 MiB | 2 |", "| get | 1 MiB | 1 |", "†", "measured in turns", "† store", "† cold"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	// The cluster pass (BENCH_CLUSTER_SIZES) runs against a master and an
	// appliance of their own: its rows say so.
	for _, want := range []string{"| put | 64 KiB | 1 | – · cluster |", "| get | 64 KiB | 2 | – · cluster |", "· cluster: against `kvtier master`", "cluster: kvtier master + kvtier appliance"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("results.md lacks %q:\n%s", want, md)
		}
	}
	for tool, row := range map[string]string{"redis-benchmark": "| redis | get | 64 KiB | 2 |", "iperf3": "| iperf3 | stream |", "fio": "| fio | seq-read |"} {
		if _, err := exec.LookPath(tool); err != nil {
			// "| iperf3 | stream |" -> "iperf3: skipped (not installed)", as bench.sh's skip writes it.
			row = strings.Trim(strings.SplitN(row, " |", 3)[0], "| ") + ": skipped (not installed)"
		}
		if !strings.Contains(string(md), strings.TrimSpace(row)) {
			t.Errorf("results.md lacks %q for %s", row, tool)
		}
	}
	for _, f := range []string{"results.json", "throughput.svg"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	// The work directory (SSD dir, server logs) is removed and no server is left.
	if m, _ := filepath.Glob(filepath.Join(dir, "kvtier-bench.*")); len(m) != 0 {
		t.Errorf("work directory left behind: %v", m)
	}
	for _, sub := range []string{"standalone", "master", "appliance"} {
		if pg, err := exec.Command("pgrep", "-f", fake+" "+sub).Output(); err == nil && len(pg) > 0 {
			t.Errorf("fake %s still running: %s", sub, pg)
		}
	}
}
