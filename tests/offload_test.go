package tests

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"kvtier/api/kvtierpb"
	"kvtier/appliance"
	"kvtier/internal/kverr"
	"kvtier/master"
)

// TestOffloadDoesNotWaitForHeartbeats: an appliance whose heartbeats come
// once an hour still offloads every object as soon as its put ends
// (TakeOffload), so a stream of puts three times the size of DRAM goes
// through: DRAM frees itself by evicting objects that reached SSD, and
// every object reads back byte for byte. Before TakeOffload, offload tasks
// travelled only on heartbeats, and these puts stalled once DRAM was full
// (NO_AVAILABLE_HANDLE until the next beat).
func TestOffloadDoesNotWaitForHeartbeats(t *testing.T) {
	ip := startInproc(t, master.Config{})
	ip.appliance(t, appliance.Config{Name: "box", DRAM: 16 << 20, SSDDir: t.TempDir(), SSDCapacity: 1 << 30,
		HeartbeatInterval: time.Hour})
	c := ip.client(t)
	ctx := context.Background()
	const n, size = 48, 1 << 20
	values := make([][]byte, n)
	for i := range values {
		values[i] = randomBytes(uint64(9000+i), size)
		key := fmt.Sprintf("stream/%02d", i)
		// Puts meeting a DRAM full of objects whose offload is still
		// running are refused (NO_AVAILABLE_HANDLE) and retried, as a
		// client would; each must get through within seconds.
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := c.Put(ctx, key, values[i])
			if err == nil {
				break
			}
			if !kverr.Is(err, kverr.NoAvailableHandle) || time.Now().After(deadline) {
				t.Fatalf("put %s (DRAM 16 MiB, %d MiB put so far): %v", key, i, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	onDisk := 0
	for i := range values {
		key := fmt.Sprintf("stream/%02d", i)
		info, err := c.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range info.Replicas {
			if r.Type == kvtierpb.ReplicaType_LOCAL_DISK && r.State == kvtierpb.ReplicaState_COMPLETE {
				onDisk++
			}
		}
		got, err := c.Get(ctx, key)
		if err != nil || !bytes.Equal(got, values[i]) {
			t.Fatalf("get %s: %v (bytes equal: %v)", key, err, bytes.Equal(got, values[i]))
		}
	}
	if onDisk < n-16 { // all but what DRAM still holds unoffloaded, at most
		t.Fatalf("only %d of %d objects reached SSD", onDisk, n)
	}
}
