package target_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kvtier/kvtier/nof/initiator"
	"github.com/kvtier/kvtier/nof/pdu"
	"github.com/kvtier/kvtier/nof/target"
)

// emfileListener is a fault injector: while failing is set, Accept returns
// the error Go's listener returns when the process is out of file
// descriptors (accept4: EMFILE), without taking the pending connection.
type emfileListener struct {
	net.Listener
	failing atomic.Bool
	fails   atomic.Int64
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.failing.Load() {
		l.fails.Add(1)
		time.Sleep(time.Millisecond) // the kernel's accept would not spin either
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestAcceptSurvivesEMFILE: a listener whose Accept fails with EMFILE for a
// while keeps the Serve loop alive (backing off), is reported by Health
// meanwhile, and serves again once descriptors are back.
func TestAcceptSurvivesEMFILE(t *testing.T) {
	tg, _ := newTarget(t, target.Config{AcceptBackoffMax: 20 * time.Millisecond}, target.Subsystem{})
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &emfileListener{Listener: raw}
	ln.failing.Store(true)
	served := make(chan error, 1)
	go func() { served <- tg.Serve(context.Background(), ln) }()
	waitFor(t, func() bool { return ln.fails.Load() >= 5 }, "Accept to be retried")
	select {
	case err := <-served:
		t.Fatalf("Serve returned on EMFILE: %v", err)
	default:
	}
	if err := tg.Health(); err == nil || !strings.Contains(err.Error(), "too many open files") || !strings.Contains(err.Error(), raw.Addr().String()) {
		t.Fatalf("Health while Accept fails: %v", err)
	}
	// A host connecting now waits in the backlog, and is served once the
	// descriptors are back.
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := initiator.Dial(ctx, raw.Addr().String(), initiator.Config{SubNQN: subNQN, HostNQN: hostNQN})
		if err == nil {
			err = c.ReadAt(ctx, 1, make([]byte, 512), 0)
			c.Close()
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	ln.failing.Store(false)
	if err := <-done; err != nil {
		t.Fatalf("host after the EMFILE spell: %v", err)
	}
	if err := tg.Health(); err != nil {
		t.Fatalf("Health after recovery: %v", err)
	}
	// A listener that fails for good makes Health report it.
	bad := &brokenListener{Listener: raw}
	if err := tg.Serve(context.Background(), bad); err == nil {
		t.Fatal("Serve on a broken listener returned nil")
	}
	if err := tg.Health(); err == nil || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("Health after a listener stopped: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("first Serve: %v", err) // closed by the broken listener's Close
	}
}

// brokenListener fails Accept with a permanent error.
type brokenListener struct{ net.Listener }

func (brokenListener) Accept() (net.Conn, error) { return nil, errors.New("listener broken for good") }

// TestAcceptSurvivesRealEMFILE lowers this process's descriptor limit
// until accept4 really fails with EMFILE, then raises it again: the target
// keeps accepting afterwards.
func TestAcceptSurvivesRealEMFILE(t *testing.T) {
	tg, addr := newTarget(t, target.Config{AcceptBackoffMax: 20 * time.Millisecond}, target.Subsystem{})
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// Fill the table (up to a lowered limit) with /dev/null, keep one slot
	// for the host's socket, so that the target's accept4 has none.
	low := lim
	low.Cur = 1024
	if lim.Cur < low.Cur {
		low.Cur = lim.Cur
	}
	var fill []*os.File
	restore := func() {
		for _, f := range fill {
			f.Close()
		}
		fill = nil
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	defer restore()
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Skipf("cannot lower RLIMIT_NOFILE: %v", err)
	}
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("filling the descriptor table: %v", err)
			}
			break
		}
		fill = append(fill, f)
	}
	fill[len(fill)-1].Close()
	fill = fill[:len(fill)-1]
	nc, err := net.Dial("tcp", addr) // takes the last descriptor
	if err != nil {
		restore()
		t.Fatalf("dial with one descriptor left: %v", err)
	}
	defer nc.Close()
	deadline := time.Now().Add(5 * time.Second)
	for tg.Health() == nil && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	herr := tg.Health()
	restore()
	if herr == nil || !strings.Contains(herr.Error(), "too many open files") {
		t.Fatalf("Health with no descriptor left: %v", herr)
	}
	// The pending connection is accepted now and served.
	w := pdu.NewWriter(nc)
	if err := w.Send(&pdu.ICReq{}); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := pdu.NewReader(nc, pdu.ReaderConfig{Side: pdu.HostSide})
	if f, err := r.Next(); err != nil || f.Type != pdu.TypeICResp {
		t.Fatalf("ICResp after the descriptors came back: %v", err)
	}
	c := dial(t, addr, initiator.Config{})
	if err := c.ReadAt(context.Background(), 1, make([]byte, 512), 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return tg.Health() == nil }, "Health to clear")
}

