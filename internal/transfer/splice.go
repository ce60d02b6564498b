package transfer

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Zero-copy sends. A write(2) of a large payload copies every byte into
// socket buffers before the kernel moves them; vmsplice(2) instead maps
// the caller's pages into a pipe by reference, and splice(2) hands those
// pages to the socket, so the only copy left is the receiver's (on
// loopback the peer copies straight out of the caller's memory; a NIC
// with scatter-gather sends from it). The writev of a 1 MiB direct put
// took its sender ~350 µs over loopback; a loopback microbenchmark of
// 1 MiB messages ran 2.4-2.9 GB/s written and 3-12 GB/s spliced (both
// processes' CPU per message 360-440 µs against 135-340; the slow spliced
// rounds are BBR's, BenchmarkClientPutGet's notes).
//
// The pages stay referenced by the socket until the peer has acknowledged
// them, so the bytes must not change until then. A direct put holds its
// values until the node's answer, which comes after the node has read
// every byte; a connection that fails before the answer is reset instead
// of closed (SO_LINGER 0), which drops what it still had queued, so
// memory the caller reuses after a failed put is never sent. And the
// node checks every put's CRC32C: bytes changed in flight fail the put.

// spliceMin is the smallest frame payload sent by reference: below it
// the pipe's two extra system calls cost about what the copy saves
// (64 KiB: 12.3 µs a write either way, loopback).
const spliceMin = 256 << 10

// spliceMax is the largest frame payload sent by reference. Above the
// pipe's size a send takes several vmsplice/splice rounds, and on
// loopback that measured slower than one writev: 16 MiB direct puts went
// from 0.85-0.94 x raw TCP (written) to 0.55-0.62 (spliced), 2 and 4 MiB
// were slower in a microbenchmark too.
const spliceMax = splicePipe

// splicePipe is the pipe size asked for (F_SETPIPE_SZ; the kernel's
// default 64 KiB when refused): a 1 MiB put moves in one vmsplice and one
// splice. Its pages are the caller's, so it costs no memory of its own.
const splicePipe = 1 << 20

// minSocketBuffer is the smallest Config.SocketBuffer: a receiver whose
// buffer is smaller than a few pages never opens its window to a spliced
// send (TestSplicerSlowReader stalls with 4 KiB, passes with 16 KiB).
const minSocketBuffer = 64 << 10

// splicer sends payloads of one connection by reference.
type splicer struct {
	rc     syscall.RawConn
	pr, pw int
	iov    []unix.Iovec
	vals   [][]byte // send's own copy of its argument, advanced as bytes go
}

// newSplicer returns a splicer for nc, or an error where the socket or the
// kernel cannot take one (the caller writes instead).
func newSplicer(nc net.Conn) (*splicer, error) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil, errors.New("splice: not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, err
	}
	_, _ = unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, splicePipe)
	return &splicer{rc: rc, pr: p[0], pw: p[1]}, nil
}

func (s *splicer) close() {
	unix.Close(s.pr)
	unix.Close(s.pw)
}

// send moves vals into the socket, in order, by reference. It returns
// once the socket holds every byte (the pipe is empty again); the
// connection's write deadline bounds its waits for room in the socket.
func (s *splicer) send(payload [][]byte) error {
	vals := append(s.vals[:0], payload...)
	defer clear(s.vals[:cap(s.vals)]) // no reference to the caller's memory kept
	s.vals = vals[:0]
	inPipe := 0
	for len(vals) > 0 || inPipe > 0 {
		if len(vals) > 0 {
			var n int
			var err error
			if vals, n, err = s.fill(vals); err != nil {
				return err
			}
			inPipe += n
		}
		if inPipe == 0 {
			continue
		}
		var serr error
		err := s.rc.Write(func(fd uintptr) bool {
			n, err := unix.Splice(s.pr, nil, int(fd), nil, inPipe, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			for err == unix.EINTR {
				n, err = unix.Splice(s.pr, nil, int(fd), nil, inPipe, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			}
			switch {
			case err == unix.EAGAIN:
				return false // the socket is full: wait for room
			case err != nil:
				serr = err
			case n == 0:
				serr = errors.New("splice: socket took no bytes")
			default:
				inPipe -= int(n)
			}
			return true
		})
		if err != nil {
			return err
		}
		if serr != nil {
			return serr
		}
	}
	return nil
}

// fill maps as much of vals into the pipe as it has room for, and
// returns the values left (vals, advanced in place) and the bytes
// mapped. A full pipe maps nothing: SPLICE_F_NONBLOCK, because a
// vmsplice without it waits for a reader of the pipe, and the pipe's
// only reader is the caller (a blocked send was seen with 16 MiB puts).
func (s *splicer) fill(vals [][]byte) ([][]byte, int, error) {
	s.iov = s.iov[:0]
	for _, v := range vals {
		if len(v) == 0 {
			continue
		}
		iov := unix.Iovec{Base: &v[0]}
		iov.SetLen(len(v))
		s.iov = append(s.iov, iov)
		if len(s.iov) == 1024 { // IOV_MAX
			break
		}
	}
	var n int
	var err error
	if len(s.iov) > 0 {
		n, err = unix.Vmsplice(s.pw, s.iov, unix.SPLICE_F_NONBLOCK)
	}
	switch {
	case err == unix.EAGAIN: // the pipe is full: the caller drains it first
		return vals, 0, nil
	case err != nil:
		return vals, 0, err
	}
	mapped := n
	for len(vals) > 0 && n >= len(vals[0]) {
		n -= len(vals[0])
		vals = vals[1:]
	}
	if n > 0 {
		vals[0] = vals[0][n:]
	}
	return vals, mapped, nil
}
