package ssd

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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

// fioVariant is one fio baseline of a benchmark: its metric name and the
// arguments that differ from the base command.
type fioVariant struct {
	name string
	args []string
}

// qd returns fio's arguments for depth writes or reads in flight on one
// file: psync for one (what a single writer does), libaio with iodepth
// otherwise (what depth concurrent writers of one bucket file do).
func qd(depth int) []string {
	if depth == 1 {
		return []string{"--ioengine=psync", "--iodepth=1"}
	}
	return []string{"--ioengine=libaio", "--iodepth=" + strconv.Itoa(depth)}
}

// writeBaselines are fio without syncs and with an fdatasync after every
// block, both at queue depth depth.
func writeBaselines(depth int) []fioVariant {
	return []fioVariant{
		{"fio", qd(depth)},
		{"fio-fdatasync", append(qd(depth), "--fdatasync=1")},
	}
}

// runFio runs fio with direct=1 in dir (same file system as the tier) and
// returns its throughput, parsed from --output-format=json.
func runFio(dir, rw string, bs, total int, extra ...string) fioRun {
	// An extra --filename (an existing file, e.g. the tier's own bucket
	// file, read with --readonly) replaces fio's own scratch file.
	own := !slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--filename=") })
	args := []string{"--name=kvtier-baseline"}
	if own {
		args = append(args, "--directory="+dir, "--filename=fio-"+rw+".dat")
	}
	args = append(args, "--rw="+rw, "--bs="+strconv.Itoa(bs), "--size="+strconv.Itoa(total),
		"--direct=1", "--numjobs=1", "--output-format=json")
	args = append(args, extra...)
	r := fioRun{cmd: "fio " + strings.Join(args, " ")}
	out, err := exec.Command("fio", args...).Output()
	if own {
		_ = os.Remove(filepath.Join(dir, "fio-"+rw+".dat"))
	}
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

// BenchmarkSSD measures sequential writes and reads of 1 MiB and 4 MiB
// objects (Block-aligned buffers, as the appliance's segments are) and, in
// the same run, fio with direct=1 and the same block size in a directory
// next to the tier's, at the same queue depth. The b.N operations run in up
// to four rounds, each followed by fio moving the same number of bytes (at
// least 32 MiB), so both see the same noise of a shared machine; kvtier/fio
// is the ratio of the summed throughputs (target >= 0.85), kvtier/fio-
// fdatasync the ratio to fio syncing every block. Every write round ends
// with Tier.Sync inside the timed section, so the commits' fdatasyncs are
// paid for. Each tier writes one object before the timer starts (its first
// bucket's creation is not what a sustained stream pays).
//
//   - Put: one writer, Put (durable on return: one commit per object).
//   - PutAsync: one writer, PutAsync (group commit); fio at queue depth 1.
//   - PutAsync2Way: two writers, as the appliance's two offload workers;
//     fio libaio at queue depth 2.
//   - Put4Way: four concurrent Puts; fio libaio at queue depth 4.
//   - ReadExtent: one reader; fio at queue depth 1. The tier reads a
//     1 MiB object with one pread, a 4 MiB object as four 1 MiB pieces in
//     flight (default Config.ReadPieces; see "Reads" in the package doc).
//
// BenchmarkReadPieces compares the two ways of reading in one stream.
func BenchmarkSSD(b *testing.B) {
	base := b.TempDir()
	_, fioErr := exec.LookPath("fio")
	if fioErr != nil {
		b.Logf("fio baseline skipped: fio not installed (%v)", fioErr)
	}
	const total = 256 << 20
	ctx := context.Background()
	for _, size := range []int{1 << 20, 4 << 20} {
		name := fmt.Sprintf("%dMiB", size>>20)
		vs := make([][]byte, 4)
		for w := range vs {
			vs[w] = directio.AlignedBlock(size)
			copy(vs[w], value(1, size))
		}
		v, crc := vs[0], Checksum(vs[0])
		openBench := func(b *testing.B, capacity uint64) *Tier {
			dir, _ := os.MkdirTemp(base, "tier")
			tr, err := Open(ctx, Config{Dir: dir, Capacity: capacity})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { tr.Close(); os.RemoveAll(dir) })
			if _, err := tr.Put(ctx, "t", "warm-up", v, crc); err != nil {
				b.Fatal(err)
			}
			return tr
		}

		b.Run("Put/"+name, func(b *testing.B) {
			tr := openBench(b, 4<<30)
			compare(b, fioErr, base, "write", size, writeBaselines(1), func(i int) error {
				_, err := tr.Put(ctx, "t", strconv.Itoa(i), v, crc)
				return err
			}, nil, 1, 32<<20)
		})

		b.Run("PutAsync/"+name, func(b *testing.B) {
			tr := openBench(b, 4<<30)
			compare(b, fioErr, base, "write", size, writeBaselines(1), func(i int) error {
				_, err := tr.PutAsync(ctx, "t", strconv.Itoa(i), v, crc)
				return err
			}, func() error { return tr.Sync(ctx) }, 1, 32<<20)
		})

		// The appliance's offload mover runs two workers, each streaming
		// PutAsync: two writers of one bucket file, each with its own
		// buffer, neither waiting for the other.
		b.Run("PutAsync2Way/"+name, func(b *testing.B) {
			tr := openBench(b, 4<<30)
			compareN(b, fioErr, base, "write", size, writeBaselines(2), 2, func(w, i int) error {
				_, err := tr.PutAsync(ctx, "t", strconv.Itoa(i), vs[w], crc)
				return err
			}, func() error { return tr.Sync(ctx) }, 32<<20)
		})

		b.Run("Put4Way/"+name, func(b *testing.B) {
			tr := openBench(b, 4<<30)
			compareN(b, fioErr, base, "write", size, writeBaselines(4), 4, func(w, i int) error {
				_, err := tr.Put(ctx, "t", strconv.Itoa(i), vs[w], crc)
				return err
			}, nil, 32<<20)
		})

		b.Run("ReadExtent/"+name, func(b *testing.B) {
			tr := openBench(b, 2<<30)
			var locs []Location
			for i := 0; i < total/size; i++ {
				l, err := tr.Put(ctx, "t", strconv.Itoa(i), v, crc)
				if err != nil {
					b.Fatal(err)
				}
				locs = append(locs, l)
			}
			dst := directio.AlignedBlock(size)
			// Besides fio on a file it has just laid out, fio reading the
			// tier's own first bucket file: the same blocks on the same
			// disk, written as long ago (a virtual disk's host may cache
			// what was written recently).
			same := append(qd(1), "--readonly", "--filename="+filepath.Join(tr.dir, dataName(locs[0].Bucket)))
			variants := []fioVariant{{"fio", qd(1)}, {"fio-samefile", same}}
			compare(b, fioErr, base, "read", size, variants, func(i int) error {
				l := locs[i%len(locs)]
				return tr.ReadExtent(ctx, l.Bucket, l.Offset, dst)
			}, nil, 1, total)
		})
	}
}

