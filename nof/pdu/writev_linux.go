package pdu

import (
	"net"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// iovScratch is the iovec array tryWritev reuses (one per Writer, used by
// its flushing goroutine only), so a push allocates nothing.
type iovScratch = []unix.Iovec

// maxIOV is Linux's IOV_MAX: more pieces go to the blocking path.
const maxIOV = 1024

// tryWritev makes one non-blocking writev of bufs on rc and returns what
// the socket did not take (all of bufs when it took nothing).
func tryWritev(rc syscall.RawConn, bufs net.Buffers, scratch *iovScratch) (net.Buffers, error) {
	if len(bufs) > maxIOV {
		return bufs, nil
	}
	iov := (*scratch)[:0]
	for _, b := range bufs {
		if len(b) > 0 {
			v := unix.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			iov = append(iov, v)
		}
	}
	*scratch = iov
	if len(iov) == 0 {
		return nil, nil
	}
	var n uintptr
	var errno syscall.Errno
	if rerr := rc.Write(func(fd uintptr) bool {
		n, _, errno = unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
		return true // one attempt: never wait for the socket here
	}); rerr != nil {
		return nil, rerr
	}
	clear(iov) // drop the pointers into callers' buffers
	if errno == unix.EAGAIN || errno == unix.EINTR {
		return bufs, nil
	}
	if errno != 0 {
		return nil, errno
	}
	for n > 0 && len(bufs) > 0 {
		if n < uintptr(len(bufs[0])) {
			bufs[0] = bufs[0][n:]
			break
		}
		n -= uintptr(len(bufs[0]))
		bufs = bufs[1:]
	}
	for len(bufs) > 0 && len(bufs[0]) == 0 {
		bufs = bufs[1:]
	}
	return bufs, nil
}
