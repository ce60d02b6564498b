package fastrpc

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// alive reports whether an idle connection is still open and quiet: a
// non-blocking peek finds no bytes and no end of stream. A pooled
// connection whose server restarted or lost its leadership is so dropped
// before a call is put on it.
func (fc *fconn) alive() bool {
	if fc.r.Buffered() > 0 {
		return false // an idle connection has nothing to read
	}
	sc, ok := fc.nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	quiet := false
	err = rc.Read(func(fd uintptr) bool {
		_, _, e := unix.Recvfrom(int(fd), fc.scratch[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		quiet = e == unix.EAGAIN
		return true // never wait
	})
	return err == nil && quiet
}
