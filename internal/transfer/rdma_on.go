//go:build rdma

package transfer

import (
	"context"
	"fmt"
	"net"

	"github.com/kvtier/kvtier/rdma"
)

// newRDMATransport opens the device Config.RDMADevice names ("" or "auto":
// the first one) and returns the RDMA transport over it, or nil and why
// RDMA is off.
func newRDMATransport(e *Engine) (*rdmaTransport, string) {
	dev := e.cfg.RDMADevice
	if dev == "off" {
		return nil, "off (--rdma-device off)"
	}
	if dev == "auto" {
		dev = ""
	}
	names, err := rdma.DeviceNames()
	if err != nil {
		return nil, "off: " + err.Error()
	}
	if len(names) == 0 {
		return nil, "off: no RDMA device (ibv_get_device_list lists none)"
	}
	if dev == "" {
		dev = names[0]
	}
	d, err := rdma.OpenDevice(dev, rdma.Config{})
	if err != nil {
		return nil, fmt.Sprintf("off: open device %q: %v (devices: %v)", dev, err, names)
	}
	return newRDMAOn(e, verbsOf{d}, dev), ""
}

// verbsOf adapts package rdma to the transport's verbs interfaces.
type verbsOf struct{ d *rdma.Device }

func (v verbsOf) RegisterMemory(buf []byte) (verbsMR, error) {
	m, err := v.d.RegisterMemory(buf)
	if err != nil {
		return nil, err
	}
	return mrOf{m}, nil
}

func (v verbsOf) RegisterReadOnly(buf []byte) (verbsMR, error) {
	m, err := v.d.RegisterMemoryReadOnly(buf)
	if err != nil {
		return nil, err
	}
	return mrOf{m}, nil
}

func (v verbsOf) Listen(addr string) (verbsListener, error) {
	l, err := v.d.Listen(addr)
	if err != nil {
		return nil, err
	}
	return listenerOf{l}, nil
}

func (v verbsOf) Dial(ctx context.Context, addr string) (verbsConn, error) {
	c, err := v.d.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (v verbsOf) Close() error { return v.d.Close() }

type mrOf struct{ m *rdma.MR }

func (m mrOf) Base() uint64 { return m.m.Addr }
func (m mrOf) Key() uint32  { return m.m.RKey }
func (m mrOf) Close() error { return m.m.Close() }

type listenerOf struct{ l *rdma.Listener }

func (l listenerOf) Accept(ctx context.Context) (verbsConn, error) {
	c, err := l.l.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return c, nil
}
func (l listenerOf) Addr() net.Addr { return l.l.Addr() }
func (l listenerOf) Close() error   { return l.l.Close() }
