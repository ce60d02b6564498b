package appliance_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/dram"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/spdk"
	"github.com/kvtier/kvtier/nof/spdk/spdktest"
	"github.com/kvtier/kvtier/nof/target"
)

// syncBuffer is a log sink safe for the appliance's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// nofReplica reports whether key has a NOF replica on nqn.
func nofReplica(t *testing.T, cl *client.Client, key, nqn string) bool {
	t.Helper()
	info, err := cl.Stat(context.Background(), key)
	if err != nil {
		return false
	}
	for _, r := range info.Replicas {
		if r.Type == kvtierpb.ReplicaType_NOF && r.Nqn == nqn {
			return true
		}
	}
	return false
}

// TestSPDKBackendNoticesSPDKDyingAndReturning: SPDK's JSON-RPC server (the
// named fake, spdktest.FakeSPDK: no SPDK can run here) dies, and the
// appliance unmounts its NOF segments (no NOF replica handed out or placed
// there), reports itself unhealthy and warns; a fresh SPDK (empty, as a
// restarted spdk_tgt) comes back on the same socket, and the appliance
// applies its plan again, remounts the segments, and a NOF put succeeds.
// The NVMe/TCP data plane SPDK would serve is our own target exporting the
// same subsystem at the address the plan gives (a stand-in for SPDK's
// nvmf_tgt data path, which cannot be built here).
func TestSPDKBackendNoticesSPDKDyingAndReturning(t *testing.T) {
	ctx := context.Background()
	masterAddr, mc := startMaster(t)
	sock := filepath.Join(t.TempDir(), "spdk.sock")
	fake := spdktest.NewFake()
	srv, err := spdktest.Listen(sock, fake.Handle, spdktest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const name = "box-w"
	nqn := appliance.SubsystemNQN(name)
	dp, err := target.New(target.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	mem, _ := namespace.NewMemory(make([]byte, 16<<20), 4096)
	if err := dp.AddSubsystem(target.Subsystem{NQN: nqn, Namespaces: []namespace.Namespace{mem}}); err != nil {
		t.Fatal(err)
	}
	dpAddr, err := dp.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}

	var logs syncBuffer
	a, err := appliance.Start(ctx, appliance.Config{
		Name: name, MasterAddr: masterAddr, DRAM: 8 << 20, Hugepages: dram.HugepageOff,
		HeartbeatInterval: 100 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(&logs, nil)),
		NVMe: appliance.NVMeConfig{Backend: appliance.BackendSPDK, Addr: dpAddr.String(),
			SPDK: appliance.SPDKConfig{Socket: sock, WatchInterval: 50 * time.Millisecond,
				Mallocs: []spdk.MallocSpec{{Name: "Malloc0", Size: 16 << 20}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(ctx) })
	seg := segName(name, 1)
	if segs := nofSegments(t, mc, name); len(segs) != 1 || segs[seg] == nil {
		t.Fatalf("NOF segments %v, want %s", keys(segs), seg)
	}
	cl, err := client.New(ctx, client.Config{MasterAddr: masterAddr, HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	nof := client.WithOptions(client.PutOptions{NOFReplicas: 1})
	before := bytes.Repeat([]byte("before "), 10000)
	if err := cl.Put(ctx, "w/before", before, nof); err != nil {
		t.Fatalf("NOF put with SPDK up: %v", err)
	}
	if !nofReplica(t, cl, "w/before", nqn) {
		t.Fatal("w/before has no NOF replica")
	}
	if err := a.NVMeHealth(); err != nil {
		t.Fatalf("healthy appliance: %v", err)
	}

	// SPDK dies.
	srv.Close()
	waitFor(t, func() bool { return len(nofSegments(t, mc, name)) == 0 }, "the NOF segments to be unmounted")
	if err := a.NVMeHealth(); err == nil || !strings.Contains(err.Error(), "SPDK export unavailable") {
		t.Fatalf("NVMeHealth with SPDK gone: %v", err)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"spdk export unavailable") {
		t.Fatalf("no warning that SPDK is gone:\n%s", logs.String())
	}
	if nofReplica(t, cl, "w/before", nqn) {
		t.Fatal("the NOF replica is still handed out while SPDK is gone")
	}
	if err := cl.Put(ctx, "w/during", []byte("during"), nof); err == nil && nofReplica(t, cl, "w/during", nqn) {
		t.Fatal("a NOF replica was placed on SPDK while it is gone")
	}

	// A restarted SPDK: empty, same socket.
	fake2 := spdktest.NewFake()
	srv2, err := spdktest.Listen(sock, fake2.Handle, spdktest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv2.Close() })
	// Health clears once the segments are mounted again (just after).
	waitFor(t, func() bool { return nofSegments(t, mc, name)[seg] != nil && a.NVMeHealth() == nil }, "the NOF segment to be remounted")
	if fake2.Calls("nvmf_create_subsystem") != 1 || fake2.Calls("bdev_malloc_create") != 1 {
		t.Fatalf("plan not re-applied: create_subsystem %d, malloc %d", fake2.Calls("nvmf_create_subsystem"), fake2.Calls("bdev_malloc_create"))
	}
	after := bytes.Repeat([]byte("after "), 20000)
	if err := cl.Put(ctx, "w/after", after, nof); err != nil {
		t.Fatalf("NOF put after SPDK returned: %v", err)
	}
	if !nofReplica(t, cl, "w/after", nqn) {
		t.Fatal("w/after has no NOF replica")
	}
	got, err := cl.Get(ctx, "w/after")
	if err != nil || !bytes.Equal(got, after) {
		t.Fatalf("get w/after: %v", err)
	}
	if !strings.Contains(logs.String(), "spdk is back") {
		t.Fatalf("no log line for SPDK's return:\n%s", logs.String())
	}

	// SPDK restarts between two probes (no probe, or only one, fails): it
	// answers, without the export, and the appliance re-applies its plan.
	fake3 := spdktest.NewFake()
	srv2.Close()
	srv3, err := spdktest.Listen(sock, fake3.Handle, spdktest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv3.Close() })
	waitFor(t, func() bool { return fake3.Calls("nvmf_create_subsystem") == 1 }, "the plan to be re-applied to the restarted SPDK")
	waitFor(t, func() bool { return nofSegments(t, mc, name)[seg] != nil && a.NVMeHealth() == nil }, "the NOF segment to be mounted again")
	if err := cl.Put(ctx, "w/again", after, nof); err != nil || !nofReplica(t, cl, "w/again", nqn) {
		t.Fatalf("NOF put after a quick SPDK restart: %v", err)
	}
	if !strings.Contains(logs.String(), "restarted?") {
		t.Fatalf("no log line naming the lost export:\n%s", logs.String())
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