// expectClosedWithin reads from nc until the target closes it and checks
// that it did so after at least min and well before the test's deadline.
func expectClosedWithin(t *testing.T, nc net.Conn, start time.Time, min, max time.Duration, what string) {
	t.Helper()
	nc.SetReadDeadline(start.Add(max))
	_, err := io.Copy(io.Discard, nc)
	el := time.Since(start)
	if err != nil {
		t.Fatalf("%s: connection not closed by the target within %v: %v", what, max, err)
	}
	if el < min {
		t.Fatalf("%s: closed after %v, before the %v bound", what, el, min)
	}
}

// TestHeaderAndConnectDeadlines: a connection that sends nothing, one
// that stops halfway through a PDU header, and one that never sends
// Connect are all cut off after HeaderTimeout.
func TestHeaderAndConnectDeadlines(t *testing.T) {
	const hto = 300 * time.Millisecond
	_, addr := newTarget(t, target.Config{HeaderTimeout: hto}, target.Subsystem{})

	silent := dialTCP(t, addr)
	expectClosedWithin(t, silent, time.Now(), hto/2, 5*time.Second, "no ICReq")

	half := dialTCP(t, addr)
	icreq := (&pdu.ICReq{}).AppendPDU(nil, pdu.Options{})
	start := time.Now()
	if _, err := half.Write(icreq[:40]); err != nil {
		t.Fatal(err)
	}
	expectClosedWithin(t, half, start, hto/2, 5*time.Second, "half an ICReq")

	h := dialRaw(t, addr, false, false) // ICReq answered, then nothing
	start = time.Now()
	expectClosedWithin(t, h.nc, start, hto/2, 5*time.Second, "no Connect")

	// After Connect, half a CapsuleCmd header.
	h2 := dialRaw(t, addr, false, false)
	if cpl := h2.connect(0, 0xFFFF, subNQN, hostNQN, 30000); !cpl.OK() {
		t.Fatalf("connect: %#x", cpl.Status)
	}
	cmd := identifyCmd(1, 0).AppendPDU(nil, pdu.Options{})
	start = time.Now()
	h2.sendRaw(cmd[:20])
	expectClosedWithin(t, h2.nc, start, hto/2, 5*time.Second, "half a CapsuleCmd header")
}

// TestIdleDeadlineKeepAliveAware: with IdleTimeout set, a controller with
// a keep-alive timer keeps idle admin and I/O queues past it (the host's
// Keep Alive and the keep-alive timer decide), while the queue of a
// controller with KATO 0 is closed once idle for IdleTimeout.
func TestIdleDeadlineKeepAliveAware(t *testing.T) {
	const idle = 300 * time.Millisecond
	_, addr := newTarget(t, target.Config{IdleTimeout: idle, HeaderTimeout: 5 * time.Second}, target.Subsystem{})
	c := dial(t, addr, initiator.Config{KeepAlive: 2 * time.Second}) // keep-alives every 1 s
	ka0 := dialRaw(t, addr, false, false)
	if cpl := ka0.connect(0, 0xFFFF, subNQN, hostNQN, 0); !cpl.OK() {
		t.Fatalf("connect: %#x", cpl.Status)
	}
	start := time.Now()
	expectClosedWithin(t, ka0.nc, start, idle/2, 5*time.Second, "idle queue of a KATO 0 controller")
	time.Sleep(3*idle - time.Since(start))
	if err := c.ReadAt(context.Background(), 1, make([]byte, 512), 0); err != nil {
		t.Fatalf("controller with keep-alive after %v idle: %v", 3*idle, err)
	}
}
