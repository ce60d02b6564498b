package tests

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/transfer"
)

// BenchmarkDataPortTLS: put and get over TCP (shared memory off) against an
// appliance serving its data port over TLS (--data-tls-cert) and, interleaved
// in the same run, against one serving plain TCP; each behind its own plain
// master, so only the data port differs. x-tcp = TLS rate / plain rate.
func BenchmarkDataPortTLS(b *testing.B) {
	if testing.Short() {
		b.Skip("multi-process benchmark skipped under -short")
	}
	dir := b.TempDir()
	pki := newTestPKI(b, dir, "ca")
	pki.issue(b, "data", "appliance", true)
	cluster := func(name string, extra ...string) string {
		m := startProcB(b, "master", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--offload", "off")
		startProcB(b, append([]string{"appliance", "--master", m["grpc"], "--name", name, "--dram", "256MiB", "--ssd-dir", "",
			"--data-addr", "127.0.0.1:0", "--shm=false"}, extra...)...)
		return m["grpc"]
	}
	plainAddr := cluster("plain-box")
	tlsAddr := cluster("tls-box", "--data-tls-cert", filepath.Join(dir, "data.pem"), "--data-tls-key", filepath.Join(dir, "data-key.pem"))
	pool := x509.NewCertPool()
	pool.AddCert(pki.ca)
	connect := func(addr string, tc *tls.Config) *client.Client {
		c, err := client.New(context.Background(), client.Config{MasterAddr: addr, LeaseCacheKeys: -1, ReplicaHints: -1,
			Transfer: transfer.Config{DisableSharedMemory: true, ClientTLS: tc}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	clPlain, clTLS := connect(plainAddr, nil), connect(tlsAddr, &tls.Config{RootCAs: pool})
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
							if err := cl.Put(ctx, fmt.Sprintf("tls/%d/%d", size, i), val); err != nil {
								b.Fatal(err)
							}
						}
						return &contender{name: name, run: func(n int64) (time.Duration, error) {
							return parallel(1, n, func(_ int, i int64) error {
								_, err := cl.GetInto(ctx, fmt.Sprintf("tls/%d/%d", size, i%nkeys), buf)
								return err
							})
						}}
					}
					return &contender{name: name, run: func(n int64) (time.Duration, error) {
						return parallel(1, n, func(int, int64) error {
							k := fmt.Sprintf("tls/put/%d/%d", size, seq.Add(1))
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
				cp, ct := mk("tcp", clPlain), mk("tls", clTLS)
				b.SetBytes(int64(size))
				b.ResetTimer()
				interleave(b, max(int64((64<<20)/size), 1), cp, ct)
				b.StopTimer()
				b.ReportMetric(cp.rate(size)/1e9, "tcp-GB/s")
				b.ReportMetric(ct.rate(size)/1e9, "tls-GB/s")
				b.ReportMetric(ct.rate(size)/cp.rate(size), "x-tcp")
			})
		}
	}
}
