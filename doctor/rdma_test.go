package doctor

import (
	"context"
	"testing"
)

// TestRDMATransport: the engine's answer is shown as found; a host with
// RDMA devices whose engine does not use them warns (its remote reads go
// over TCP), one without devices or with RDMA turned off is fine, and
// without a probe the check is skipped.
func TestRDMATransport(t *testing.T) {
	withDev := host(t, map[string]string{"sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n"})
	noDev := host(t, map[string]string{"proc/meminfo": meminfoWith(0, 0)})
	probe := func(on bool, why string) func() (bool, string) { return func() (bool, string) { return on, why } }
	for _, c := range []struct {
		name  string
		root  string
		probe func() (bool, string)
		want  Status
	}{
		{"unprobed", withDev, nil, StatusSkip},
		{"on", withDev, probe(true, "on: device mlx5_0, side channel :4791"), StatusOK},
		{"devices unused", withDev, probe(false, "off: built without the rdma build tag"), StatusWarn},
		{"no devices", noDev, probe(false, "off: no RDMA device"), StatusOK},
		{"turned off", withDev, probe(false, "off (--rdma-device off)"), StatusOK},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Run(context.Background(), Config{Root: c.root, RDMATransport: c.probe})
			got := find(t, r, "rdma-transport")
			if got.Status != c.want {
				t.Fatalf("status %s (%+v), want %s", got.Status, got, c.want)
			}
			if c.probe != nil {
				if _, why := c.probe(); got.Found != why {
					t.Fatalf("found %q, want the engine's %q", got.Found, why)
				}
			}
			if c.want == StatusWarn && got.Fix == "" {
				t.Fatal("a warning without a fix")
			}
		})
	}
}
