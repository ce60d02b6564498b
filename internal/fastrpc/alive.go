package fastrpc

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// alive reports whether an idle connection is still open and quiet: a
// non-blocking peek finds no bytes and no end of stream. A pooled
// connection whose server restarted or lost its leadership is so dropped
// before a call is put on it. The raw connection and the peek function are
// made once per connection: per call they were three allocations.
func (fc *fconn) alive() bool {
	if fc.r.Buffered() > 0 {
		return false // an idle connection has nothing to read
	}
	if fc.rc == nil {
		sc, ok := fc.nc.(syscall.Conn)
		if !ok {
			return true
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			return false
		}
		fc.rc, fc.peekFn = rc, fc.peekQuiet
	}
	fc.quiet = false
	err := fc.rc.Read(fc.peekFn)
	return err == nil && fc.quiet
}

func (fc *fconn) peekQuiet(fd uintptr) bool {
	fc.quiet = peek(fd, &fc.scratch[0]) == unix.EAGAIN
	return true // never wait
}
