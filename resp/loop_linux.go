//go:build linux

package resp

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// eventLoop serves connections the way redis-server does (Config.EventLoop;
// see the package doc, "Event loop"): one goroutine owns an epoll
// instance (level-triggered), and each round it reads every ready
// connection once, runs the whole commands that arrived, and writes their
// replies with one write. A connection leaves the loop for a goroutine of
// its own (serveConn) whenever serving it could wait: an argument of
// bigArg bytes or more, a command still incomplete when the read buffer
// is full, a command outside the loop's set (command.inline), a SET that
// replaces a value (it may wait for another writer's put), or replies the socket did not take
// at once. The goroutine returns it to the loop when its read buffer is
// empty again.
type eventLoop struct {
	s    *Server
	epfd int
	ep   *os.File        // epfd, non-blocking, in Go's network poller
	rc   syscall.RawConn // of ep: the loop waits there for events
	wake int             // eventfd: stop wakes the loop

	mu     sync.Mutex // guards the fields below
	slots  []*conn    // the connections the loop serves, by epoll token
	free   []int32    // unused slots
	closed bool
}

// wakeToken is the epoll token of the eventfd.
const wakeToken = -1

// startLoops starts the event loops.
func (s *Server) startLoops() error {
	// One loop per 4 CPUs: a loop runs the short commands of all its
	// connections (as redis-server's one thread does); the other CPUs run
	// the connections handed to goroutines, the SDK's and the clients'
	// work. On 2 vCPUs two loops measured more wake-ups per request than
	// one (each woke for fewer connections).
	n := max(1, runtime.GOMAXPROCS(0)/4)
	for range n {
		l, err := newEventLoop(s)
		if err != nil {
			for _, l := range s.loops {
				l.stop()
			}
			s.loops = nil
			return err
		}
		s.loops = append(s.loops, l)
		s.wg.Add(1)
		go l.run()
	}
	return nil
}

func newEventLoop(s *Server) (*eventLoop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("resp: event loop: epoll_create1: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("resp: event loop: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeToken}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, fmt.Errorf("resp: event loop: epoll_ctl: %w", err)
	}
	// The loop waits for events in Go's network poller (the epoll
	// descriptor is readable while events are ready), not in a blocking
	// epoll_wait: a goroutine blocked in a system call costs its P a
	// hand-off to another thread by the runtime's monitor, per round.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, fmt.Errorf("resp: event loop: %w", err)
	}
	ep := os.NewFile(uintptr(epfd), "resp-epoll")
	rc, err := ep.SyscallConn()
	if err != nil {
		ep.Close()
		unix.Close(wake)
		return nil, fmt.Errorf("resp: event loop: %w", err)
	}
	return &eventLoop{s: s, epfd: epfd, ep: ep, rc: rc, wake: wake}, nil
}

// loopSpin: after a round that ran several commands itself, the loop
// polls for this long before it parks in Go's poller. With several
// clients the next request is usually that close; parking costs a
// thread's sleep and wake-up. After a round of one command (one client:
// it has to receive the reply and send the next request, tens of
// microseconds) or of hand-offs (long values: their goroutines do the
// work) the loop parks at once: spinning there only burned CPU.
const loopSpin = 20 * time.Microsecond

