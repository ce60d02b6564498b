//go:build !rdma

package rdma

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/kverr"
)

func TestStubUnavailable(t *testing.T) {
	if Available() {
		t.Fatal("available without the rdma tag")
	}
	if !strings.Contains(Reason(), "without the rdma build tag") {
		t.Fatalf("reason %q", Reason())
	}
	if _, err := DeviceNames(); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	if _, err := OpenDevice("", Config{}); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	if _, err := OpenDevice("", Config{QueueDepth: -1}); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("bad config not refused first: %v", err)
	}
	var d Device
	var c Conn
	ctx := context.Background()
	if _, err := d.RegisterMemory(make([]byte, 8)); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	if _, err := d.Dial(ctx, "127.0.0.1:1"); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	if err := c.Read(ctx, make([]byte, 8), 0, 0); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
	if err := c.Write(ctx, make([]byte, 8), 0, 0); !errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
}
