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
	clOpen, clAuth := benchTCPClient(b, open["grpc"], ""), benchTCPClient(b, authd["grpc"], tokCliA)
	putGetVersus(b, "auth", [2]string{"open", "tokens"}, [2]*client.Client{clOpen, clAuth})
}

// BenchmarkTrustCost is issue #16's cost figure: put and get over TCP
// against a standalone with everything the issue adds (--credentials: a
// tenant's token on every master call; data-plane grants, revocable, on
// every data-port frame) beside one with neither (--data-grants=false, no
// credentials), same run, interleaved chunk by chunk, every get asking the
// master.
//
//	go test -run '^$' -bench BenchmarkTrustCost -benchtime 3s -count 3 ./tests/
func BenchmarkTrustCost(b *testing.B) {
	if testing.Short() {
		b.Skip("multi-process benchmark skipped under -short")
	}
	dir := b.TempDir()
	writeCredsB(b, dir)
	common := []string{"standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--dram", "256MiB", "--ssd-dir", "", "--offload", "off"}
	open := startProcB(b, append(common, "--name", "open-box", "--data-grants=false")...)
	secure := startProcB(b, append(common, "--name", "secure-box", "--credentials", filepath.Join(dir, "creds"))...)
	putGetVersus(b, "trust", [2]string{"open", "secure"}, [2]*client.Client{benchTCPClient(b, open["grpc"], ""), benchTCPClient(b, secure["grpc"], tokCliA)})
}

// benchTCPClient connects an SDK client that reaches the box over TCP only
// and asks the master on every get (no lease cache, no replica hints), so
// a master call's cost is never hidden.
func benchTCPClient(b *testing.B, addr, token string) *client.Client {
	c, err := client.New(context.Background(), client.Config{MasterAddr: addr, Token: token, LeaseCacheKeys: -1, ReplicaHints: -1,
		Transfer: transfer.Config{DisableSharedMemory: true}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}
