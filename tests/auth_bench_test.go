package tests

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/transfer"
)

// BenchmarkAuthCost: put and get over TCP against two standalones in the
// same run, one open and one with --credentials (a tenant's client token:
// every master call authenticated, tenant-checked and session-bound),
// interleaved chunk by chunk. Every get asks the master (no lease cache),
// so the token's cost is not hidden.
//
//	go test -run '^$' -bench BenchmarkAuthCost -benchtime 3s ./tests/
func BenchmarkAuthCost(b *testing.B) {
	if testing.Short() {
		b.Skip("multi-process benchmark skipped under -short")
	}
	dir := b.TempDir()
	writeCredsB(b, dir)
	common := []string{"standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--dram", "256MiB", "--ssd-dir", "", "--offload", "off"}
	open := startProcB(b, append(common, "--name", "open-box")...)
	authd := startProcB(b, append(common, "--name", "auth-box", "--credentials", filepath.Join(dir, "creds"))...)
	connect := func(addr, token string) *client.Client {
		c, err := client.New(context.Background(), client.Config{MasterAddr: addr, Token: token, LeaseCacheKeys: -1, ReplicaHints: -1,
			Transfer: transfer.Config{DisableSharedMemory: true}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	clOpen, clAuth := connect(open["grpc"], ""), connect(authd["grpc"], tokCliA)
	var seq atomic.Int64
	for _, size := range []int{64 << 10, 1 << 20} {
		for _, op := range []string{"put", "get"} {
			b.Run(fmt.Sprintf("%s/%dKiB", op, size>>10), func(b *testing.B) {
				ctx := context.Background()
				val := bytes.Repeat([]byte{0x5a}, size)
				buf := make([]byte, size)
				const nkeys = 32
				mk := func(name string, cl *client.Client) *contender {
					var keys []string
					if op == "get" {
						for i := range nkeys {
							if err := cl.Put(ctx, fmt.Sprintf("auth/%d/%d", size, i), val); err != nil {
								b.Fatal(err)
							}
						}
						return &contender{name: name, run: func(n int64) (time.Duration, error) {
							return parallel(1, n, func(_ int, i int64) error {
								_, err := cl.GetInto(ctx, fmt.Sprintf("auth/%d/%d", size, i%nkeys), buf)
								return err
							})
						}}
					}
					return &contender{name: name, run: func(n int64) (time.Duration, error) {
						return parallel(1, n, func(int, int64) error {
							k := fmt.Sprintf("auth/put/%d/%d", size, seq.Add(1))
							keys = append(keys, k)
							return cl.Put(ctx, k, val)
						})
					}, after: func(int64) {
						for _, err := range cl.BatchRemove(ctx, keys, false) {
							if err != nil {
								b.Fatal(err)
							}
						}
						keys = keys[:0]
					}}
				}
				co, ca := mk("open", clOpen), mk("tokens", clAuth)
				b.SetBytes(int64(size))
				b.ResetTimer()
				interleave(b, max(int64((64<<20)/size), 1), co, ca)
				b.StopTimer()
				b.ReportMetric(co.rate(size)/1e9, "open-GB/s")
				b.ReportMetric(ca.rate(size)/1e9, "tokens-GB/s")
				b.ReportMetric(ca.rate(size)/co.rate(size), "x-open")
			})
		}
	}
}
