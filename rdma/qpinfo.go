package rdma

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// ErrUnavailable is returned by every constructor when RDMA cannot be used
// (built without the rdma tag, or no device).
var ErrUnavailable = errors.New("rdma: unavailable")

// QPInfoSize is the size of an encoded QPInfo.
const QPInfoSize = 40

var qpMagic = [4]byte{'K', 'V', 'R', 'D'}

// QPInfo is what one side of an RC connection tells the other (see doc.go).
type QPInfo struct {
	LID      uint16
	QPN      uint32
	PSN      uint32
	GID      [16]byte
	GIDValid bool
	MTU      uint8
}

// MarshalBinary encodes q in the 40-byte side-channel format.
func (q QPInfo) MarshalBinary() ([]byte, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	b := make([]byte, QPInfoSize)
	copy(b[0:4], qpMagic[:])
	b[4] = 1
	if q.GIDValid {
		b[5] = 1
	}
	binary.BigEndian.PutUint16(b[6:], q.LID)
	binary.BigEndian.PutUint32(b[8:], q.QPN)
	binary.BigEndian.PutUint32(b[12:], q.PSN)
	copy(b[16:32], q.GID[:])
	b[32] = q.MTU
	return b, nil
}

func (q QPInfo) validate() error {
	if q.QPN >= 1<<24 || q.PSN >= 1<<24 {
		return kverr.New(kverr.InvalidParams, "", "rdma: qpn %#x or psn %#x exceeds 24 bits", q.QPN, q.PSN)
	}
	if q.MTU < 1 || q.MTU > 5 {
		return kverr.New(kverr.InvalidParams, "", "rdma: mtu enum %d not in 1..5", q.MTU)
	}
	if !q.GIDValid && q.GID != ([16]byte{}) {
		return kverr.New(kverr.InvalidParams, "", "rdma: gid set but not flagged valid")
	}
	return nil
}

// UnmarshalBinary decodes and validates a side-channel QPInfo.
func (q *QPInfo) UnmarshalBinary(b []byte) error {
	if len(b) != QPInfoSize {
		return kverr.New(kverr.InvalidParams, "", "rdma: qpinfo is %d bytes, want %d", len(b), QPInfoSize)
	}
	if [4]byte(b[0:4]) != qpMagic || b[4] != 1 {
		return kverr.New(kverr.InvalidParams, "", "rdma: bad qpinfo magic/version % x", b[0:5])
	}
	if b[5]&^1 != 0 {
		return kverr.New(kverr.InvalidParams, "", "rdma: unknown qpinfo flags %#x", b[5])
	}
	for _, r := range b[33:] {
		if r != 0 {
			return kverr.New(kverr.InvalidParams, "", "rdma: qpinfo reserved bytes not zero")
		}
	}
	v := QPInfo{GIDValid: b[5]&1 != 0, LID: binary.BigEndian.Uint16(b[6:]), QPN: binary.BigEndian.Uint32(b[8:]),
		PSN: binary.BigEndian.Uint32(b[12:]), MTU: b[32]}
	copy(v.GID[:], b[16:32])
	if err := v.validate(); err != nil {
		return err
	}
	*q = v
	return nil
}

// exchange runs the side-channel handshake on c: send local, receive the
// peer's QPInfo, call ready (which moves the local QP to RTR/RTS), send the
// ready byte and wait for the peer's. The ctx deadline bounds everything.
func exchange(ctx context.Context, c net.Conn, local QPInfo, ready func(peer QPInfo) error) (QPInfo, error) {
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	fail := func(what string, err error) (QPInfo, error) {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return QPInfo{}, kverr.New(kverr.TransferFail, "", "rdma: side channel %s with %s: %v", what, c.RemoteAddr(), err)
	}
	b, err := local.MarshalBinary()
	if err != nil {
		return QPInfo{}, err
	}
	if _, err := c.Write(b); err != nil {
		return fail("send qpinfo", err)
	}
	if _, err := io.ReadFull(c, b); err != nil {
		return fail("receive qpinfo", err)
	}
	var peer QPInfo
	if err := peer.UnmarshalBinary(b); err != nil {
		return QPInfo{}, err
	}
	if err := ready(peer); err != nil {
		return QPInfo{}, err
	}
	if _, err := c.Write([]byte{1}); err != nil {
		return fail("send ready", err)
	}
	if _, err := io.ReadFull(c, b[:1]); err != nil {
		return fail("receive ready", err)
	}
	if b[0] != 1 {
		return QPInfo{}, kverr.New(kverr.TransferFail, "", "rdma: peer sent %#x instead of ready", b[0])
	}
	return peer, nil
}

// Config tunes a Device. The zero value means defaults.
type Config struct {
	Port       uint8 // HCA port, default 1
	GIDIndex   int   // GID table index used on RoCE, default 0
	QueueDepth int   // send queue / CQ depth per Conn, default 128
}

// Validate reports an unusable Config.
func (c Config) Validate() error {
	if c.GIDIndex < 0 || c.GIDIndex > 255 || c.QueueDepth < 0 || c.QueueDepth > 16384 {
		return kverr.New(kverr.InvalidParams, "", "rdma: config %+v out of range", c)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Port == 0 {
		c.Port = 1
	}
	if c.QueueDepth == 0 {
		c.QueueDepth = 128
	}
	return c
}

func errNoDevice(detail string) error { return fmt.Errorf("%w: %s", ErrUnavailable, detail) }
