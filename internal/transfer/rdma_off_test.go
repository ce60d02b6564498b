//go:build !rdma

package transfer

import "testing"

// rdmaCases: without the rdma tag the RDMA transport does not exist; the
// table says so (and TestRDMAStatus checks the reason is reported).
func rdmaCases() []transportCase {
	return []transportCase{{name: "rdma", setup: func(t *testing.T, size int) (*Engine, *Engine, []byte, func(Request) Request) {
		t.Skip("RDMA transport not built: go test -tags rdma (cgo, libibverbs-dev)")
		return nil, nil, nil, nil
	}}}
}

func TestRDMAStatus(t *testing.T) {
	e := newEngine(t, Config{})
	if on, why := e.RDMAStatus(); on || why == "" {
		t.Fatalf("RDMAStatus = %v %q", on, why)
	}
	off := newEngine(t, Config{RDMADevice: "off"})
	if _, why := off.RDMAStatus(); why != "off (--rdma-device off)" {
		t.Fatalf("RDMAStatus with off = %q", why)
	}
	for _, r := range e.Routes() {
		if r == "rdma" {
			t.Fatalf("routes %v include rdma in a build without it", e.Routes())
		}
	}
}
