//go:build !rdma

package rdma

import "context"

const reason = "built without the rdma build tag (go build -tags rdma, needs cgo and libibverbs-dev)"

// Available reports whether RDMA can be used: never, in this build.
func Available() bool { return false }

// Reason says why Available is false.
func Reason() string { return reason }

// DeviceNames lists RDMA devices: none in this build.
func DeviceNames() ([]string, error) { return nil, errNoDevice(reason) }

// Device is an opened RDMA device (unavailable in this build).
type Device struct{}

// MR is a registered memory region (unavailable in this build).
type MR struct {
	Addr uint64
	RKey uint32
	LKey uint32
}

// Conn is a connected RC queue pair (unavailable in this build).
type Conn struct{}

// Listener accepts RC connections (unavailable in this build).
type Listener struct{}

// OpenDevice fails with ErrUnavailable in this build.
func OpenDevice(name string, cfg Config) (*Device, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, errNoDevice(reason)
}

// RegisterMemory fails with ErrUnavailable in this build.
func (d *Device) RegisterMemory(buf []byte) (*MR, error) { return nil, errNoDevice(reason) }

// RegisterMemoryReadOnly fails with ErrUnavailable in this build.
func (d *Device) RegisterMemoryReadOnly(buf []byte) (*MR, error) { return nil, errNoDevice(reason) }

// Listen fails with ErrUnavailable in this build.
func (d *Device) Listen(addr string) (*Listener, error) { return nil, errNoDevice(reason) }

// Dial fails with ErrUnavailable in this build.
func (d *Device) Dial(ctx context.Context, addr string) (*Conn, error) {
	return nil, errNoDevice(reason)
}

// Close does nothing in this build.
func (d *Device) Close() error { return nil }

// Close does nothing in this build.
func (m *MR) Close() error { return nil }

// Accept fails with ErrUnavailable in this build.
func (l *Listener) Accept(ctx context.Context) (*Conn, error) { return nil, errNoDevice(reason) }

// Close does nothing in this build.
func (l *Listener) Close() error { return nil }

// Read fails with ErrUnavailable in this build.
func (c *Conn) Read(ctx context.Context, local []byte, remoteAddr uint64, rkey uint32) error {
	return errNoDevice(reason)
}

// Write fails with ErrUnavailable in this build.
func (c *Conn) Write(ctx context.Context, local []byte, remoteAddr uint64, rkey uint32) error {
	return errNoDevice(reason)
}

// Close does nothing in this build.
func (c *Conn) Close() error { return nil }
