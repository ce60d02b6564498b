package tests

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
)

func hasReplica(info *kvtierpb.ObjectInfo, typ kvtierpb.ReplicaType) bool {
	for _, r := range info.Replicas {
		if r.Type == typ && r.State == kvtierpb.ReplicaState_COMPLETE {
			return true
		}
	}
	return false
}

// TestOffloadEvictionAndRestart: with offload immediate, every object gets an
// SSD copy; filling DRAM past the watermark evicts DRAM replicas while the
// objects stay readable from SSD with the same bytes; after the appliance is
// killed and restarted on the same SSD directory, every object is registered
// again and readable.
func TestOffloadEvictionAndRestart(t *testing.T) {
	c := startCluster(t, "--offload", "immediate", "--high-watermark", "0.8", "--eviction-ratio", "0.2")
	ssdDir := t.TempDir()
	box := c.appliance("ssd-box", "--dram", "32MiB", "--ssd-dir", ssdDir, "--ssd-capacity", "1GiB")
	cl := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const n = 48 // 48 MiB of objects into 32 MiB of DRAM
	vals := putBlocksOnSSD(ctx, t, cl, n)
	evicted := 0
	for key, v := range vals {
		info, err := cl.Stat(ctx, key)
		if err != nil {
			t.Fatalf("stat %s: %v", key, err)
		}
		if !hasReplica(info, kvtierpb.ReplicaType_MEMORY) {
			evicted++
		}
		got, err := cl.Get(ctx, key)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get %s: err %v, equal %v", key, err, bytes.Equal(got, v))
		}
	}
	if evicted == 0 {
		t.Fatal("48 MiB into 32 MiB of DRAM evicted nothing")
	}
	t.Logf("%d of %d objects evicted from DRAM, all read back from SSD", evicted, n)

	// Kill the box; restart it on the same SSD directory.
	box.kill()
	eventually(t, 20*time.Second, "objects gone while the box is down", func() bool {
		ok, err := cl.Exist(ctx, "block/000")
		return err == nil && !ok
	})
	c.appliance("ssd-box", "--dram", "32MiB", "--ssd-dir", ssdDir, "--ssd-capacity", "1GiB")
	eventually(t, 20*time.Second, "objects re-registered after restart", func() bool {
		ok, err := cl.Exist(ctx, "block/047")
		return err == nil && ok
	})
	for key, v := range vals {
		got, err := cl.Get(ctx, key)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("after restart, get %s: err %v", key, err)
		}
	}
}

// TestMasterRestartKeepsSSDObjects: a master restart does not silently empty
// the cache: appliances re-announce their segments on the next heartbeat and
// re-register their SSD objects, which are readable again.
func TestMasterRestartKeepsSSDObjects(t *testing.T) {
	port := freePort(t)
	args := append([]string{"master", "--grpc-addr", port, "--http-addr", "127.0.0.1:0"}, fastMasterArgs...)
	m := start(t, "master", args...)
	c := &cluster{t: t, master: m, grpc: m.addrs["grpc"]}
	c.appliance("box", "--ssd-dir", t.TempDir(), "--ssd-capacity", "256MiB")
	cl := c.client(t)
	ctx := context.Background()
	v := randomBytes(77, 256<<10)
	if err := cl.Put(ctx, "survivor", v); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "SSD copy written", func() bool {
		info, err := cl.Stat(ctx, "survivor")
		return err == nil && hasReplica(info, kvtierpb.ReplicaType_LOCAL_DISK)
	})
	m.stop(t)
	start(t, "master-again", args...)
	eventually(t, 20*time.Second, "object readable through the restarted master", func() bool {
		got, err := cl.Get(ctx, "survivor")
		return err == nil && bytes.Equal(got, v)
	})
	// The DRAM segment is back too: a new put succeeds.
	if err := cl.Put(ctx, "after-restart", []byte("x")); err != nil {
		t.Fatalf("put after master restart: %v", err)
	}
}

// putEvicting puts key into a store whose DRAM fills: a full DRAM is not a
// write error once eviction has freed room, so it retries while the
// evictor and the offload mover catch up.
func putEvicting(ctx context.Context, t *testing.T, cl *client.Client, key string, v []byte) {
	t.Helper()
	var err error
	for try := 0; try < 100; try++ {
		if err = cl.Put(ctx, key, v); !kverr.Is(err, kverr.NoAvailableHandle) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// putBlocksOnSSD puts n objects of 1 MiB ("block/NNN") into a store that
// offloads immediately and waits until each has a COMPLETE LOCAL_DISK
// replica; it returns them by key.
func putBlocksOnSSD(ctx context.Context, t *testing.T, cl *client.Client, n int) map[string][]byte {
	t.Helper()
	vals := map[string][]byte{}
	for i := range n {
		key := fmt.Sprintf("block/%03d", i)
		v := randomBytes(uint64(100+i), 1<<20)
		vals[key] = v
		putEvicting(ctx, t, cl, key, v)
	}
	eventually(t, 30*time.Second, "every object has a COMPLETE LOCAL_DISK replica", func() bool {
		for key := range vals {
			info, err := cl.Stat(ctx, key)
			if err != nil || !hasReplica(info, kvtierpb.ReplicaType_LOCAL_DISK) {
				return false
			}
		}
		return true
	})
	return vals
}
