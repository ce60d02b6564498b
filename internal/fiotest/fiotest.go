// Package fiotest runs fio as the baseline of a storage benchmark: the same
// file, block size and queue depth as the code under test, direct I/O,
// libaio, time-based, its JSON output parsed. Only benchmarks import it.
package fiotest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ErrNotInstalled is returned when no fio binary is on PATH; a benchmark
// reports the baseline as skipped, never faked.
var ErrNotInstalled = errors.New("fio not installed")

// Result is what fio measured for the job's direction.
type Result struct {
	IOPS float64
	MBps float64 // 10^6 bytes per second
}

// Run runs fio on path for d: rw is fio's --rw (read, write, randread,
// randwrite), bs the block size, qd the iodepth.
func Run(path, rw string, bs, qd int, d time.Duration) (Result, error) {
	bin, err := exec.LookPath("fio")
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrNotInstalled, err)
	}
	out, err := exec.Command(bin, "--name=kvtier", "--filename="+path, "--rw="+rw, "--bs="+strconv.Itoa(bs),
		"--iodepth="+strconv.Itoa(qd), "--ioengine=libaio", "--direct=1", "--time_based",
		"--runtime="+strconv.Itoa(max(int(d/time.Second), 1)), "--output-format=json").Output()
	if err != nil {
		return Result{}, fmt.Errorf("fio: %w", err)
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
		return Result{}, fmt.Errorf("fio output not understood: %v", err)
	}
	s := j.Jobs[0].Read
	if strings.HasSuffix(rw, "write") {
		s = j.Jobs[0].Write
	}
	return Result{IOPS: s.IOPS, MBps: s.BWBytes / 1e6}, nil
}
