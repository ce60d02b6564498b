package namespace

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Linux native AIO (io_submit/io_getevents), used for aligned O_DIRECT
// transfers. A blocking pread per request parks one OS thread and one
// scheduler P per outstanding I/O; with AIO submission does not block and a
// single goroutine reaps completions, which is what lets a handful of cores
// keep a deep queue of direct I/O in flight (the way fio's libaio engine
// does).

const (
	iocbCmdPread  = 0
	iocbCmdPwrite = 1
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

type aioReq struct {
	buf  []byte // kept referenced until the kernel is done with it
	res  int64
	done chan struct{}
}

// aioRing is one AIO context with a reaper goroutine.
type aioRing struct {
	ctx uint64

	mu      sync.Mutex // guards pending, next, closed
	pending map[uint64]*aioReq
	next    uint64
	closed  bool

	reaped chan struct{} // closed when the reaper exits
}

// Compile-time checks that the mirrors have the kernel's sizes.
var (
	_ [unsafe.Sizeof(iocb{}) - 64]byte
	_ [64 - unsafe.Sizeof(iocb{})]byte
	_ [unsafe.Sizeof(ioEvent{}) - 32]byte
	_ [32 - unsafe.Sizeof(ioEvent{})]byte
)

func newAIO(depth int) (*aioRing, error) {
	a := &aioRing{pending: map[uint64]*aioReq{}, reaped: make(chan struct{})}
	if _, _, e := syscall.Syscall(unix.SYS_IO_SETUP, uintptr(depth), uintptr(unsafe.Pointer(&a.ctx)), 0); e != 0 {
		return nil, fmt.Errorf("io_setup: %w", e)
	}
	go a.reap()
	return a, nil
}

func (a *aioRing) reap() {
	defer close(a.reaped)
	events := make([]ioEvent, 128)
	ts := unix.Timespec{Nsec: 100e6} // wake up now and then to notice close
	for {
		n, _, e := syscall.Syscall6(unix.SYS_IO_GETEVENTS, uintptr(a.ctx), 1, uintptr(len(events)),
			uintptr(unsafe.Pointer(&events[0])), uintptr(unsafe.Pointer(&ts)), 0)
		if e == syscall.EINTR {
			n = 0 // interrupted (e.g. by the runtime's preemption signal): nothing reaped
		} else if e != 0 {
			a.failAll(e)
			return
		}
		a.mu.Lock()
		for _, ev := range events[:n] {
			if r := a.pending[ev.data]; r != nil {
				delete(a.pending, ev.data)
				r.res = ev.res
				close(r.done)
			}
		}
		stop := a.closed && len(a.pending) == 0
		a.mu.Unlock()
		if stop {
			return
		}
	}
}

func (a *aioRing) failAll(e error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	for id, r := range a.pending {
		delete(a.pending, id)
		r.res = -int64(syscall.EIO)
		close(r.done)
	}
	_ = e
}

var errAIOUnavailable = errors.New("aio unavailable")

// do runs one transfer; errAIOUnavailable means "use pread/pwrite".
func (a *aioRing) do(op uint16, fd int, p []byte, off int64) error {
	r := &aioReq{buf: p, done: make(chan struct{})}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return errAIOUnavailable
	}
	a.next++
	id := a.next
	a.pending[id] = r
	a.mu.Unlock()
	cb := &iocb{data: id, opcode: op, fildes: uint32(fd), buf: uint64(uintptr(unsafe.Pointer(&p[0]))), nbytes: uint64(len(p)), offset: off}
	cbs := [1]*iocb{cb}
	n, _, e := syscall.Syscall(unix.SYS_IO_SUBMIT, uintptr(a.ctx), 1, uintptr(unsafe.Pointer(&cbs[0])))
	runtime.KeepAlive(cb)
	if e != 0 || n != 1 {
		a.mu.Lock()
		delete(a.pending, id)
		a.mu.Unlock()
		return errAIOUnavailable
	}
	<-r.done
	runtime.KeepAlive(p)
	if r.res < 0 {
		return syscall.Errno(-r.res)
	}
	if int(r.res) != len(p) {
		return fmt.Errorf("short transfer: %d of %d bytes", r.res, len(p))
	}
	return nil
}

// close stops accepting requests, waits for the in-flight ones and frees
// the context.
func (a *aioRing) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	<-a.reaped
	syscall.Syscall(unix.SYS_IO_DESTROY, uintptr(a.ctx), 0, 0)
}
