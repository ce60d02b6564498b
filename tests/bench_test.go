package tests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"kvtier/client"
	"kvtier/dram"
)

// rawTCP measures a plain Go sender/receiver moving size-byte messages over
// loopback: the physical limit kvtier is compared against in the same run.
func rawTCP(b *testing.B, size, total int) float64 {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer lis.Close()
	done := make(chan error, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		for n := 0; n < total; n += size {
			if _, err := io.ReadFull(c, buf); err != nil {
				done <- err
				return
			}
		}
		_, err = c.Write([]byte{1})
		done <- err
	}()
	c, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	msg := make([]byte, size)
	start := time.Now()
	for n := 0; n < total; n += size {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return float64(total) / time.Since(start).Seconds()
}

// BenchmarkClientPutGet: Put and Get between this process (the client) and
// an appliance process over loopback, beside raw TCP moving the same bytes in
// the same run. Metric: GB/s and the ratio to raw TCP.
//
//	go test -run '^$' -bench BenchmarkClientPutGet -benchtime 2s ./tests/
func BenchmarkClientPutGet(b *testing.B) {
	if testing.Short() {
		b.Skip("multi-process benchmark skipped under -short")
	}
	m := startBenchCluster(b)
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		val := bytes.Repeat([]byte{0xab}, size)
		keys := min(64, (128<<20)/size) // stay well inside the appliance's DRAM
		for _, op := range []string{"put", "get"} {
			b.Run(fmt.Sprintf("%s/%dKiB", op, size>>10), func(b *testing.B) {
				ctx := context.Background()
				cl := m.newClient(b)
				if op == "get" {
					for i := range keys {
						if err := cl.Put(ctx, fmt.Sprintf("bench/%d/%d", size, i), val); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.SetBytes(int64(size))
				b.SetParallelism(2) // 2 x GOMAXPROCS callers: RPC latency overlaps transfers
				var seq atomic.Int64
				b.ResetTimer()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					buf := make([]byte, size)
					for pb.Next() {
						i := seq.Add(1)
						var err error
						if op == "put" {
							key := fmt.Sprintf("bench/put/%d/%d", size, i)
							err = cl.Put(ctx, key, val)
							if err == nil {
								err = cl.Remove(ctx, key, true)
							}
						} else {
							_, err = cl.GetInto(ctx, fmt.Sprintf("bench/%d/%d", size, i%int64(keys)), buf)
						}
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
				elapsed := time.Since(start)
				b.StopTimer()
				kv := float64(size) * float64(b.N) / elapsed.Seconds()
				raw := rawTCP(b, size, max(64<<20, size*8))
				b.ReportMetric(kv/1e9, "GB/s")
				b.ReportMetric(raw/1e9, "rawTCP-GB/s")
				b.ReportMetric(kv/raw, "x-rawTCP")
			})
		}
	}
}

// BenchmarkSameProcessGet: a client that serves its own segment reads
// through the local memcpy path; compared with copy() of the same bytes.
func BenchmarkSameProcessGet(b *testing.B) {
	ip := startInprocB(b)
	c, err := client.New(context.Background(), client.Config{MasterAddr: ip, GlobalSegmentSize: 64 << 20, Hugepages: dram.HugepageOff})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, size := range []int{1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			ctx := context.Background()
			val := bytes.Repeat([]byte{1}, size)
			key := fmt.Sprintf("local/%d", size)
			if err := c.Put(ctx, key, val); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, size)
			b.SetBytes(int64(size))
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if _, err := c.GetInto(ctx, key, buf); err != nil {
					b.Fatal(err)
				}
			}
			kv := float64(size*b.N) / time.Since(start).Seconds()
			b.StopTimer()
			n := max(b.N, 16)
			start = time.Now()
			for range n {
				copy(buf, val)
			}
			mc := float64(size*n) / time.Since(start).Seconds()
			b.ReportMetric(kv/1e9, "GB/s")
			b.ReportMetric(mc/1e9, "memcpy-GB/s")
			b.ReportMetric(kv/mc, "x-memcpy")
		})
	}
}
