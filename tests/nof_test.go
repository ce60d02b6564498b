package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
)

// TestNOFReplicasReadStraightFromTheNamespace: an appliance exports a file as
// an NVMe/TCP namespace; a client puts objects with only NOF replicas (written
// through our initiator) and reads them back the same way; the operator's
// `kvtier nvme` verbs see the subsystem.
func TestNOFReplicasReadStraightFromTheNamespace(t *testing.T) {
	c := startCluster(t)
	img := filepath.Join(t.TempDir(), "ns1.img")
	box := c.appliance("nvme-box", "--nvme-addr", "127.0.0.1:0", "--nvme-namespace", img+":64MiB")
	nvmeAddr := box.addrs["nvme"]
	if nvmeAddr == "" || !strings.HasPrefix(box.addrs["nqn"], "nqn.") {
		t.Fatalf("appliance did not report its NVMe listener and NQN: %v", box.addrs)
	}
	cl := c.client(t)
	ctx := context.Background()
	for i, n := range []int{1, 4095, 4096, 128 << 10, 1<<20 + 3} {
		key := "nof/" + string(rune('a'+i))
		v := randomBytes(uint64(500+i), n)
		if err := cl.Put(ctx, key, v, client.WithOptions(client.PutOptions{NOFReplicas: 1})); err != nil {
			t.Fatalf("put %d bytes as NOF: %v", n, err)
		}
		info, err := cl.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Replicas) != 1 || info.Replicas[0].Type != kvtierpb.ReplicaType_NOF || info.Replicas[0].Nqn != box.addrs["nqn"] {
			t.Fatalf("%s: replicas %v, want one NOF replica on %s", key, info.Replicas, box.addrs["nqn"])
		}
		got, err := cl.Get(ctx, key)
		if err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get %s (%d bytes) from NOF: err %v", key, n, err)
		}
	}
	out, errs, code := c.cli(t, nil, "nvme", "identify", "--target", nvmeAddr)
	if code != 0 || !strings.Contains(out, box.addrs["nqn"]) || !strings.Contains(out, "namespace 1") {
		t.Fatalf("kvtier nvme identify: exit %d\n%s\n%s", code, out, errs)
	}
	out, _, code = c.cli(t, nil, "nvme", "discover", "--target", nvmeAddr)
	if code != 0 || !strings.Contains(out, box.addrs["nqn"]) {
		t.Fatalf("kvtier nvme discover: exit %d %s", code, out)
	}
	// perf connects one I/O queue per CPU (at most 8) unless told otherwise,
	// as the Linux host does.
	for _, tc := range []struct {
		args   []string
		queues int
	}{{nil, min(runtime.NumCPU(), 8)}, {[]string{"--queues", "1"}, 1}} {
		args := append([]string{"nvme", "perf", "--target", nvmeAddr, "--rw", "read", "--bs", "4KiB", "--qd", "4", "--duration", "200ms", "--json"}, tc.args...)
		out, errs, code := c.cli(t, nil, args...)
		var res struct {
			Queues int     `json:"queues"`
			IOs    uint64  `json:"ios"`
			IOPS   float64 `json:"iops"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
			t.Fatalf("kvtier %v: exit %d\n%s\n%s", args, code, out, errs)
		}
		if res.Queues != tc.queues || res.IOs == 0 || res.IOPS <= 0 {
			t.Fatalf("kvtier %v: %+v, want %d queues and some I/O", args, res, tc.queues)
		}
	}
}

// TestRemovedNOFObjectNeverComesBack: an object whose replica is on an
// NVMe-oF namespace (read by block address, past any revocation), read
// twice by a client that caches read leases, does not read back after
// `kvtier rm --force`: such replica lists are not cached.
func TestRemovedNOFObjectNeverComesBack(t *testing.T) {
	c := startCluster(t, "--lease-ttl", "30s")
	img := filepath.Join(t.TempDir(), "ns1.img")
	c.appliance("nvme-box", "--nvme-addr", "127.0.0.1:0", "--nvme-namespace", img+":64MiB")
	r, w := c.client(t), c.client(t)
	ctx := context.Background()
	v := randomBytes(7, 128<<10)
	if err := w.Put(ctx, "nof/gone", v, client.WithOptions(client.PutOptions{NOFReplicas: 1})); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := r.Get(ctx, "nof/gone"); err != nil || !bytes.Equal(got, v) {
			t.Fatalf("get: %v", err)
		}
	}
	if out, errOut, code := c.cli(t, nil, "rm", "--force", "nof/gone"); code != 0 {
		t.Fatalf("kvtier rm --force: exit %d: %s%s", code, out, errOut)
	}
	if got, err := r.Get(ctx, "nof/gone"); !kverr.Is(err, kverr.ObjectNotFound) {
		t.Fatalf("removed NOF object read back: %d bytes, %v; want OBJECT_NOT_FOUND", len(got), err)
	}
}
