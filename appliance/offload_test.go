package appliance_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/master"
)

// startMasterWith is startMaster with offload immediate and server options
// (an interceptor).
func startMasterWith(t *testing.T, opts ...grpc.ServerOption) (string, kvtierpb.MasterClient) {
	t.Helper()
	return startMasterCfg(t, master.Config{OffloadMode: master.OffloadImmediate}, opts...)
}

// startMasterCfg runs a real master of cfg on a loopback gRPC server.
func startMasterCfg(t *testing.T, cfg master.Config, opts ...grpc.ServerOption) (string, kvtierpb.MasterClient) {
	t.Helper()
	m, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	kvtierpb.RegisterMasterServer(s, master.NewGRPCServer(m))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	go func() { _ = s.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); s.Stop(); cancel(); <-done })
	return lis.Addr().String(), kvtierpb.NewMasterClient(conn)
}

// TestOffloadReportsInBatches: an appliance offloads a burst of small
// objects and reports them in BatchOffloadDone calls (far fewer calls than
// objects), and every object gains its LOCAL_DISK replica at the location
// the SSD tier holds it. Against a master without BatchOffloadDone (an
// older one, stood in for by an interceptor answering Unimplemented: a
// fault this version of the master cannot produce) the appliance falls
// back to one OffloadDone per object after a single refused batch. A batch
// call that fails as a whole (the master unavailable for a moment, again
// an interceptor's fault) is sent again.
func TestOffloadReportsInBatches(t *testing.T) {
	for _, mode := range []string{"batch", "older-master", "flaky-master"} {
		older := mode == "older-master"
		t.Run(mode, func(t *testing.T) {
			var batches, singles, refused atomic.Int64
			count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				switch info.FullMethod {
				case kvtierpb.Master_BatchOffloadDone_FullMethodName:
					if older {
						refused.Add(1)
						return nil, status.Error(codes.Unimplemented, "unknown method BatchOffloadDone")
					}
					if mode == "flaky-master" && refused.Load() < 2 {
						refused.Add(1)
						return nil, status.Error(codes.Unavailable, "master restarting")
					}
					batches.Add(1)
				case kvtierpb.Master_OffloadDone_FullMethodName:
					singles.Add(1)
				}
				return h(ctx, req)
			}
			addr, mc := startMasterWith(t, grpc.UnaryInterceptor(count))
			ctx := context.Background()
			a, err := appliance.Start(ctx, appliance.Config{Name: "box", MasterAddr: addr, DRAM: 8 << 20,
				SSDDir: t.TempDir(), SSDCapacity: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(ctx)

			const n = 512
			keys := make([]string, n)
			vals := make([][]byte, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("obj-%04d", i)
				vals[i] = make([]byte, 4096)
				vals[i][0], vals[i][1] = byte(i), byte(i>>8)
			}
			for off := 0; off < n; off += 128 {
				for i, err := range a.Client().BatchPut(ctx, keys[off:off+128], vals[off:off+128]) {
					if err != nil {
						t.Fatalf("put %s: %v", keys[off+i], err)
					}
				}
			}
			deadline := time.Now().Add(30 * time.Second)
			for _, k := range keys {
				for {
					o, err := mc.GetObject(ctx, &kvtierpb.KeyRequest{Key: []byte(k)})
					if err != nil {
						t.Fatal(err)
					}
					var disk *kvtierpb.Replica
					for _, r := range o.GetReplicas() {
						if r.GetType() == kvtierpb.ReplicaType_LOCAL_DISK && r.GetState() == kvtierpb.ReplicaState_COMPLETE {
							disk = r
						}
					}
					if disk != nil {
						e, ok := a.Tier().Lookup(master.DefaultTenant, k)
						if !ok || e.Loc.Bucket != disk.GetBucket() || e.Loc.Offset != disk.GetOffset() || e.Size != 4096 {
							t.Fatalf("%s: master has %v, the tier %+v (%v)", k, disk, e, ok)
						}
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s has no disk replica after 30 s: %v", k, o.GetReplicas())
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			t.Logf("%d objects: %d BatchOffloadDone, %d OffloadDone calls, %d refused", n, batches.Load(), singles.Load(), refused.Load())
			if older {
				if refused.Load() != 1 || singles.Load() < n {
					t.Fatalf("older master: %d refused batches (want 1), %d single reports (want >= %d)", refused.Load(), singles.Load(), n)
				}
				return
			}
			if mode == "flaky-master" && refused.Load() != 2 {
				t.Fatalf("%d batch calls failed, want 2", refused.Load())
			}
			if singles.Load() != 0 || batches.Load() == 0 || batches.Load() > n/4 {
				t.Fatalf("%d batch and %d single reports for %d objects: not batched", batches.Load(), singles.Load(), n)
			}
		})
	}
}
