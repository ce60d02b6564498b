package master

import (
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

func nvmeReport(reads uint64) *kvtierpb.NvmeStats {
	return &kvtierpb.NvmeStats{
		Addr: "127.0.0.1:4420",
		Subsystems: []*kvtierpb.NvmeSubsystem{{
			Nqn: "nqn.2026-11.io.kvtier:appliance:box1",
			Namespaces: []*kvtierpb.NvmeNamespace{
				{Nsid: 1, Size: 64 << 20, BlockSize: 4096, ReadOps: reads, ReadBytes: reads * 4096, WriteOps: 3,
					WriteBytes: 3 * 131072, OtherOps: 1, Errors: 2},
				{Nsid: 2, Size: 1 << 30, BlockSize: 512},
			},
		}},
		Hosts: []*kvtierpb.NvmeHost{
			{Cntlid: 1, HostNqn: "nqn.2014-08.org.nvmexpress:uuid:gpu-7", SubNqn: "nqn.2026-11.io.kvtier:appliance:box1",
				RemoteAddr: "127.0.0.1:51234", IoQueues: 4},
			{Cntlid: 2, HostNqn: "nqn.host-b", SubNqn: "nqn.2014-08.org.nvmexpress.discovery", RemoteAddr: "127.0.0.1:51300"},
		},
	}
}

func clientPB(t *testing.T, c kvtierpb.MasterClient, id string) *kvtierpb.ClientInfo {
	t.Helper()
	resp, err := c.ListClients(ctx, &kvtierpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ci := range resp.GetClients() {
		if ci.GetClientId() == id {
			return ci
		}
	}
	t.Fatalf("client %s not listed in %v", id, resp)
	return nil
}

// A heartbeat's NVMe figures come back, field for field, in ListClients over
// real gRPC; the next beat replaces them and a beat without them clears them.
func TestHeartbeatNVMeStatsInListClients(t *testing.T) {
	m, _ := newTest(t, Config{})
	c, _ := serve(t, m)
	hb := func(n *kvtierpb.NvmeStats) {
		t.Helper()
		if _, err := c.Heartbeat(ctx, &kvtierpb.HeartbeatRequest{ClientId: "box1", Endpoint: "127.0.0.1:7000", Nvme: n}); err != nil {
			t.Fatal(err)
		}
	}
	hb(nvmeReport(10))
	if got, want := clientPB(t, c, "box1").GetNvme(), nvmeReport(10); !proto.Equal(got, want) {
		t.Fatalf("ListClients nvme = %v\nwant %v", got, want)
	}

	hb(nvmeReport(250))
	got := clientPB(t, c, "box1").GetNvme()
	if ns := got.GetSubsystems()[0].GetNamespaces()[0]; ns.GetReadOps() != 250 || ns.GetReadBytes() != 250*4096 {
		t.Fatalf("second beat not recorded: %v", ns)
	}

	// The Go API hands out copies: changing one changes nothing stored.
	for _, ci := range m.ListClients(ctx) {
		if ci.ID == "box1" {
			if ci.NVMe == nil || len(ci.NVMe.Subsystems) != 1 || len(ci.NVMe.Hosts) != 2 {
				t.Fatalf("Go ListClients NVMe = %+v", ci.NVMe)
			}
			ci.NVMe.Subsystems[0].Namespaces[0].ReadOps = 0
			ci.NVMe.Hosts[0].HostNQN = "changed"
		}
	}
	if !proto.Equal(clientPB(t, c, "box1").GetNvme(), nvmeReport(250)) {
		t.Fatal("mutating ListClients' result changed the master's record")
	}

	hb(nil)
	if n := clientPB(t, c, "box1").GetNvme(); n != nil {
		t.Fatalf("a beat without NVMe figures left %v", n)
	}
	// A client that never exported has none.
	hb2 := &kvtierpb.HeartbeatRequest{ClientId: "gpu-node", Endpoint: "127.0.0.1:7001"}
	if _, err := c.Heartbeat(ctx, hb2); err != nil {
		t.Fatal(err)
	}
	if n := clientPB(t, c, "gpu-node").GetNvme(); n != nil {
		t.Fatalf("plain client shows NVMe %v", n)
	}
}

// Heartbeats replacing NVMe figures race with readers; -race checks the lock.
func TestHeartbeatNVMeConcurrentWithListClients(t *testing.T) {
	m, _ := newTest(t, Config{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				n := nvmeFromPB(nvmeReport(uint64(i)))
				if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: fmt.Sprintf("box%d", w%2), NVMe: n}); err != nil {
					t.Error(err)
					return
				}
				n.Subsystems[0].Namespaces[0].ReadOps = 1 << 60 // the caller's copy, not the master's
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for range 200 {
				for _, ci := range m.ListClients(ctx) {
					if ci.NVMe != nil && ci.NVMe.Subsystems[0].Namespaces[0].ReadOps >= 200 {
						t.Errorf("%s: read ops %d: the master kept a caller's slice", ci.ID, ci.NVMe.Subsystems[0].Namespaces[0].ReadOps)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if got := len(m.ListClients(ctx)); got != 2 {
		t.Fatalf("%d clients, want 2", got)
	}
}
