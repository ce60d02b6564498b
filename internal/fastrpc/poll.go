package fastrpc

import (
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Polling for the next frame (see "Polling" in the package doc).

// DefaultPoll is how long a server connection waits for its next request,
// and a caller for its answer, by polling before it parks: long enough to
// span the copy of a 1 MiB put between its PutStart and PutEnd (~150 µs
// here), short enough that an idle process stops within a third of a
// millisecond.
const DefaultPoll = 300 * time.Microsecond

// MaxPoll bounds the poll a front end should accept from an operator: past
// a few milliseconds polling only burns a core.
const MaxPoll = 10 * time.Millisecond

// One poller per process and side: a spinning goroutine holds a thread,
// so two of them would hold both cores of the machines kvtier is measured
// on. The server and client sides have one each, since a standalone
// process is both.
var serverPolling, clientPolling atomic.Bool

// poller decides whether a goroutine about to wait for bytes polls first.
type poller struct {
	d       atomic.Int64 // time.Duration; <= 0: never poll
	calls   atomic.Int32 // calls in progress on this Server or Conn
	polling *atomic.Bool // the process-wide gate of this side

	// caught counts polls that found bytes (or the end of the stream),
	// missed those that gave up; for tests and tuning.
	caught, missed atomic.Int64
}

// wait polls c until it has bytes (or an error) to read, p.d has passed,
// or more than others calls of this Server or Conn are in progress, so
// that the read that follows finds its bytes without parking. Each round
// is a non-blocking MSG_PEEK recv, then sched_yield(2) and
// runtime.Gosched: any runnable thread of any process, and any runnable
// goroutine of this one, takes the CPU before the next round.
func (p *poller) wait(c net.Conn, others int32) {
	d := time.Duration(p.d.Load())
	if d <= 0 || p.calls.Load() > others || !p.polling.CompareAndSwap(false, true) {
		return
	}
	defer p.polling.Store(false)
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	var b [1]byte
	end := time.Now().Add(d)
	_ = rc.Read(func(fd uintptr) bool {
		for i := 1; ; i++ {
			_, _, e := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if e != unix.EAGAIN && e != unix.EINTR {
				p.caught.Add(1) // bytes, end of stream or an error: the read reports it
				return true
			}
			if p.calls.Load() > others || i%8 == 0 && !time.Now().Before(end) {
				p.missed.Add(1)
				return true
			}
			_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
			runtime.Gosched()
		}
	})
}
