package tests

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestRDMADeviceFlag drives --rdma-device as an operator would, on a host
// without RDMA (this test's binary is built without the rdma tag): the
// appliance says in its log that it offers no RDMA and why (louder when a
// device was named), puts and gets still work over TCP whatever a client's
// --rdma-device says, and kvtier doctor shows the transfer engine's reason.
func TestRDMADeviceFlag(t *testing.T) {
	c := startCluster(t)
	auto := c.appliance("auto")
	off := c.appliance("off", "--rdma-device", "off")
	named := c.appliance("named", "--rdma-device", "mlx5_99")
	for _, x := range []struct {
		p    *proc
		want []string
	}{
		{auto, []string{"rdma", "status=", "off: "}},
		{off, []string{"rdma", `off (--rdma-device off)`}},
		{named, []string{"rdma device not usable", "device=mlx5_99"}},
	} {
		eventually(t, 10*time.Second, x.p.name+" logs its RDMA status", func() bool {
			out := x.p.output()
			for _, w := range x.want {
				if !strings.Contains(out, w) {
					return false
				}
			}
			return true
		})
	}
	for _, dev := range []string{"auto", "off", "mlx5_99"} {
		val := strings.Repeat("rdma-"+dev, 20000)
		if o, e, code := c.cli(t, []byte(val), "put", "k-"+dev, "-", "--rdma-device", dev); code != 0 {
			t.Fatalf("put --rdma-device %s: exit %d: %s %s", dev, code, o, e)
		}
		o, e, code := c.cli(t, nil, "get", "k-"+dev, "--rdma-device", dev)
		if code != 0 || o != val {
			t.Fatalf("get --rdma-device %s: exit %d, %d bytes: %s", dev, code, len(o), e)
		}
	}
	var d doctorJSON
	o, e, _ := kv(t, nil, "doctor", "--json", "--rdma-device", "off")
	if err := json.Unmarshal([]byte(o), &d); err != nil {
		t.Fatalf("doctor --json: %v: %s %s", err, o, e)
	}
	if st, found, _ := d.check("rdma-transport"); st != "ok" || found != "off (--rdma-device off)" {
		t.Fatalf("doctor rdma-transport with off: %s %q", st, found)
	}
	o, _, _ = kv(t, nil, "doctor", "--json")
	d = doctorJSON{}
	_ = json.Unmarshal([]byte(o), &d)
	if _, found, _ := d.check("rdma-transport"); !strings.Contains(found, "rdma build tag") {
		t.Fatalf("doctor rdma-transport in a build without the tag: %q", found)
	}
}
