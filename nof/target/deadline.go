package target

import (
	"io"
	"net"
	"sync/atomic"
	"time"
)

// deadlineReader is what a connection's pdu.Reader reads from: it arms the
// socket's read deadline for each read, so a host cannot hold a connection
// (and its file descriptor) by sending half a PDU, or by connecting and
// sending nothing. The reader goroutine alone uses it.
//
// A read that waits for the first byte of a PDU (idle set by serve when
// nothing of the next PDU is buffered) gets the idle bound (see idle); any
// other read is in the middle of a PDU and gets Config.HeaderTimeout.
// Re-arming a deadline is a runtime timer update, so it is skipped while
// the armed deadline is still within an eighth of the bound of what it
// would be set to: the hot path pays a clock read, not a timer change, per
// read.
type deadlineReader struct {
	c       *conn
	nc      net.Conn
	idle    bool          // the next read waits for the first byte of a PDU
	armed   time.Time     // the deadline set on nc (zero: none)
	armedHd bool          // armed is a header deadline
	reads   atomic.Uint64 // Read calls (Stats.Transport)
	src     io.Reader     // nc through a polling reader (Config.PollSpin), or nil
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	hd := !d.idle
	d.idle = false
	bound := d.c.t.cfg.HeaderTimeout
	if !hd {
		bound = d.c.idleBound()
	}
	if bound == 0 {
		if !d.armed.IsZero() {
			d.nc.SetReadDeadline(time.Time{})
			d.armed = time.Time{}
		}
	} else {
		want := time.Now().Add(bound)
		if d.armed.IsZero() || hd != d.armedHd || want.Sub(d.armed) > bound/8 || want.Before(d.armed) {
			d.nc.SetReadDeadline(want)
			d.armed, d.armedHd = want, hd
		}
	}
	d.reads.Add(1)
	if d.src != nil {
		return d.src.Read(p)
	}
	return d.nc.Read(p)
}

// idleBound is how long the connection may wait for the next PDU: until
// Connect it is HeaderTimeout (a connection without a controller has no
// reason to be idle), and so it stays until the queue authenticated when
// its subsystem requires in-band authentication; then none while the controller has a keep-alive
// timer (it tears the queues down), else Config.IdleTimeout.
func (c *conn) idleBound() time.Duration {
	ctrl := c.ctrl
	if ctrl == nil || !c.authed {
		return c.t.cfg.HeaderTimeout
	}
	if ctrl.keepAlive.Load() {
		return 0
	}
	return c.t.cfg.IdleTimeout
}
