package tests

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
)

// BenchmarkGrantRevocationCost measures what early grant revocation
// (internal/grant Revocations) adds to the granted data path: two `kvtier
// standalone` processes in the same run, both signing grants, one started
// with --no-grant-revocation (the code before revocation: grants live
// until their expiry), each driven by its own SDK client over loopback
// TCP (shared memory off, no lease cache or replica hints, so every get
// asks the master and its grant is checked). Operations alternate between
// the two one by one (alternating which goes first) so both see the same
// machine load; every put is removed right after it, so free records
// keep feeding the revocation table (and its drain) while it is measured.
//
//	go test -run '^$' -bench GrantRevocationCost -benchtime 400x -count 3 ./tests/
//
// Reports revoke-MB/s, norevoke-MB/s and x-norevoke (revoke / norevoke),
// from medians.
func BenchmarkGrantRevocationCost(b *testing.B) {
	if testing.Short() {
		b.Skip("multi-process benchmark skipped under -short")
	}
	ctx := context.Background()
	mk := func(revoke bool) *client.Client {
		args := []string{"standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--name", fmt.Sprintf("revoke-bench-%v", revoke), "--dram", "256MiB", "--ssd-dir", "", "--offload", "off",
			"--shm=false", "--cpuprofile", ""}
		if !revoke {
			args = append(args, "--no-grant-revocation")
		}
		m := startProcB(b, args...)
		probeRevocation(b, m["grpc"], revoke)
		cl, err := client.New(ctx, client.Config{MasterAddr: m["grpc"], LeaseCacheKeys: -1, ReplicaHints: -1,
			Transfer: transfer.Config{DisableSharedMemory: true}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cl.Close() })
		return cl
	}
	revoking, base := mk(true), mk(false)
	alternateMedians(b, "revoke", 11, [2]string{"revoke", "norevoke"}, [2]*client.Client{revoking, base}, func(cl *client.Client, key string) {
		if err := cl.Remove(ctx, key, true); err != nil {
			b.Fatal(err)
		}
	})
}

// probeRevocation checks that the box at addr is what the benchmark says:
// a write grant of a removed object is refused (revoke) or still served
// (the baseline) before its expiry.
func probeRevocation(b *testing.B, addr string, revoke bool) {
	ctx := context.Background()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ms := kvtierpb.NewMasterClient(conn)
	eng, err := transfer.New(transfer.Config{DisableSharedMemory: true})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close()
	ps, err := ms.PutStart(ctx, &kvtierpb.PutStartRequest{ClientId: "probe", Key: []byte("probe"), Size: 4096})
	if err != nil {
		b.Fatal(err)
	}
	r := ps.Replicas[0]
	write := func() error {
		return eng.Do(ctx, []transfer.Request{{Op: transfer.Write, Endpoint: r.Endpoint, Segment: r.Segment, Offset: r.Offset,
			Buf: make([]byte, 4096), Grant: r.Grant}})[0]
	}
	if err := write(); err != nil {
		b.Fatal(err)
	}
	if _, err := ms.PutEnd(ctx, &kvtierpb.KeyRequest{ClientId: "probe", Key: []byte("probe")}); err != nil {
		b.Fatal(err)
	}
	if _, err := ms.Remove(ctx, &kvtierpb.KeyRequest{ClientId: "probe", Key: []byte("probe"), Force: true}); err != nil {
		b.Fatal(err)
	}
	err = write()
	if revoke != (kverr.CodeOf(err) == kverr.PermissionDenied) {
		b.Fatalf("revocation %v: a removed object's write grant got %v", revoke, err)
	}
}
