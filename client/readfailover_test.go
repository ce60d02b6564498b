package client_test

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/transfer"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/master"
)

// A replica that fails once the read lease has ended (its box stopped
// answering and held the read for IOTimeout) leaves the other replicas
// untried: their grants ended with the lease and they would refuse. The
// read answers LEASE_EXPIRED, which get turns into a fresh query, instead
// of trying them (a CLI get of a 2-replica object with one box stopped
// failed after its whole 60 s, the second replica refusing an expired
// grant).
func TestReadAfterTheLeaseQueriesAgain(t *testing.T) {
	addr, _ := startMaster(t, master.Config{})
	c := newClient(t, client.Config{MasterAddr: addr, Transfer: client.TransferConfig{DisableSharedMemory: true, RDMADevice: "off"}})
	// The first replica's box hangs up at once; the second counts who dials it.
	listen := func(accepted *atomic.Int32) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				nc, err := ln.Accept()
				if err != nil {
					return
				}
				if accepted != nil {
					accepted.Add(1)
				}
				nc.Close()
			}
		}()
		return ln.Addr().String()
	}
	var second atomic.Int32
	rl := &client.ReplicaList{Size: 64, LeaseDeadline: time.Now().Add(-time.Second), Replicas: []*kvtierpb.Replica{
		{Type: kvtierpb.ReplicaType_MEMORY, Segment: "a/mem0", Endpoint: listen(nil), Length: 64},
		{Type: kvtierpb.ReplicaType_MEMORY, Segment: "b/mem0", Endpoint: listen(&second), Length: 64},
	}}
	err := client.ReadReplicas(c, context.Background(), "k", rl, make([]byte, 64))
	if !kverr.Is(err, kverr.LeaseExpired) {
		t.Fatalf("read past the lease with a failed replica: %v, want LEASE_EXPIRED", err)
	}
	if n := second.Load(); n != 0 {
		t.Fatalf("the second replica was dialled %d times with grants the lease had ended", n)
	}
}

// A replica whose box takes the frame and never answers (stopped, or cut
// off) gives way to the next replica within half of what was left of the
// lease, while the next one's grant still runs: the engine abandons the
// frame on the wire (transfer.Engine.Do) instead of holding the read for
// its IOTimeout (30 s here), and is listed last by the next reads. A CLI
// get of a 2-replica object with one box stopped took 30 s before.
func TestStalledReplicaGivesWayWithinTheLease(t *testing.T) {
	addr, _ := startMaster(t, master.Config{})
	c := newClient(t, client.Config{MasterAddr: addr, Transfer: client.TransferConfig{DisableSharedMemory: true, RDMADevice: "off"}})
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			nc, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { nc.Close() }) // reads nothing, answers nothing
		}
	}()
	box, err := transfer.New(transfer.Config{DisableSharedMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { box.Close() })
	want := bytes.Repeat([]byte("kvtier"), 1000)
	if err := box.RegisterSegment("b/mem0", append([]byte(nil), want...)); err != nil {
		t.Fatal(err)
	}
	boxAddr, err := box.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rl := &client.ReplicaList{Size: uint64(len(want)), LeaseDeadline: time.Now().Add(2 * time.Second), Replicas: []*kvtierpb.Replica{
		{Type: kvtierpb.ReplicaType_MEMORY, Segment: "a/mem0", Endpoint: silent.Addr().String(), Length: uint64(len(want))},
		{Type: kvtierpb.ReplicaType_MEMORY, Segment: "b/mem0", Endpoint: boxAddr.String(), Length: uint64(len(want))},
	}}
	got := make([]byte, len(want))
	start := time.Now()
	if err := client.ReadReplicas(c, context.Background(), "k", rl, got); err != nil {
		t.Fatalf("read with the first replica's box silent: %v", err)
	}
	if d := time.Since(start); d > 1800*time.Millisecond {
		t.Fatalf("the silent replica held the read %v (lease 2 s): it should give way after about 1 s", d)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("read other bytes")
	}
	// Meanwhile (until the master marks that box suspect) the client lists
	// its replicas last: the next read does not wait for it again.
	rl.LeaseDeadline = time.Now().Add(2 * time.Second)
	clear(got)
	start = time.Now()
	if err := client.ReadReplicas(c, context.Background(), "k", rl, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("second read: %v, same bytes %v", err, bytes.Equal(got, want))
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("the second read waited %v: the stalled replica was tried first again", d)
	}
}
