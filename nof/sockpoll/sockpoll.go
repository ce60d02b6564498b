// Package sockpoll owns polling reads of a TCP socket for the NVMe/TCP
// initiator and target: a reader that, finding the socket empty, retries
// for a bounded time before Go's poller parks the goroutine, trading that
// CPU for the park and wake-up a polling driver (SPDK) never pays.
package sockpoll

import (
	"errors"
	"io"
	"net"
	"syscall"
	"time"
)

// spinReader reads a TCP connection and, when it finds the socket empty,
// polls it for up to spin before letting Go's poller park the goroutine:
// a completion that arrives within microseconds is then taken without the
// park, the epoll wake-up and the reschedule (what spdk_nvme_perf gets by
// polling its sockets all the time). It costs the CPU it spins.
type spinReader struct {
	rc   syscall.RawConn
	spin time.Duration
}

// NewReader returns nc itself when spin <= 0 or nc exposes no raw
// descriptor (a TLS or test connection).
func NewReader(nc net.Conn, spin time.Duration) io.Reader {
	sc, ok := nc.(syscall.Conn)
	if spin <= 0 || !ok {
		return nc
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nc
	}
	return &spinReader{rc: rc, spin: spin}
}

func (s *spinReader) Read(p []byte) (int, error) {
	var n int
	var rerr error
	var until time.Time
	err := s.rc.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Read(int(fd), p)
			if rerr == syscall.EINTR {
				continue
			}
			if rerr != syscall.EAGAIN {
				return true
			}
			now := time.Now()
			if until.IsZero() {
				until = now.Add(s.spin)
			} else if now.After(until) {
				until = time.Time{} // the next wake-up spins afresh
				return false        // park in the poller
			}
		}
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	if n < 0 {
		return 0, errors.New("nvme-tcp: negative read")
	}
	return n, nil
}
