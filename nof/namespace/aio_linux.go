package namespace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux native AIO (io_submit/io_getevents), used for aligned O_DIRECT
// transfers. A blocking pread per request parks one OS thread and one
// scheduler P per outstanding I/O; with AIO submission does not block, which
// is what lets a handful of cores keep a deep queue of direct I/O in flight
// (the way fio's libaio engine does).
//
// Completion: every request names an eventfd (IOCB_FLAG_RESFD) taken from a
// small pool for its lifetime, and its waiter reads that eventfd through the
// Go netpoller. The kernel posts the event to the ring before it signals the
// eventfd, so the woken waiter collects it (and any other finished ones)
// with a non-blocking io_getevents. Nobody ever sits in a blocking system
// call: a blocking io_getevents pinned one of the few scheduler Ps until
// sysmon retook it, and a shared reaper goroutine added a second wake-up
// (reaper, then waiter) to every I/O's latency.

const (
	iocbCmdPread  = 0
	iocbCmdPwrite = 1
	// iocbFlagResfd asks the kernel to signal iocb.resfd on completion.
	iocbFlagResfd = 1
)

// iocb mirrors struct iocb (64 bytes, little-endian field order).
type iocb struct {
	data      uint64
	key       uint32
	rwFlags   uint32
	opcode    uint16
	reqprio   int16
	fildes    uint32
	buf       uint64
	nbytes    uint64
	offset    int64
	reserved2 uint64
	flags     uint32
	resfd     uint32
}

// ioEvent mirrors struct io_event (32 bytes).
type ioEvent struct {
	data uint64
	obj  uint64
	res  int64
	res2 int64
}

// Compile-time checks that the mirrors have the kernel's sizes.
var (
	_ [unsafe.Sizeof(iocb{}) - 64]byte
	_ [64 - unsafe.Sizeof(iocb{})]byte
	_ [unsafe.Sizeof(ioEvent{}) - 32]byte
	_ [32 - unsafe.Sizeof(ioEvent{})]byte
)

// evfd is a non-blocking eventfd registered with the runtime's poller.
type evfd struct {
	f  *os.File
	fd int
}

// aioReq is one submitted transfer.
type aioReq struct {
	cb          iocb   // handed to the kernel; kept reachable until collected
	buf         []byte // kept referenced until the kernel is done with it
	ev          *evfd
	res         int64 // valid once collected
	collected   bool  // guarded by aioRing.mu
	unsubmitted bool  // the kernel refused it: nothing was transferred
}

// aioRing is one AIO context.
type aioRing struct {
	ctx   uint64
	depth int // most requests in flight (and eventfds made)

	mu      sync.Mutex // guards the fields below
	pending map[uint64]*aioReq
	next    uint64
	closed  bool
	free    []*evfd // idle eventfds
	all     []*evfd // every eventfd made, closed by close
	events  []ioEvent
	leaked  []*aioReq // completions that could not be collected

	inflight sync.WaitGroup // submitted and not yet waited for
}

func newAIO(depth int) (*aioRing, error) {
	a := &aioRing{depth: depth, pending: map[uint64]*aioReq{}, events: make([]ioEvent, 64)}
	if _, _, e := syscall.Syscall(unix.SYS_IO_SETUP, uintptr(depth), uintptr(unsafe.Pointer(&a.ctx)), 0); e != 0 {
		return nil, fmt.Errorf("io_setup: %w", e)
	}
	return a, nil
}

var errAIOUnavailable = errors.New("aio unavailable")

// getEvfd takes an idle eventfd or makes one, up to depth of them (more
// requests than the ring holds would be refused anyway); a.mu is held.
func (a *aioRing) getEvfd() (*evfd, error) {
	if n := len(a.free); n > 0 {
		e := a.free[n-1]
		a.free = a.free[:n-1]
		return e, nil
	}
	if len(a.all) >= a.depth {
		return nil, errAIOUnavailable
	}
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	e := &evfd{f: os.NewFile(uintptr(fd), "aio-eventfd"), fd: fd}
	a.all = append(a.all, e)
	return e, nil
}

// aioBatch gathers requests to hand to the kernel in one io_submit.
type aioBatch struct {
	reqs []*aioReq
	cbs  []*iocb
}

