//go:build rdma

package rdma

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

func TestVerbsAvailability(t *testing.T) {
	names, err := DeviceNames()
	if err != nil || len(names) == 0 {
		if Available() || !strings.Contains(Reason(), "RDMA") {
			t.Fatalf("no device, but Available=%v Reason=%q", Available(), Reason())
		}
		if _, err := OpenDevice("", Config{}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("OpenDevice without device: %v", err)
		}
		t.Skipf("no RDMA device: %s", Reason())
	}
	if !Available() || Reason() != "" {
		t.Fatalf("devices %v but Available=%v Reason=%q", names, Available(), Reason())
	}
}

// TestVerbsLoopback connects two RC QPs on the first device through the TCP
// side channel and moves bytes with one-sided WRITE and READ.
func TestVerbsLoopback(t *testing.T) {
	if !Available() {
		t.Skipf("no RDMA device: %s", Reason())
	}
	d, err := OpenDevice("", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	remote := make([]byte, 1<<20)
	local := make([]byte, 1<<20)
	rmr, err := d.RegisterMemory(remote)
	if err != nil {
		t.Fatal(err)
	}
	defer rmr.Close()
	if _, err := d.RegisterMemory(local); err != nil {
		t.Fatal(err)
	}
	ln, err := d.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	acc := make(chan *Conn, 1)
	go func() {
		c, err := ln.Accept(ctx)
		if err != nil {
			t.Error(err)
		}
		acc <- c
	}()
	c, err := d.Dial(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if sc := <-acc; sc != nil {
		defer sc.Close()
	}
	for i := range local {
		local[i] = byte(i * 7)
	}
	if err := c.Write(ctx, local[:4096], rmr.Addr+8192, rmr.RKey); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(remote[8192:8192+4096], local[:4096]) {
		t.Fatal("WRITE did not land")
	}
	clear(local)
	if err := c.Read(ctx, local[100:100+4096], rmr.Addr+8192, rmr.RKey); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(local[100:100+4096], remote[8192:8192+4096]) {
		t.Fatal("READ returned other bytes")
	}
	if err := c.Read(ctx, make([]byte, 16), rmr.Addr, rmr.RKey); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("unregistered local buffer: %v", err)
	}
}
