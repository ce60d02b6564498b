package resttest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/dram"
)

// NVMeAppliance starts a real appliance named name that joins c over gRPC
// (c needs Options.GRPC) with 16 MiB of DRAM and exports one file-backed
// namespace of size bytes over its built-in NVMe/TCP target on loopback. It
// heartbeats every 100 ms and is closed at test cleanup (before the cluster).
func (c *Cluster) NVMeAppliance(t testing.TB, name string, size int64) *appliance.Appliance {
	t.Helper()
	if c.GRPCAddr == "" {
		t.Fatal("resttest: NVMeAppliance needs Options.GRPC")
	}
	a, err := appliance.Start(context.Background(), appliance.Config{
		Name: name, MasterAddr: c.GRPCAddr, DRAM: 16 << 20, Hugepages: dram.HugepageOff,
		HeartbeatInterval: 100 * time.Millisecond,
		NVMe: appliance.NVMeConfig{Addr: "127.0.0.1:0",
			Namespaces: []appliance.NVMeNamespace{{Path: filepath.Join(t.TempDir(), name+"-ns1.img"), Size: size}}},
	})
	if err != nil {
		t.Fatalf("appliance %s with an NVMe namespace: %v", name, err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	return a
}
