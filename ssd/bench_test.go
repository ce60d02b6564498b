package ssd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ncw/directio"
)

// fioRun is one fio baseline: its command line and throughput.
type fioRun struct {
	cmd string
	bps float64 // bytes per second
	err error
}

// runFio runs fio with direct=1 in dir (same file system as the tier) and
// returns its throughput, parsed from --output-format=json.
func runFio(dir, rw string, bs, total int, extra ...string) fioRun {
	args := []string{
		"--name=kvtier-baseline", "--directory=" + dir, "--filename=fio-" + rw + ".dat",
		"--rw=" + rw, "--bs=" + strconv.Itoa(bs), "--size=" + strconv.Itoa(total),
		"--direct=1", "--ioengine=psync", "--iodepth=1", "--numjobs=1", "--output-format=json",
	}
	args = append(args, extra...)
	r := fioRun{cmd: "fio " + strings.Join(args, " ")}
	out, err := exec.Command("fio", args...).Output()
	_ = os.Remove(filepath.Join(dir, "fio-"+rw+".dat"))
	if err != nil {
		r.err = fmt.Errorf("fio: %v", err)
		return r
	}
	var j struct {
		Jobs []struct {
			Read struct {
				BwBytes float64 `json:"bw_bytes"`
			} `json:"read"`
			Write struct {
				BwBytes float64 `json:"bw_bytes"`
			} `json:"write"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &j); err != nil || len(j.Jobs) == 0 {
		r.err = fmt.Errorf("fio output not understood: %v", err)
		return r
	}
	r.bps = j.Jobs[0].Read.BwBytes
	if rw == "write" {
		r.bps = j.Jobs[0].Write.BwBytes
	}
	if r.bps <= 0 {
		r.err = fmt.Errorf("fio reported no throughput")
	}
	return r
}

// BenchmarkSSD measures sequential Put and ReadExtent of 1 MiB and 4 MiB
// objects (Block-aligned buffers, as the appliance's segments are) and, in
// the same run, fio with direct=1 and the same block size in a directory
// next to the tier's. The b.N operations run in up to four rounds, each
// followed by fio moving the same number of bytes (at least 32 MiB), so both
// see the same noise of a shared machine; kvtier/fio is the ratio of the
// summed throughputs (target >= 0.85). Put also reports kvtier/fio-fdatasync
// against fio syncing every block, the durability Put gives (data and
// metadata fdatasync'd before it returns).
func BenchmarkSSD(b *testing.B) {
	base := b.TempDir()
	_, fioErr := exec.LookPath("fio")
	if fioErr != nil {
		b.Logf("fio baseline skipped: fio not installed (%v)", fioErr)
	}
	const total = 256 << 20
	for _, size := range []int{1 << 20, 4 << 20} {
		name := fmt.Sprintf("%dMiB", size>>20)
		v := directio.AlignedBlock(size)
		copy(v, value(1, size))
		crc := Checksum(v)

		b.Run("Put/"+name, func(b *testing.B) {
			dir, _ := os.MkdirTemp(base, "tier")
			defer os.RemoveAll(dir)
			tr, err := Open(context.Background(), Config{Dir: dir, Capacity: 4 << 30})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			compare(b, fioErr, base, "write", size, func(i int) error {
				_, err := tr.Put(context.Background(), "t", strconv.Itoa(i), v, crc)
				return err
			}, 1, 32<<20)
		})

		// The appliance's offload mover runs several Puts at once: their
		// data writes overlap each other's fdatasyncs.
		b.Run("Put4Way/"+name, func(b *testing.B) {
			dir, _ := os.MkdirTemp(base, "tier")
			defer os.RemoveAll(dir)
			tr, err := Open(context.Background(), Config{Dir: dir, Capacity: 4 << 30})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			vs := make([][]byte, 4)
			for w := range vs {
				vs[w] = directio.AlignedBlock(size)
				copy(vs[w], v)
			}
			compare(b, fioErr, base, "write", size, func(i int) error {
				return fanOut(4, func(w int) error {
					_, err := tr.Put(context.Background(), "t", strconv.Itoa(i*4+w), vs[w], crc)
					return err
				})
			}, 4, 32<<20)
		})

		b.Run("ReadExtent/"+name, func(b *testing.B) {
			dir, _ := os.MkdirTemp(base, "tier")
			defer os.RemoveAll(dir)
			tr, err := Open(context.Background(), Config{Dir: dir, Capacity: 2 << 30})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			var locs []Location
			for i := 0; i < total/size; i++ {
				l, err := tr.Put(context.Background(), "t", strconv.Itoa(i), v, crc)
				if err != nil {
					b.Fatal(err)
				}
				locs = append(locs, l)
			}
			dst := directio.AlignedBlock(size)
			compare(b, fioErr, base, "read", size, func(i int) error {
				l := locs[i%len(locs)]
				return tr.ReadExtent(context.Background(), l.Bucket, l.Offset, dst)
			}, 1, total)
		})
	}
}

// fanOut runs f(0..n-1) concurrently and returns the first error.
func fanOut(n int, f func(w int) error) error {
	errs := make(chan error, n)
	for w := range n {
		go func() { errs <- f(w) }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// compare runs op b.N times in rounds, each followed by the fio baselines,
// and reports throughputs and ratios. Each op moves perOp objects of size.
//
// fio moves at least minFio bytes per round; reads use the size of the
// tier's data set, so that neither side reads a smaller, warmer file (the
// virtual disk's host may cache recent writes).
func compare(b *testing.B, fioErr error, dir, rw string, size int, op func(i int) error, perOp, minFio int) {
	variants := [][]string{nil}
	names := []string{"fio"}
	if rw == "write" {
		variants = append(variants, []string{"--fdatasync=1"})
		names = append(names, "fio-fdatasync")
	}
	rounds := min(b.N, 4)
	var kvTime time.Duration
	fioTime := make([]float64, len(variants)) // seconds
	fioBytes := make([]float64, len(variants))
	var cmds []string
	b.SetBytes(int64(size * perOp))
	b.ResetTimer()
	for r, i := 0, 0; r < rounds; r++ {
		n := b.N / rounds
		if r == rounds-1 {
			n = b.N - i
		}
		start := time.Now()
		for end := i + n; i < end; i++ {
			if err := op(i); err != nil {
				b.Fatal(err)
			}
		}
		kvTime += time.Since(start)
		if fioErr != nil {
			continue
		}
		b.StopTimer()
		bytes := max(n*size*perOp, minFio)
		for k, extra := range variants {
			res := runFio(dir, rw, size, bytes, extra...)
			if res.err != nil {
				b.Fatalf("fio baseline failed: %v (%s)", res.err, res.cmd)
			}
			fioTime[k] += float64(bytes) / res.bps
			fioBytes[k] += float64(bytes)
			if r == 0 {
				cmds = append(cmds, res.cmd)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	kv := float64(size*perOp) * float64(b.N) / kvTime.Seconds()
	b.ReportMetric(kv/1e6, "kvtier-MB/s")
	if fioErr != nil {
		return
	}
	for k, name := range names {
		fio := fioBytes[k] / fioTime[k]
		b.ReportMetric(fio/1e6, name+"-MB/s")
		b.ReportMetric(kv/fio, "kvtier/"+name)
		b.Logf("kvtier %.0f MB/s, %s %.0f MB/s (%d rounds): %s", kv/1e6, name, fio/1e6, rounds, cmds[k])
	}
}
