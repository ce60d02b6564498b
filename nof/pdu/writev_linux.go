package pdu

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxIOV is Linux's IOV_MAX: more pieces go to the blocking path.
const maxIOV = 1024

// tryWritev makes one non-blocking writev of bufs on rc and returns what
// the socket did not take (all of bufs when it took nothing).
func tryWritev(rc syscall.RawConn, bufs net.Buffers) (net.Buffers, error) {
	if len(bufs) > maxIOV {
		return bufs, nil
	}
	var n int
	var err error
	if rerr := rc.Write(func(fd uintptr) bool {
		n, err = unix.Writev(int(fd), bufs)
		return true // one attempt: never wait for the socket here
	}); rerr != nil {
		return nil, rerr
	}
	if err == unix.EAGAIN || err == unix.EINTR {
		return bufs, nil
	}
	if err != nil {
		return nil, err
	}
	for n > 0 && len(bufs) > 0 {
		if n < len(bufs[0]) {
			bufs[0] = bufs[0][n:]
			break
		}
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	for len(bufs) > 0 && len(bufs[0]) == 0 {
		bufs = bufs[1:]
	}
	return bufs, nil
}