// compare runs op(i) for i in [0, b.N) on one goroutine; see compareN.
func compare(b *testing.B, fioErr error, dir, rw string, size int, variants []fioVariant, op func(i int) error, end func() error, perOp, minFio int) {
	_ = perOp // one object per op
	compareN(b, fioErr, dir, rw, size, variants, 1, func(_, i int) error { return op(i) }, end, minFio)
}

// compareN runs op(w, i) for i in [0, b.N) on writers goroutines (w is the
// goroutine, each taking the next i as it goes, no barrier between ops) in
// rounds, each ended by end (if not nil, inside the timed section) and
// followed by the fio baselines, and reports throughputs and ratios. Each op
// moves one object of size.
//
// kvtier/NAME is the ratio of the throughputs summed over all rounds;
// kvtier/NAME-median the median of the rounds' own ratios, which one stall
// of the shared disk during a single round (seen: a round at 9 MB/s)
// moves much less.
//
// fio moves at least minFio bytes per round; reads use the size of the
// tier's data set, so that neither side reads a smaller, warmer file (the
// virtual disk's host may cache recent writes).
func compareN(b *testing.B, fioErr error, dir, rw string, size int, variants []fioVariant, writers int, op func(w, i int) error, end func() error, minFio int) {
	rounds := min(b.N, 8)
	var kvTime time.Duration
	fioTime := make([]float64, len(variants)) // seconds
	fioBytes := make([]float64, len(variants))
	perRound := make([][]float64, len(variants)) // kvtier/fio of each round
	var cmds []string
	b.SetBytes(int64(size))
	b.ResetTimer()
	for r, i := 0, 0; r < rounds; r++ {
		n := b.N / rounds
		if r == rounds-1 {
			n = b.N - i
		}
		start := time.Now()
		var next atomic.Int64
		next.Store(int64(i))
		stop := int64(i + n)
		errs := make(chan error, writers)
		for w := range writers {
			go func() {
				for {
					j := next.Add(1) - 1
					if j >= stop {
						errs <- nil
						return
					}
					if err := op(w, int(j)); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		for range writers {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		i += n
		if end != nil {
			if err := end(); err != nil {
				b.Fatal(err)
			}
		}
		roundTime := time.Since(start)
		kvTime += roundTime
		if fioErr != nil {
			continue
		}
		b.StopTimer()
		bytes := max(n*size, minFio)
		for k, vr := range variants {
			res := runFio(dir, rw, size, bytes, vr.args...)
			if res.err != nil {
				b.Fatalf("fio baseline failed: %v (%s)", res.err, res.cmd)
			}
			fioTime[k] += float64(bytes) / res.bps
			fioBytes[k] += float64(bytes)
			perRound[k] = append(perRound[k], float64(n*size)/roundTime.Seconds()/res.bps)
			if r == 0 {
				cmds = append(cmds, res.cmd)
			}
		}
		b.StartTimer()
	}
	b.StopTimer()
	kv := float64(size) * float64(b.N) / kvTime.Seconds()
	b.ReportMetric(kv/1e6, "kvtier-MB/s")
	if fioErr != nil {
		return
	}
	for k, vr := range variants {
		fio := fioBytes[k] / fioTime[k]
		b.ReportMetric(fio/1e6, vr.name+"-MB/s")
		b.ReportMetric(kv/fio, "kvtier/"+vr.name)
		slices.Sort(perRound[k])
		med := perRound[k][len(perRound[k])/2]
		b.ReportMetric(med, "kvtier/"+vr.name+"-median")
		b.Logf("kvtier %.0f MB/s, %s %.0f MB/s (%d rounds; per-round ratios %.2f): %s", kv/1e6, vr.name, fio/1e6, rounds, perRound[k], cmds[k])
	}
}

// BenchmarkReadPieces compares ReadExtent's pieced read (ReadPieces 4,
// the default: a 4 MiB extent as four 1 MiB pieces in flight, each
// checksummed as it lands) with one pread per extent followed by its
// checksum (ReadPieces 1), the two taking turns object by object in one
// sequential stream over 128 MiB of objects, so that both see the same
// noise of the shared disk and CPU. pieced/whole is the ratio of their
// throughputs. For 1 MiB objects both ways are one pread (pieces are at
// least 1 MiB): that ratio shows the noise of the comparison itself. (Not
// matched by -bench SSD: run with -bench ReadPieces.)
func BenchmarkReadPieces(b *testing.B) {
	ctx := context.Background()
	for _, size := range []int{1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			tr, err := Open(ctx, Config{Dir: b.TempDir(), Capacity: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			v := directio.AlignedBlock(size)
			copy(v, value(2, size))
			var locs []Location
			for i := 0; i < (128<<20)/size; i++ {
				p, err := tr.PutAsync(ctx, "t", strconv.Itoa(i), v, 0)
				if err != nil {
					b.Fatal(err)
				}
				locs = append(locs, p.Location())
			}
			if err := tr.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			dst := directio.AlignedBlock(size)
			var took [2]time.Duration // whole, pieced
			var ops [2]int
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := range b.N {
				l := locs[i%len(locs)]
				way := i % 2 // 0: whole, 1: pieced
				tr.readPieces = 1 + 3*way
				start := time.Now()
				if err := tr.ReadExtent(ctx, l.Bucket, l.Offset, dst); err != nil {
					b.Fatal(err)
				}
				took[way] += time.Since(start)
				ops[way]++
			}
			b.StopTimer()
			reportTurns(b, size, ops, took, "whole", "pieced")
		})
	}
}

// reportTurns reports the throughputs of two ways that took turns and the
// second's ratio to the first.
func reportTurns(b *testing.B, size int, ops [2]int, took [2]time.Duration, first, second string) {
	if ops[0] == 0 || ops[1] == 0 {
		b.Logf("b.N too small for both ways to run (-benchtime of at least 2x)")
		return
	}
	a := float64(size) * float64(ops[0]) / took[0].Seconds()
	c := float64(size) * float64(ops[1]) / took[1].Seconds()
	b.ReportMetric(a/1e6, first+"-MB/s")
	b.ReportMetric(c/1e6, second+"-MB/s")
	b.ReportMetric(c/a, second+"/"+first)
}
