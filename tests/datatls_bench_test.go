package tests

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"testing"

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
	putGetVersus(b, "tls", [2]string{"tcp", "tls"}, [2]*client.Client{clPlain, clTLS})
}
