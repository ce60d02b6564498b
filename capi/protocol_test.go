package main

import (
	"bytes"
	"context"
	"testing"
)

// TestSetupProtocol: Mooncake's protocol "rdma" (with device_name) asks for
// RDMA and, where this library or host has none, still stores and reads
// over TCP (stderr says why); "tcp" keeps RDMA off; anything else is
// INVALID_PARAMS and changes nothing.
func TestSetupProtocol(t *testing.T) {
	addr := startStandalone(t, "64MiB")
	for _, c := range []struct{ protocol, device, want string }{
		{"rdma", "mlx5_0,mlx5_1", "mlx5_0"},
		{"rdma", "", "auto"},
		{"tcp", "mlx5_0", "off"},
	} {
		h := kvtier_go_create()
		if rc := setup(h, "localhost", 0, 0, c.protocol, c.device, addr); rc != codeOK {
			t.Fatalf("setup %s %q: %d", c.protocol, c.device, rc)
		}
		_, cl, release, code := acquire(h)
		if code != codeOK {
			t.Fatalf("acquire: %d", code)
		}
		on, why := cl.Engine().RDMAStatus()
		if on || why == "" || (c.want == "off") != (why == "off (--rdma-device off)") {
			t.Fatalf("%s %q (want RDMA device %s) on a host without RDMA: %v %q", c.protocol, c.device, c.want, on, why)
		}
		key, val := "p-"+c.protocol+c.device, bytes.Repeat([]byte("v"), 100000)
		if err := cl.Put(context.Background(), key, val); err != nil {
			t.Fatal(err)
		}
		got, err := cl.Get(context.Background(), key)
		if err != nil || !bytes.Equal(got, val) {
			t.Fatalf("get over %s: %v", c.protocol, err)
		}
		release()
		kvtier_go_destroy(h)
	}
	h := kvtier_go_create()
	defer kvtier_go_destroy(h)
	if rc := setup(h, "localhost", 0, 0, "ib-verbs", "", addr); rc != codeInvalidParams {
		t.Fatalf("unknown protocol: %d, want %d", rc, codeInvalidParams)
	}
	if _, _, _, code := acquire(h); code == codeOK {
		t.Fatal("a refused setup left a connected store")
	}
}
