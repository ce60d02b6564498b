package tests

import (
	"context"
	"path/filepath"
	"testing"

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
	putGetVersus(b, "auth", [2]string{"open", "tokens"}, [2]*client.Client{clOpen, clAuth})
}
