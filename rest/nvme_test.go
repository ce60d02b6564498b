package rest_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/nof/initiator"
	"github.com/kvtier/kvtier/rest"
	"github.com/kvtier/kvtier/rest/resttest"
)

// waitNVMe polls GET /api/v1/nvme until cond holds (the figures arrive with
// the appliance's next heartbeat) and returns the last answer.
func waitNVMe(t *testing.T, c *resttest.Cluster, what string, cond func(rest.NVMeJSON) bool) rest.NVMeJSON {
	t.Helper()
	var nj rest.NVMeJSON
	for deadline := time.Now().Add(15 * time.Second); ; {
		r := do(t, c, "GET", "/api/v1/nvme", nil)
		mustStatus(t, r, http.StatusOK)
		nj = rest.NVMeJSON{}
		r.json(t, &nj)
		if cond(nj) {
			return nj
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /api/v1/nvme never showed %s; last: %s", what, r.body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A real appliance exports a namespace over NVMe/TCP; a host does I/O through
// our initiator and a GPU-node client stores a NOF replica: GET nvme shows the
// listener, the subsystem, the namespace with exact I/O counters and its NOF
// segment, and both connected hosts.
func TestNVMeEndpointWithRealAppliance(t *testing.T) {
	c := resttest.Start(t, resttest.Options{GRPC: true})

	// No appliance exports yet: an empty list, not null.
	r := do(t, c, "GET", "/api/v1/nvme", nil)
	mustStatus(t, r, http.StatusOK)
	if !bytes.Contains(r.body, []byte(`"appliances":[]`)) {
		t.Fatalf("empty cluster: %s", r.body)
	}

	const nsSize = 64 << 20
	a := c.NVMeAppliance(t, "nvme-box", nsSize)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const hostNQN = "nqn.2026-11.io.kvtier.test:gpu-node-7"
	ctrl, err := initiator.Dial(ctx, a.NVMeAddr(), initiator.Config{SubNQN: a.NVMeNQN(), HostNQN: hostNQN, IOQueues: 2})
	if err != nil {
		t.Fatalf("initiator: %v", err)
	}
	defer ctrl.Close()
	w := bytes.Repeat([]byte{0x5a}, 128<<10)
	if err := ctrl.WriteAt(ctx, 1, w, 1<<20); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for i := range 5 {
		if err := ctrl.ReadAt(ctx, 1, buf, int64(1<<20+i*4096)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ctrl.Flush(ctx, 1); err != nil {
		t.Fatal(err)
	}

	nj := waitNVMe(t, c, "5 reads of 4 KiB, 128 KiB written, one flush", func(n rest.NVMeJSON) bool {
		if len(n.Appliances) != 1 || len(n.Appliances[0].Subsystems) != 1 || len(n.Appliances[0].Subsystems[0].Namespaces) != 1 {
			return false
		}
		ns := n.Appliances[0].Subsystems[0].Namespaces[0]
		return ns.ReadOps == 5 && ns.WriteBytes == 128<<10 && ns.OtherOps == 1
	})
	ap := nj.Appliances[0]
	if ap.Node != "nvme-box" || ap.State != "live" || ap.Addr != a.NVMeAddr() || ap.LastHeartbeat == nil {
		t.Fatalf("appliance %+v; want nvme-box, live, at %s", ap, a.NVMeAddr())
	}
	sub := ap.Subsystems[0]
	ns := sub.Namespaces[0]
	if sub.NQN != a.NVMeNQN() || ns.NSID != 1 || ns.Size != nsSize || ns.BlockSize != 4096 || ns.Blocks != nsSize/4096 {
		t.Fatalf("subsystem %s namespace %+v; want %s nsid 1, %d bytes in 4096-byte blocks", sub.NQN, ns, a.NVMeNQN(), nsSize)
	}
	if ns.ReadBytes != 5*4096 || ns.WriteOps == 0 || ns.Errors != 0 {
		t.Fatalf("namespace counters %+v", ns)
	}
	if ns.Segment == nil || ns.Segment.Name != "nvme-box/nvme1" || ns.Segment.State != "mounted" || ns.Segment.Used != 0 {
		t.Fatalf("NOF segment of the namespace: %+v", ns.Segment)
	}
	var host *rest.NVMeHostJSON
	for i := range ap.Hosts {
		if ap.Hosts[i].HostNQN == hostNQN {
			host = &ap.Hosts[i]
		}
	}
	if host == nil || host.CNTLID != uint32(ctrl.CNTLID()) || host.SubNQN != a.NVMeNQN() || host.IOQueues != 2 || host.RemoteAddr == "" {
		t.Fatalf("hosts %+v; want %s with cntlid %d and 2 I/O queues", ap.Hosts, hostNQN, ctrl.CNTLID())
	}

	var cl0 struct{ Clients []rest.ClientJSON }
	do(t, c, "GET", "/api/v1/clients", nil).json(t, &cl0)
	addrs := map[string]string{}
	for _, x := range cl0.Clients {
		addrs[x.ID] = x.NVMeAddr
	}
	if addrs["nvme-box"] != a.NVMeAddr() || addrs[c.Node] != "" {
		t.Fatalf("clients' nvme_addr %v; want only nvme-box at %s", addrs, a.NVMeAddr())
	}

	// A GPU node stores a NOF replica straight into the namespace: its bytes
	// show as namespace writes and as use of the NOF segment, and its
	// initiator as a second host.
	cl, err := client.New(ctx, client.Config{MasterAddr: c.GRPCAddr, HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	val := bytes.Repeat([]byte("kv-cache "), 1<<17) // 1.125 MiB
	if err := cl.Put(ctx, "nof/obj", val, client.WithOptions(client.PutOptions{NOFReplicas: 1})); err != nil {
		t.Fatalf("NOF put: %v", err)
	}
	nj = waitNVMe(t, c, "the NOF replica's bytes", func(n rest.NVMeJSON) bool {
		if len(n.Appliances) != 1 {
			return false
		}
		ns := n.Appliances[0].Subsystems[0].Namespaces[0]
		return ns.WriteBytes >= 128<<10+uint64(len(val)) && len(n.Appliances[0].Hosts) >= 2
	})
	ns = nj.Appliances[0].Subsystems[0].Namespaces[0]
	if ns.Segment == nil || ns.Segment.Used < uint64(len(val)) || ns.Segment.Replicas != 1 {
		t.Fatalf("NOF segment after a %d-byte NOF put: %+v", len(val), ns.Segment)
	}
	hosts := map[string]bool{}
	for _, h := range nj.Appliances[0].Hosts {
		hosts[h.HostNQN] = true
	}
	if !hosts[hostNQN] || !hosts[cl.HostNQN()] {
		t.Fatalf("hosts %+v; want %s and the client's %s", nj.Appliances[0].Hosts, hostNQN, cl.HostNQN())
	}
	tot := nj.Totals
	if tot.Appliances != 1 || tot.Subsystems != 1 || tot.Namespaces != 1 || tot.Hosts != len(nj.Appliances[0].Hosts) ||
		tot.Capacity != nsSize || tot.WriteBytes != ns.WriteBytes || tot.ReadOps != ns.ReadOps {
		t.Fatalf("totals %+v do not add up the namespace %+v", tot, ns)
	}

	// Once the appliance leaves, its NOF segment is unmounted at once; its
	// last figures stay listed (state tells how old they are).
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	nj = waitNVMe(t, c, "the namespace without its segment", func(n rest.NVMeJSON) bool {
		return len(n.Appliances) == 1 && n.Appliances[0].Subsystems[0].Namespaces[0].Segment == nil
	})
	if last := nj.Appliances[0].Subsystems[0].Namespaces[0]; last.WriteBytes < ns.WriteBytes {
		t.Fatalf("after close the figures went back: %+v, before %+v", last, ns)
	}
}
