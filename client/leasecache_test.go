package client_test

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/dram"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// startMaster runs a real master behind a real gRPC server on loopback and
// counts the GetReplicaList calls it answers.
func startMaster(t *testing.T, cfg master.Config) (string, *atomic.Int64) {
	t.Helper()
	m, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var lists atomic.Int64
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod == kvtierpb.Master_GetReplicaList_FullMethodName {
			lists.Add(1)
		}
		return h(ctx, req)
	}))
	kvtierpb.RegisterMasterServer(s, master.NewGRPCServer(m))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); cancel(); <-done })
	return lis.Addr().String(), &lists
}

func newClient(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLeaseCache: with LeaseCacheKeys, repeated reads reuse the running
// lease (one GetReplicaList), return the right bytes, and the client's own
// Remove drops the entry (the next read asks the master and gets
// OBJECT_NOT_FOUND). Without it, every read asks the master.
func TestLeaseCache(t *testing.T) {
	addr, lists := startMaster(t, master.Config{})
	ctx := context.Background()
	c := newClient(t, client.Config{MasterAddr: addr, GlobalSegmentSize: 8 << 20, Hugepages: dram.HugepageOff, LeaseCacheKeys: 16})
	val := bytes.Repeat([]byte("kvtier"), 50000)
	if err := c.Put(ctx, "k", val); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(val))
	for range 5 {
		n, err := c.GetInto(ctx, "k", buf)
		if err != nil || !bytes.Equal(buf[:n], val) {
			t.Fatalf("GetInto: %d bytes, %v", n, err)
		}
	}
	if got, err := c.Get(ctx, "k"); err != nil || !bytes.Equal(got, val) {
		t.Fatalf("Get: %v", err)
	}
	if n := lists.Load(); n != 1 {
		t.Fatalf("%d GetReplicaList calls for 6 reads within one lease, want 1", n)
	}
	if _, err := c.GetInto(ctx, "k", buf[:10]); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("short buffer: %v, want INVALID_PARAMS", err)
	}
	if err := c.Remove(ctx, "k", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "k"); !kverr.Is(err, kverr.ObjectNotFound) {
		t.Fatalf("get after own remove: %v, want OBJECT_NOT_FOUND", err)
	}

	// A margin longer than the lease: nothing is ever reused.
	lists.Store(0)
	c2 := newClient(t, client.Config{MasterAddr: addr, GlobalSegmentSize: 8 << 20, Hugepages: dram.HugepageOff, LeaseCacheKeys: 16, LeaseCacheMargin: time.Hour})
	if err := c2.Put(ctx, "k2", val); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c2.GetInto(ctx, "k2", buf); err != nil {
			t.Fatal(err)
		}
	}
	if n := lists.Load(); n != 3 {
		t.Fatalf("%d GetReplicaList calls, want 3 (lease shorter than the margin)", n)
	}
}

// TestLeaseCacheBounded: the cache never holds more than LeaseCacheKeys
// entries, and every key still reads back correctly.
func TestLeaseCacheBounded(t *testing.T) {
	addr, lists := startMaster(t, master.Config{})
	ctx := context.Background()
	c := newClient(t, client.Config{MasterAddr: addr, GlobalSegmentSize: 8 << 20, Hugepages: dram.HugepageOff, LeaseCacheKeys: 2})
	keys := []string{"a", "b", "c", "d"}
	for i, k := range keys {
		if err := c.Put(ctx, k, bytes.Repeat([]byte{byte(i + 1)}, 4096)); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		for i, k := range keys {
			got, err := c.Get(ctx, k)
			if err != nil || !bytes.Equal(got, bytes.Repeat([]byte{byte(i + 1)}, 4096)) {
				t.Fatalf("%s: %v", k, err)
			}
		}
	}
	// 12 reads cycling over 4 keys through a 2-entry cache: at most 2 hits
	// per round after the first, so at least 8 master calls; an unbounded
	// cache would make only 4.
	if n := lists.Load(); n < 8 || n > 12 {
		t.Fatalf("%d GetReplicaList calls for 12 reads of 4 keys with 2 cache entries, want 8..12", n)
	}
}

func TestConfigValidateLeaseMargin(t *testing.T) {
	cfg := client.Config{MasterAddr: "127.0.0.1:1", LeaseCacheMargin: -time.Second}
	if err := cfg.Validate(); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("negative margin: %v, want INVALID_PARAMS", err)
	}
}

// TestLeaseCacheReadsReachTheMaster: reads served from the lease cache are
// reported with the next heartbeat, so the master's read count (what its
// frequency policy ranks by) includes them; a reader with the cache off
// is counted read by read.
func TestLeaseCacheReadsReachTheMaster(t *testing.T) {
	addr, lists := startMaster(t, master.Config{})
	ctx := context.Background()
	// A long heartbeat interval: the test sends the beat itself.
	c := newClient(t, client.Config{MasterAddr: addr, GlobalSegmentSize: 8 << 20, Hugepages: dram.HugepageOff, HeartbeatInterval: time.Hour})
	val := bytes.Repeat([]byte("lease"), 1000)
	if err := c.Put(ctx, "hot", val); err != nil {
		t.Fatal(err)
	}
	for range 7 {
		if _, err := c.Get(ctx, "hot"); err != nil {
			t.Fatal(err)
		}
	}
	if n := lists.Load(); n != 1 {
		t.Fatalf("%d GetReplicaList calls for 7 reads by default, want 1 (lease cache on by default)", n)
	}
	info, err := c.Stat(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	if info.ReadCount != 1 {
		t.Fatalf("read count %d before the heartbeat, want 1", info.ReadCount)
	}
	c.Heartbeat(ctx)
	if info, err = c.Stat(ctx, "hot"); err != nil || info.ReadCount != 7 {
		t.Fatalf("read count %d after the heartbeat (%v), want 7", info.GetReadCount(), err)
	}
	c.Heartbeat(ctx) // nothing new: the count must not grow again
	if info, err = c.Stat(ctx, "hot"); err != nil || info.ReadCount != 7 {
		t.Fatalf("read count %d after a second heartbeat (%v), want still 7", info.GetReadCount(), err)
	}

	off := newClient(t, client.Config{MasterAddr: addr, LeaseCacheKeys: -1, HeartbeatInterval: time.Hour})
	for range 3 {
		if _, err := off.Get(ctx, "hot"); err != nil {
			t.Fatal(err)
		}
	}
	if info, err = c.Stat(ctx, "hot"); err != nil || info.ReadCount != 10 {
		t.Fatalf("read count %d after 3 uncached reads (%v), want 10", info.GetReadCount(), err)
	}
}