// wait returns the ready events, waiting in Go's poller while there are
// none (after polling for loopSpin when spin is set).
func (l *eventLoop) wait(events []unix.EpollEvent, spin bool) (int, error) {
	var n uintptr
	var errno syscall.Errno
	var until time.Time
	err := l.rc.Read(func(fd uintptr) bool {
		for {
			// epoll_pwait, timeout 0: never blocks, so a raw call.
			n, _, errno = syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
			switch {
			case errno == syscall.EINTR:
				continue
			case errno != 0 || n > 0:
				return true
			case !spin:
				return false // park until the descriptor is readable
			}
			if now := time.Now(); until.IsZero() {
				until = now.Add(loopSpin)
			} else if now.After(until) {
				spin = false
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, errno
	}
	return int(n), nil
}

// stop makes the loop close its connections and end (Server.Close).
func (l *eventLoop) stop() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	var one = [8]byte{1}
	_, _ = unix.Write(l.wake, one[:])
}

// loopFor picks the loop of a new connection, or nil (goroutine mode).
func (s *Server) loopFor(c *conn) *eventLoop {
	if len(s.loops) == 0 || c.raw == nil {
		return nil
	}
	return s.loops[int(c.id)%len(s.loops)]
}

// register makes the loop serve c, whose read buffer is empty and whose
// replies are all written; false when the loop has stopped (or epoll
// refused the socket): c stays with its goroutine.
func (l *eventLoop) register(c *conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	var slot int32
	if n := len(l.free); n > 0 {
		slot = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		slot = int32(len(l.slots))
		l.slots = append(l.slots, nil)
	}
	c.slot = slot
	c.gen++
	c.raw.nowait = true
	c.w.vc = c.raw
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: slot, Pad: c.gen}
	var err error
	// Under Control: the descriptor cannot be closed (and its number
	// reused) during the call.
	cerr := c.raw.rc.Control(func(fd uintptr) {
		err = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if cerr != nil || err != nil {
		c.raw.nowait = false
		c.w.vc = c.nc
		l.free = append(l.free, slot)
		return false
	}
	l.slots[slot] = c
	return true
}

// unregister removes c from the loop (the loop's goroutine only).
func (l *eventLoop) unregister(c *conn) {
	l.mu.Lock()
	l.slots[c.slot] = nil
	l.free = append(l.free, c.slot)
	l.mu.Unlock()
	_ = c.raw.rc.Control(func(fd uintptr) {
		_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	})
}

// handoff gives c to a goroutine of its own, which first sends what the
// socket did not take, then runs args (a command already parsed, or nil)
// unless quit, and then serves c as in goroutine mode.
func (l *eventLoop) handoff(c *conn, args [][]byte, quit bool) {
	l.unregister(c)
	go l.s.serveConn(c, args, quit)
}

// drop closes c (the loop's goroutine only).
func (l *eventLoop) drop(c *conn) {
	l.unregister(c)
	c.raw.nowait = false
	c.raw.pending = nil
	l.s.finish(c)
}

func (l *eventLoop) run() {
	defer l.s.wg.Done()
	events := make([]unix.EpollEvent, 256)
	ready := make([]*conn, 0, len(events))
	ran := 0 // commands the last round ran itself
	for {
		n, err := l.wait(events, ran > 1)
		if err != nil {
			l.s.log.Error("resp: event loop: epoll_wait", "err", err)
			l.mu.Lock()
			l.closed = true
			l.mu.Unlock()
		}
		ready = ready[:0]
		l.mu.Lock()
		stop := l.closed
		for _, ev := range events[:max(n, 0)] {
			if ev.Fd >= 0 && int(ev.Fd) < len(l.slots) {
				if c := l.slots[ev.Fd]; c != nil && c.gen == ev.Pad {
					ready = append(ready, c)
				}
			}
		}
		l.mu.Unlock()
		if stop {
			l.shutdown()
			return
		}
		ran = 0
		for _, c := range ready {
			ran += l.serve(c)
		}
	}
}

// shutdown closes the connections the loop serves and the loop's
// descriptors.
func (l *eventLoop) shutdown() {
	l.mu.Lock()
	var cs []*conn
	for _, c := range l.slots {
		if c != nil {
			cs = append(cs, c)
		}
	}
	l.mu.Unlock()
	for _, c := range cs {
		l.drop(c)
	}
	l.ep.Close()
	unix.Close(l.wake)
}

// serve is one round for a ready connection: one read (as much as the
// read buffer takes), every whole command buffered, one write. It
// returns how many commands it ran.
func (l *eventLoop) serve(c *conn) (ran int) {
	s := l.s
	br := c.r.br
	_, rerr := br.Peek(br.Buffered() + 1) // one read, when the buffer has room
	if rerr == errWouldBlock || rerr == bufio.ErrBufferFull {
		rerr = nil
	}
	quit := false
cmds:
	for !quit && c.w.err == nil {
		n := br.Buffered()
		if n == 0 {
			break
		}
		b, _ := br.Peek(n)
		switch scan(b, c.r.maxBulk) {
		case scanPartial:
			if n < br.Size() {
				break cmds // the rest arrives later
			}
			l.handoff(c, nil, false) // a command longer than the buffer
			return ran
		case scanBig:
			l.handoff(c, nil, false)
			return ran
		}
		args, err := c.r.next()
		if err != nil {
			// Only a malformed request: a whole one never reads the socket.
			var pe *errProtocol
			if errors.As(err, &pe) {
				c.w.error("ERR " + pe.Error())
			}
			quit = true
			break cmds
		}
		if len(args) == 0 {
			continue
		}
		if cmd := c.lookup(args[0]); cmd != nil && !cmd.inline {
			l.handoff(c, args, false)
			return ran
		}
		c.yield = false
		quit = c.exec(args)
		if c.yield {
			// The command could wait (a SET that replaces a value): its
			// goroutine runs it again from the start.
			c.yield = false
			l.handoff(c, args, false)
			return ran
		}
		s.commands.Add(1)
		s.loopRuns.Add(1)
		ran++
		if len(c.raw.pending) > 0 {
			break cmds // the client does not read: its goroutine waits for it
		}
	}
	if err := c.w.flush(); err != nil {
		l.drop(c)
		return ran
	}
	switch {
	case len(c.raw.pending) > 0:
		l.handoff(c, nil, quit)
	case quit || rerr != nil:
		l.drop(c)
	}
	return ran
}