// queue registers one transfer in b; errAIOUnavailable means "use
// pread/pwrite". Its wait blocks until submit(b) ran.
func (a *aioRing) queue(b *aioBatch, op uint16, fd int, p []byte, off int64) (*aioReq, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errAIOUnavailable
	}
	ev, err := a.getEvfd()
	if err != nil {
		return nil, errAIOUnavailable
	}
	a.next++
	id := a.next
	r := &aioReq{buf: p, ev: ev}
	r.cb = iocb{data: id, opcode: op, fildes: uint32(fd), buf: uint64(uintptr(unsafe.Pointer(&p[0]))), nbytes: uint64(len(p)), offset: off,
		flags: iocbFlagResfd, resfd: uint32(ev.fd)}
	a.pending[id] = r
	a.inflight.Add(1)
	b.reqs = append(b.reqs, r)
	b.cbs = append(b.cbs, &r.cb)
	return r, nil
}

// submit hands b's requests to the kernel with as few io_submit calls as
// it takes. Requests the kernel refuses (ring full, unsupported) complete
// at once as unsubmitted: their waiters fall back to pread/pwrite.
func (a *aioRing) submit(b *aioBatch) {
	done := 0
	for done < len(b.cbs) {
		n, _, e := syscall.Syscall(unix.SYS_IO_SUBMIT, uintptr(a.ctx), uintptr(len(b.cbs)-done), uintptr(unsafe.Pointer(&b.cbs[done])))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 || n == 0 {
			break
		}
		done += int(n)
	}
	if done < len(b.reqs) {
		one := [8]byte{1}
		a.mu.Lock()
		for _, r := range b.reqs[done:] {
			delete(a.pending, r.cb.data)
			r.collected, r.unsubmitted = true, true
			r.ev.f.Write(one[:]) // wake the waiter
		}
		a.mu.Unlock()
	}
	clear(b.reqs)
	clear(b.cbs)
	b.reqs, b.cbs = b.reqs[:0], b.cbs[:0]
}

// start submits one transfer; errAIOUnavailable means "use pread/pwrite".
func (a *aioRing) start(op uint16, fd int, p []byte, off int64) (*aioReq, error) {
	var b aioBatch
	r, err := a.queue(&b, op, fd, p, off)
	if err != nil {
		return nil, err
	}
	a.submit(&b)
	return r, nil
}

// wait blocks until r completed and returns its outcome.
func (a *aioRing) wait(r *aioReq) error {
	defer a.inflight.Done()
	var cnt [8]byte
	// Parks in the netpoller until the kernel signals r's eventfd.
	_, rerr := io.ReadFull(r.ev.f, cnt[:])
	a.mu.Lock()
	for !r.collected {
		// rerr != nil cannot happen for a live eventfd; should it, wait for
		// the event in the kernel instead (min_nr 1, short timeouts).
		minNr, ts := 0, unix.Timespec{}
		if rerr != nil {
			minNr, ts = 1, unix.Timespec{Nsec: 1e6}
		}
		n, _, e := syscall.Syscall6(unix.SYS_IO_GETEVENTS, uintptr(a.ctx), uintptr(minNr), uintptr(len(a.events)),
			uintptr(unsafe.Pointer(&a.events[0])), uintptr(unsafe.Pointer(&ts)), 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			// The request may still be the kernel's: keep its buffer
			// alive for good rather than let it be reused under a
			// transfer.
			a.leaked = append(a.leaked, r)
			a.mu.Unlock()
			return fmt.Errorf("io_getevents: %w", e)
		}
		for _, ev := range a.events[:n] {
			if q := a.pending[ev.data]; q != nil {
				delete(a.pending, ev.data)
				q.res = ev.res
				q.collected = true
			}
		}
	}
	if rerr == nil {
		a.free = append(a.free, r.ev)
	}
	a.mu.Unlock()
	runtime.KeepAlive(r.buf)
	if r.unsubmitted {
		return errAIOUnavailable
	}
	if r.res < 0 {
		return syscall.Errno(-r.res)
	}
	if int(r.res) != len(r.buf) {
		return fmt.Errorf("short transfer: %d of %d bytes", r.res, len(r.buf))
	}
	return nil
}

// do runs one transfer; errAIOUnavailable means "use pread/pwrite".
func (a *aioRing) do(op uint16, fd int, p []byte, off int64) error {
	r, err := a.start(op, fd, p, off)
	if err != nil {
		return err
	}
	return a.wait(r)
}

// close stops accepting requests, waits for the in-flight ones and frees
// the context and the eventfds.
func (a *aioRing) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.inflight.Wait()
	syscall.Syscall(unix.SYS_IO_DESTROY, uintptr(a.ctx), 0, 0)
	a.mu.Lock()
	for _, e := range a.all {
		e.f.Close()
	}
	a.all, a.free = nil, nil
	a.mu.Unlock()
}
