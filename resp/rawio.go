package resp

import (
	"errors"
	"io"
	"net"
	"syscall"
	"time"
	"unsafe"
)

// rawIO reads and writes a TCP connection's non-blocking socket with raw
// system calls, waiting in Go's network poller (syscall.RawConn) only when
// the socket has nothing to read or no room to write.
//
// Why: net.Conn's Read and Write enter the system call through the
// scheduler (entersyscall/exitsyscall). With one short request after
// another (4 KiB GETs) that hand-off is most of the cost: the runtime's
// monitor thread, woken by the system calls, runs every 20 us and hands
// the P of a goroutine it finds in a system call to another thread (a
// futex wake-up, on a VM a virtual-CPU wake-up). A read or write of a
// non-blocking socket never blocks, so a raw call is safe; it keeps its P
// for the few microseconds it takes. Writes of bigWrite bytes or more go
// through the scheduler as before: the kernel copies them for longer than
// a P should be held without the runtime knowing.
type rawIO struct {
	nc net.Conn
	rc syscall.RawConn

	// nowait is set while an event loop serves the connection (loop.go):
	// Read returns errWouldBlock instead of waiting, and Write never
	// waits either: what the socket does not take is kept in pending, in
	// order, for the connection's goroutine to send (the loop hands the
	// connection over as soon as pending is not empty).
	nowait  bool
	pending []byte

	// read's and Write's arguments and results, passed to the calls they
	// make through rc (readFn and writeFn: method values made once, so
	// that a call allocates no closure).
	rp      []byte
	rwait   bool
	rn      uintptr
	rerrno  syscall.Errno
	readFn  func(fd uintptr) bool
	wp      []byte
	wdone   int
	werrno  syscall.Errno
	writeFn func(fd uintptr) bool

	deadline bool // readLong set a read deadline; endLong clears it
}

// errWouldBlock: a read in event-loop mode found the socket empty.
var errWouldBlock = errors.New("resp: socket has nothing to read")

// bigWrite: writes at least this long use net.Conn's Write.
const bigWrite = 64 << 10

// newRawIO returns nc's raw reader and writer, or nil when nc has no
// file descriptor to use (not a TCP connection).
func newRawIO(nc net.Conn) *rawIO {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	r := &rawIO{nc: nc, rc: rc}
	r.readFn, r.writeFn = r.readSome, r.writeAll
	return r
}

func (r *rawIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return r.read(p, !r.nowait)
}

// read is one read of the socket. With wait an empty socket parks the
// goroutine in Go's poller until data comes; without it the answer is
// errWouldBlock at once.
func (r *rawIO) read(p []byte, wait bool) (int, error) {
	r.rp, r.rwait = p, wait
	err := r.rc.Read(r.readFn)
	n, errno := r.rn, r.rerrno
	r.rp, r.rn, r.rerrno = nil, 0, 0
	switch {
	case err != nil:
		return 0, err
	case errno == syscall.EAGAIN:
		return 0, errWouldBlock
	case errno != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return int(n), nil
}

// readSome is read's call under rc.Read (readFn).
func (r *rawIO) readSome(fd uintptr) bool {
	for {
		r.rn, _, r.rerrno = syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.rp[0])), uintptr(len(r.rp)))
		if r.rerrno != syscall.EINTR {
			return !r.rwait || r.rerrno != syscall.EAGAIN
		}
	}
}

// writeNow writes as much of p as the socket takes without waiting.
func (r *rawIO) writeNow(p []byte) (int, error) {
	done := 0
	var errno syscall.Errno
	err := r.rc.Write(func(fd uintptr) bool {
		for done < len(p) {
			var n uintptr
			var e syscall.Errno
			if len(p)-done >= bigWrite {
				// Through the scheduler: a long write copies for a while.
				n, _, e = syscall.Syscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[done])), uintptr(len(p)-done))
			} else {
				n, _, e = syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[done])), uintptr(len(p)-done))
			}
			switch e {
			case 0:
				done += int(n)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return true
			default:
				errno = e
				return true
			}
		}
		return true
	})
	if err == nil && errno != 0 {
		err = &net.OpError{Op: "write", Net: "tcp", Err: errno}
	}
	return done, err
}

// drain leaves event-loop mode: it clears nowait and sends pending,
// waiting for the socket as long as it takes.
func (r *rawIO) drain() error {
	r.nowait = false
	if len(r.pending) == 0 {
		return nil
	}
	p := r.pending
	r.pending = nil
	_, err := r.Write(p)
	return err
}

func (r *rawIO) Write(p []byte) (int, error) {
	if r.nowait {
		all := len(p)
		if len(r.pending) == 0 {
			n, err := r.writeNow(p)
			if err != nil {
				return n, err
			}
			p = p[n:]
		}
		r.pending = append(r.pending, p...)
		return all, nil
	}
	if len(p) >= bigWrite {
		return r.nc.Write(p)
	}
	r.wp = p
	err := r.rc.Write(r.writeFn)
	done, errno := r.wdone, r.werrno
	r.wp, r.wdone, r.werrno = nil, 0, 0
	if err == nil && errno != 0 {
		err = &net.OpError{Op: "write", Net: "tcp", Err: errno}
	}
	return done, err
}

// writeAll is Write's call under rc.Write (writeFn): it writes r.wp
// until the socket is full (then it waits in the poller and is called
// again) or all went.
func (r *rawIO) writeAll(fd uintptr) bool {
	p := r.wp
	for r.wdone < len(p) {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[r.wdone])), uintptr(len(p)-r.wdone))
		switch e {
		case 0:
			r.wdone += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // wait until the socket takes more
		default:
			r.werrno = e
			return true
		}
	}
	return true
}

// writevNow writes as much of bufs as the socket takes without waiting
// (one writev; none when the socket is full) and returns how many bytes
// it wrote.
func (r *rawIO) writevNow(bufs [][]byte) (int, error) {
	var iov [4]syscall.Iovec
	n := 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if n == len(iov) {
			break
		}
		iov[n].Base = &b[0]
		iov[n].SetLen(len(b))
		n++
	}
	if n == 0 || r.nowait && len(r.pending) > 0 {
		return 0, nil
	}
	var done uintptr
	var errno syscall.Errno
	err := r.rc.Write(func(fd uintptr) bool {
		for {
			// Through the scheduler: a long writev copies for a while.
			done, _, errno = syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(n))
			if errno != syscall.EINTR {
				return true
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno == syscall.EAGAIN:
		return 0, nil
	case errno != 0:
		return 0, &net.OpError{Op: "writev", Net: "tcp", Err: errno}
	}
	return int(done), nil
}

// readLong reads into p what the socket holds (at most len(p)), waiting
// only when it holds nothing: the rest of a long argument, in reads as
// large as what is left of it. With until set, a wait ends then
// (os.ErrDeadlineExceeded).
func (r *rawIO) readLong(p []byte, until time.Time) (int, error) {
	if until.IsZero() && r.deadline {
		// A deadline that passed fails every read (Go's poller checks it
		// first): clear the one set for an earlier read.
		r.endLong()
	}
	n, err := r.read(p, false)
	if err != errWouldBlock {
		return n, err
	}
	if !until.IsZero() && !r.deadline {
		if err := r.nc.SetReadDeadline(until); err != nil {
			return 0, err
		}
		r.deadline = true
	}
	return r.read(p, true)
}

// endLong clears what readLong set.
func (r *rawIO) endLong() {
	if r.deadline {
		_ = r.nc.SetReadDeadline(time.Time{})
		r.deadline = false
	}
}
