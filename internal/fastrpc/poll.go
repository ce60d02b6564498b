package fastrpc

import (
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Polling for the next frame (see "Polling" in the package doc).

// DefaultServerPoll bounds how long a server connection polls for its next
// request: long enough to span what a client does between a put's two
// calls (~150 µs for 1 MiB through shared memory, ~550 µs over TCP here).
// A connection polls only while one of its last four requests came within
// that of the answer before it (see gaps).
const DefaultServerPoll = time.Millisecond

// MaxPoll bounds the poll a front end should accept from an operator: past
// a few milliseconds polling only burns a core.
const MaxPoll = 10 * time.Millisecond

// One poller per process: a spinning goroutine holds a thread, so two of
// them would hold both cores of the machines kvtier is measured on.
var serverPolling atomic.Bool

// poller decides whether a goroutine about to wait for bytes polls first.
type poller struct {
	d       atomic.Int64 // the Server's bound (time.Duration); <= 0: never poll
	calls   atomic.Int32 // calls being answered by this Server
	polling *atomic.Bool // the process-wide gate

	// caught counts polls that found bytes (or the end of the stream),
	// missed those that gave up; for tests and tuning.
	caught, missed atomic.Int64
}

// waitFor polls c until it has bytes (or an error) to read, d has passed,
// or a call of this Server is being answered (then the CPU is awake and
// busy anyway), so that the read that follows finds its bytes without
// parking. Each round is a
// non-blocking MSG_PEEK recv, then sched_yield(2) and runtime.Gosched: any
// runnable thread of any process, and any runnable goroutine of this one,
// takes the CPU before the next round.
func (p *poller) waitFor(c net.Conn, d time.Duration) { p.conn(c).wait(d) }

// pollConn is one connection's polling state, made once per connection so
// that a poll allocates nothing (a raw connection and a closure per poll
// were two allocations a call).
type pollConn struct {
	p     *poller
	rc    syscall.RawConn // nil: the connection cannot be polled
	round func(fd uintptr) bool
	end   time.Time
	b     [1]byte
}

func (p *poller) conn(c net.Conn) *pollConn {
	pc := &pollConn{p: p}
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			pc.rc = rc
		}
	}
	pc.round = pc.spin
	return pc
}

// wait is waitFor on pc's connection. It does not poll in a process with
// one P (GOMAXPROCS 1: a one-CPU container or affinity): the spinning
// goroutine is then always runnable, and the scheduler looks for network
// readiness only when it finds nothing runnable, so every other
// connection's goroutines would wait for the poll to end or for sysmon's
// network poll. Measured (standalone pinned to one vCPU, the bench client
// to the other, 64 KiB direct puts over TCP, 4 callers): 0.067 and 0.148
// GB/s (p50 1.6-3.5 ms) in two of three runs polling, 0.77 GB/s (p50 239
// µs) with --rpc-poll 0, and 1.47-1.48 GB/s (p50 140 µs) in both runs
// with this rule; a read on another connection during a poll woke
// 0.2-4.8 ms after its byte was written, ~0.1 ms without the poll.
func (pc *pollConn) wait(d time.Duration) {
	p := pc.p
	if d <= 0 || pc.rc == nil || p.calls.Load() > 0 || runtime.GOMAXPROCS(0) < 2 || !p.polling.CompareAndSwap(false, true) {
		return
	}
	defer p.polling.Store(false)
	pc.end = time.Now().Add(d)
	_ = pc.rc.Read(pc.round)
}

func (pc *pollConn) spin(fd uintptr) bool {
	p := pc.p
	for i := 1; ; i++ {
		if e := peek(fd, &pc.b[0]); e != unix.EAGAIN && e != unix.EINTR {
			p.caught.Add(1) // bytes, end of stream or an error: the read reports it
			return true
		}
		if p.calls.Load() > 0 || i%8 == 0 && !time.Now().Before(pc.end) {
			p.missed.Add(1)
			return true
		}
		_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		runtime.Gosched()
	}
}

// peek is a non-blocking MSG_PEEK recv of one byte into b: 0 when bytes or
// the end of the stream wait, EAGAIN when nothing does, else the error.
// (unix.Recvfrom allocates the sender's address on every call.)
func peek(fd uintptr, b *byte) unix.Errno {
	_, _, e := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(b)), 1, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return e
}

// gaps remembers how far apart a connection's recent requests came (from
// the previous answer to the next request), so that only a connection in a
// run of calls polls: sporadic calls such as heartbeats never do.
type gaps struct {
	last [4]time.Duration
	n    int
}

func (g *gaps) add(d time.Duration) {
	g.last[g.n%len(g.last)] = d
	g.n++
}

// window returns how long to poll: limit when any of the last four gaps
// was at most limit (or the connection is new), else nothing. Not the
// gaps' own length: a client's gaps vary widely (a put over TCP alternates
// ~40 µs and ~550 µs, with stragglers of milliseconds), and a poll that
// ends too early costs the wake-up it was for.
func (g *gaps) window(limit time.Duration) time.Duration {
	if limit <= 0 {
		return 0
	}
	for i := 0; i < min(g.n, len(g.last)); i++ {
		if g.last[i] <= limit {
			return limit
		}
	}
	if g.n == 0 {
		return limit
	}
	return 0
}
