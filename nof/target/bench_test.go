package target_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"kvtier/nof/initiator"
	"kvtier/nof/namespace"
	"kvtier/nof/target"
)

// Benchmarks: our initiator against our target over loopback, beside fio
// on the same backing file in the same run. Run with
//
//	go test -run XXX -bench . -benchtime 1x ./nof/target/
//
// KVTIER_NOF_BENCH_SECONDS sets each measurement's duration (default 3).

const spdkRandRead4KQD32 = 118139 // IOPS SPDK's target reached in the lab (tool-output/bench-randread-4k-q32.txt)

func benchDuration() time.Duration {
	if s, err := strconv.Atoi(os.Getenv("KVTIER_NOF_BENCH_SECONDS")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 3 * time.Second
}

// backingFile creates a 256 MiB file of random-ish data.
func backingFile(b *testing.B) string {
	path := filepath.Join(b.TempDir(), "backing.img")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 31)
	}
	for i := 0; i < 256; i++ {
		buf[0] = byte(i)
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	f.Sync()
	f.Close()
	return path
}

type fioResult struct{ iops, mbps float64 }

func runFio(b *testing.B, path, rw string, bs, qd int, d time.Duration) (fioResult, bool) {
	bin, err := exec.LookPath("fio")
	if err != nil {
		b.Logf("fio not installed: no baseline (%v)", err)
		return fioResult{}, false
	}
	out, err := exec.Command(bin, "--name=kvtier", "--filename="+path, "--rw="+rw, "--bs="+strconv.Itoa(bs),
		"--iodepth="+strconv.Itoa(qd), "--ioengine=libaio", "--direct=1", "--time_based",
		"--runtime="+strconv.Itoa(int(d/time.Second)), "--output-format=json").Output()
	if err != nil {
		b.Fatalf("fio: %v", err)
	}
	var j struct {
		Jobs []struct {
			Read, Write struct {
				IOPS    float64 `json:"iops"`
				BWBytes float64 `json:"bw_bytes"`
			}
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &j); err != nil || len(j.Jobs) == 0 {
		b.Fatalf("fio json: %v", err)
	}
	s := j.Jobs[0].Read
	if rw == "write" || rw == "randwrite" {
		s = j.Jobs[0].Write
	}
	return fioResult{s.IOPS, s.BWBytes / 1e6}, true
}

func benchTarget(b *testing.B, ns namespace.Namespace) *initiator.Controller {
	_, addr := newTarget(b, target.Config{C2HSuccess: os.Getenv("KVTIER_C2H") != ""}, target.Subsystem{Namespaces: []namespace.Namespace{ns}})
	return dial(b, addr, initiator.Config{QueueDepth: 128})
}

func perf(b *testing.B, c *initiator.Controller, rw string, bs, qd int) initiator.PerfResult {
	var r initiator.PerfResult
	var err error
	for i := 0; i < b.N; i++ {
		r, err = initiator.Perf(context.Background(), c, initiator.PerfConfig{RW: rw, BlockSize: bs, QueueDepth: qd, Duration: benchDuration()})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("%s bs %d qd %d: %.0f IOPS, %.1f MB/s, p50 %v, p99 %v", rw, bs, qd, r.IOPS, r.MBps, r.P50, r.P99)
	return r
}

func benchFile(b *testing.B, rw, fioRW string, bs, qd int) {
	path := backingFile(b)
	fr, haveFio := runFio(b, path, fioRW, bs, qd, benchDuration())
	f, err := namespace.OpenFile(path, namespace.FileConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	c := benchTarget(b, f)
	b.ResetTimer()
	r := perf(b, c, rw, bs, qd)
	b.ReportMetric(r.IOPS, "IOPS")
	b.ReportMetric(r.MBps, "MB/s")
	b.ReportMetric(float64(r.P99.Microseconds()), "p99-µs")
	if haveFio {
		b.Logf("fio %s on the same file: %.0f IOPS, %.1f MB/s", fioRW, fr.iops, fr.mbps)
		b.ReportMetric(fr.iops, "fio-IOPS")
		b.ReportMetric(r.IOPS/fr.iops, "ratio-vs-fio")
	}
}

func BenchmarkRandRead4KQD32File(b *testing.B) { benchFile(b, "randread", "randread", 4096, 32) }
func BenchmarkSeqRead128KFile(b *testing.B)    { benchFile(b, "read", "read", 128<<10, 8) }
func BenchmarkSeqWrite128KFile(b *testing.B)   { benchFile(b, "write", "write", 128<<10, 8) }

// BenchmarkRandRead4KQD32Memory measures the protocol path alone (a DRAM
// namespace, as the appliance exports segments) against the goal of half
// of SPDK's lab figure.
func BenchmarkRandRead4KQD32Memory(b *testing.B) {
	mem, err := namespace.NewMemory(make([]byte, 256<<20), 512)
	if err != nil {
		b.Fatal(err)
	}
	c := benchTarget(b, mem)
	b.ResetTimer()
	r := perf(b, c, "randread", 4096, 32)
	b.ReportMetric(r.IOPS, "IOPS")
	b.ReportMetric(float64(r.P99.Microseconds()), "p99-µs")
	b.ReportMetric(r.IOPS/spdkRandRead4KQD32, "ratio-vs-spdk")
}

// BenchmarkSeq128KMemory is the protocol ceiling for 128 KiB transfers (no
// disk): what the file benchmarks could reach at best on this machine.
func BenchmarkSeq128KMemory(b *testing.B) {
	mem, err := namespace.NewMemory(make([]byte, 256<<20), 512)
	if err != nil {
		b.Fatal(err)
	}
	c := benchTarget(b, mem)
	b.ResetTimer()
	for _, rw := range []string{"read", "write"} {
		r := perf(b, c, rw, 128<<10, 8)
		b.ReportMetric(r.MBps, rw+"-MB/s")
	}
}
