package target

import (
	"os"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// turnYields is how many times an answering worker lets the netpoller run
// before it hands the answer turn on, so that the host's reaction to the
// answer gets back to the device first: the host takes the answer in and
// sends its next command (1), our reader reads that and starts the device
// transfer or sends the R2T (2). (For R2T writes, 3 or 4 to also cover the
// H2CData measured the same as 2.)
const turnYields = 2

// turnMinTransfer is the smallest transfer whose answer waits for its turn.
const turnMinTransfer = 64 << 10

// answerTurn makes the workers of one connection that answer commands of a
// device-backed namespace (a namespace.Starter) take turns: one sends at a
// time and, if other commands are still in flight on the connection, lets
// the Go netpoller run before the next one sends.
//
// Why: a device that completes a whole queue's worth of transfers at once
// (the virtual disks this runs on do, for fio as well) readies every
// worker together, and Go's scheduler runs runnable goroutines before it
// polls the network again. Without turns, all answers (eight 128 KiB C2H
// sends at QD 8) went out before the reader saw the host's next command,
// so the device stayed idle for the whole batch's network time and disk
// and network never overlapped. With turns, the host's next command is read
// and handed to the device right after the first answer.
type answerTurn struct {
	tok chan struct{} // holds a token while a worker has the turn

	once sync.Once
	y    *pollYield // nil: eventfd unavailable, turns without yielding
}

func newAnswerTurn() *answerTurn { return &answerTurn{tok: make(chan struct{}, 1)} }

// do runs send in turn; yield says whether to let the netpoller run
// (turnYields times) before handing the turn on: when other commands are in
// flight.
func (t *answerTurn) do(send func(), yield func() bool) {
	t.tok <- struct{}{}
	defer func() { <-t.tok }()
	send()
	if !yield() {
		return
	}
	t.once.Do(func() { t.y = newPollYield() })
	for i := 0; i < turnYields; i++ {
		t.y.yield()
	}
}

// close releases the eventfd; no do may be running.
func (t *answerTurn) close() {
	if t.y != nil {
		t.y.f.Close()
	}
}

// pollYield parks the calling goroutine until the Go netpoller has polled
// once more and the goroutines that poll readied have run: it signals its
// own eventfd, waits for it through the poller, then yields the P, so every
// goroutine that is runnable, and every one whose socket became readable
// before the signal, runs first.
type pollYield struct {
	f  *os.File
	rc syscall.RawConn
}

func newPollYield() *pollYield {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), "answer-turn-eventfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil
	}
	return &pollYield{f: f, rc: rc}
}

func (y *pollYield) yield() {
	if y == nil {
		return
	}
	signalled := false
	// Signal inside the callback (after RawConn.Read reset the poller's
	// readiness), so the event cannot be lost; the first call then asks to
	// wait, the second drains the counter.
	y.rc.Read(func(fd uintptr) bool {
		if !signalled {
			signalled = true
			one := [8]byte{1}
			_, err := unix.Write(int(fd), one[:])
			return err != nil // cannot signal: do not wait
		}
		var cnt [8]byte
		_, err := unix.Read(int(fd), cnt[:])
		return err != unix.EAGAIN
	})
	// The poll hands the goroutines it readied to this P with the last
	// one (this goroutine: its event came last) first; step behind them.
	runtime.Gosched()
}
