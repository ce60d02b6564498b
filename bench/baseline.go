package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/bench/hdr"
)

// Baseline names accepted by RunBaseline.
const (
	BaselineTCP        = "tcp"
	BaselineTCPProcess = "tcp-process" // the receiver in another process
	// BaselineTCPProcessCold is tcp-process sending from a working set of
	// DefaultKeyBudgetBytes (at least 4 messages), message after message,
	// so the bytes come from DRAM rather than the CPU's cache, as an
	// appliance's get reads objects nobody touched lately. tcp-process
	// sends one buffer per connection, hot in the cache.
	BaselineTCPProcessCold = "tcp-process-cold"
	// BaselineTCPProcessStore is tcp-process-cold whose receiving process
	// also lands each message at the next place of a working set as large
	// (pre-faulted), instead of in one reused buffer, as an appliance
	// writes every put into DRAM nobody touched lately. It is raw TCP doing
	// the memory traffic a store's put cannot avoid (read the value from
	// DRAM, land it in DRAM), and nothing else: no protocol, no checksum.
	BaselineTCPProcessStore = "tcp-process-store"
	BaselineMemcpy          = "memcpy"
)

// NeedsSink reports whether baseline name runs its receiver in another
// process (Options.SinkCommand): tcp-process, tcp-process-cold and
// tcp-process-store.
func NeedsSink(name string) bool {
	return name == BaselineTCPProcess || name == BaselineTCPProcessCold || name == BaselineTCPProcessStore
}

// SinkLandsEnv, set to "1" in a sink process's environment (StartSink for
// tcp-process-store), makes RunSink land messages in a working set.
const SinkLandsEnv = "KVTIER_BENCH_SINK_LANDS"

// RawTCP measures a plain Go sender and receiver on loopback moving the same
// bytes kvtier moves: each of conns connections sends size-byte messages and
// waits for a 1-byte acknowledgement after each (one request/response per
// op, like a put). The receiver (ServeSink) is a goroutine set of this
// process that reads into one reused buffer per connection. It runs for
// duration.
func RawTCP(ctx context.Context, size, conns int, duration time.Duration) (Result, error) {
	if size <= 0 || conns <= 0 || duration <= 0 {
		return Result{}, fmt.Errorf("bench: RawTCP needs size, conns and duration > 0")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, fmt.Errorf("bench: listen: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { defer close(served); _ = ServeSink(ctx, ln, size) }()
	defer func() { cancel(); <-served }()
	r, err := SendTCP(ctx, ln.Addr().String(), size, conns, duration)
	r.System = BaselineTCP
	return r, err
}

// ServeSink is RawTCP's receiver: on every connection accepted from ln it
// reads size-byte messages and acknowledges each with one byte, until the
// peer closes. It returns when ln is closed or ctx ends (which closes ln and
// every connection), once its connections' goroutines are done.
func ServeSink(ctx context.Context, ln net.Listener, size int) error {
	return serveSink(ctx, ln, size, nil)
}

// serveSink is ServeSink landing message after message in land (whole
// messages of size bytes, shared by the connections) when it is set. With
// more connections than places two may land in one place at once: the
// bytes are thrown away, and the memory traffic is the same.
func serveSink(ctx context.Context, ln net.Listener, size int, land []byte) error {
	if size <= 0 {
		ln.Close()
		return fmt.Errorf("bench: sink message size %d", size)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  = map[net.Conn]struct{}{}
		done   bool
		landed atomic.Uint64 // messages begun in land
	)
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		mu.Lock()
		done = true
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	defer stop()
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("bench: sink: %w", err)
		}
		mu.Lock()
		if done {
			mu.Unlock()
			c.Close()
			continue
		}
		conns[c] = struct{}{}
		mu.Unlock()
		wg.Go(func() {
			defer func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				c.Close()
			}()
			var buf []byte
			if land == nil {
				buf = make([]byte, min(size, 4<<20))
			}
			ack := []byte{1}
			for {
				if land != nil {
					k := landed.Add(1) - 1
					off := k % uint64(len(land)/size) * uint64(size)
					if _, err := io.ReadFull(c, land[off:off+uint64(size)]); err != nil {
						return
					}
				} else {
					for left := size; left > 0; {
						n, err := c.Read(buf[:min(left, len(buf))])
						if err != nil {
							return
						}
						left -= n
					}
				}
				if _, err := c.Write(ack); err != nil {
					return
				}
			}
		})
	}
}

// SendTCP is RawTCP's sender against a ServeSink at addr (in this process
// or another one): conns connections each send size-byte messages, waiting
// for the one-byte acknowledgement of each, for duration. The result has
// no System; the caller names it.
func SendTCP(ctx context.Context, addr string, size, conns int, duration time.Duration) (Result, error) {
	return sendTCP(ctx, addr, size, conns, duration, nil)
}

// sendTCP is SendTCP sending from the working set cold when it is set.
func sendTCP(ctx context.Context, addr string, size, conns int, duration time.Duration, cold []byte) (Result, error) {
	if size <= 0 || conns <= 0 || duration <= 0 {
		return Result{}, fmt.Errorf("bench: SendTCP needs size, conns and duration > 0")
	}
	s, err := dialSenders(ctx, addr, size, conns, cold)
	if err != nil {
		return Result{}, err
	}
	defer s.close()
	var h hdr.Histogram
	ops, failed, elapsed, err := s.run(ctx, duration, &h)
	if err != nil {
		return Result{}, err
	}
	r := Result{Op: "send", Size: size, Concurrency: conns, Batch: 1, Ops: ops, Errors: failed}
	r.finish(elapsed, &h)
	return r, nil
}

// tcpSenders are SendTCP's connections, kept open across the rounds of a
// workload measured beside kvtier (besideSession), as kvtier keeps its own.
type tcpSenders struct {
	conns []net.Conn
	msgs  [][]byte // one message buffer per connection, pre-faulted
	hists []hdr.Histogram
	// cold, when set, is the working set messages are sent from in turn
	// (next: the message number), instead of msgs.
	cold []byte
	next atomic.Uint64
	size int
}

func dialSenders(ctx context.Context, addr string, size, conns int, cold []byte) (*tcpSenders, error) {
	s := &tcpSenders{hists: make([]hdr.Histogram, conns), cold: cold, size: size}
	var d net.Dialer
	for i := 0; i < conns; i++ {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("bench: dial: %w", err)
		}
		var msg []byte
		if cold == nil {
			msg = make([]byte, size)
			for j := 0; j < len(msg); j += 4096 {
				msg[j] = 1
			}
		}
		s.conns, s.msgs = append(s.conns, c), append(s.msgs, msg)
	}
	return s, nil
}

func (s *tcpSenders) close() {
	for _, c := range s.conns {
		c.Close()
	}
}

// run sends on every connection for duration (each completes at least one
// message) and merges the calls' latencies into h. A connection that fails
// stops (counted in failed); run fails only when no message at all was
// acknowledged.
func (s *tcpSenders) run(ctx context.Context, duration time.Duration, h *hdr.Histogram) (ops, failed int64, elapsed time.Duration, err error) {
	var stop atomic.Bool
	counts := make([]int64, len(s.conns))
	errs := make([]error, len(s.conns))
	for i := range s.hists {
		s.hists[i] = hdr.Histogram{}
	}
	var wg sync.WaitGroup
	start := time.Now()
	timer := time.AfterFunc(duration, func() { stop.Store(true) })
	defer timer.Stop()
	stopOnCancel := context.AfterFunc(ctx, func() {
		for _, c := range s.conns {
			c.SetDeadline(time.Now())
		}
	})
	defer stopOnCancel()
	for i, c := range s.conns {
		wg.Go(func() {
			msg, ack := s.msgs[i], make([]byte, 1)
			size := uint64(s.size)
			for first := true; first || !stop.Load(); first = false {
				if s.cold != nil {
					k := s.next.Add(1) - 1
					off := k % (uint64(len(s.cold)) / size) * size
					msg = s.cold[off : off+size]
				}
				t0 := time.Now()
				if _, err := c.Write(msg); err != nil {
					errs[i] = err
					return
				}
				if _, err := io.ReadFull(c, ack); err != nil {
					errs[i] = err
					return
				}
				s.hists[i].Record(time.Since(t0).Nanoseconds())
				counts[i]++
			}
		})
	}
	wg.Wait()
	elapsed = time.Since(start)
	if err := ctx.Err(); err != nil {
		return 0, 0, 0, err
	}
	for i := range s.hists {
		h.Merge(&s.hists[i])
		ops += counts[i]
		if errs[i] != nil {
			failed++
		}
	}
	if err := errors.Join(errs...); err != nil && ops == 0 {
		return 0, 0, 0, fmt.Errorf("bench: raw TCP: %w", err)
	}
	return ops, failed, elapsed, nil
}

// RawTCPProcess is RawTCP with the receiver in another process, as kvtier's
// client and appliance are: sink starts that process (see StartSink) for
// size-byte messages. Two processes pay the cross-CPU wake-ups that one
// process's goroutines mostly avoid, so this is the limit for bytes that
// cross from one program to another over loopback.
func RawTCPProcess(ctx context.Context, sink []string, size, conns int, duration time.Duration) (Result, error) {
	return rawTCPProcess(ctx, sink, size, conns, duration, BaselineTCPProcess)
}

// rawTCPProcess measures name: tcp-process, tcp-process-cold or
// tcp-process-store.
func rawTCPProcess(ctx context.Context, sink []string, size, conns int, duration time.Duration, name string) (Result, error) {
	if size <= 0 || conns <= 0 || duration <= 0 {
		return Result{}, fmt.Errorf("bench: raw TCP needs size, conns and duration > 0")
	}
	var set []byte
	if name != BaselineTCPProcess {
		set = coldWorkingSet(size)
	}
	addr, stopSink, err := startSink(ctx, sink, size, name == BaselineTCPProcessStore)
	if err != nil {
		return Result{}, err
	}
	r, err := sendTCP(ctx, addr, size, conns, duration, set)
	r.System = name
	return r, errors.Join(err, stopSink())
}

// coldWorkingSet returns a pre-faulted buffer of at least 4 messages of
// size bytes and of DefaultKeyBudgetBytes or more: the bytes a get
// workload pre-loads, far larger than the CPU's caches. One buffer serves
// the process's cold senders (read only), grown when a size needs more.
func coldWorkingSet(size int) []byte {
	need := max(DefaultKeyBudgetBytes/size, 4) * size
	coldMu.Lock()
	defer coldMu.Unlock()
	if len(coldSet) < need {
		coldSet = make([]byte, need)
		for i := 0; i < need; i += 4096 {
			coldSet[i] = 1
		}
	}
	return coldSet[:need/size*size]
}

var (
	coldMu  sync.Mutex
	coldSet []byte // guarded by coldMu
)

// RunSink is the sink process's side of StartSink: it listens on a free
// loopback port, prints SinkBanner and the address on out, and serves
// ServeSink for size-byte messages until in reaches its end (the parent
// closed it or died) or ctx ends. Started for tcp-process-store (its
// environment says so), it lands the messages in a working set instead.
func RunSink(ctx context.Context, size int, in io.Reader, out io.Writer) error {
	return RunSinkOn(ctx, DefaultSinkListen, size, os.Getenv(SinkLandsEnv) == "1", in, out)
}

// DefaultSinkListen is where a sink process listens unless told otherwise:
// a free loopback port, for a sender on the same host.
const DefaultSinkListen = "127.0.0.1:0"

// RunSinkOn is RunSink listening on listen (host:port, port 0 picks a
// free one), landing messages in a working set when lands is set (its
// banner then ends in SinkLands, so the sender can tell). A sink on
// another host (started there by a sink command, Options.SinkCommand)
// listens on an address the sender reaches, so the baseline crosses the
// same network as kvtier's transfers; the host must be given, since the
// banner names the address the sender dials.
func RunSinkOn(ctx context.Context, listen string, size int, lands bool, in io.Reader, out io.Writer) error {
	if size <= 0 {
		return fmt.Errorf("bench: sink message size %d: want > 0", size)
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("bench: sink address %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return fmt.Errorf("bench: sink address %q: give the host the sender dials (its banner names it), not a wildcard", listen)
	}
	// The working set is faulted in before the banner: the sender starts
	// timing once it reads the address, and first touching 256 MiB takes
	// most of a second, which would slow the baseline's first turn.
	var land []byte
	var mark string
	if lands {
		land, mark = coldWorkingSet(size), SinkLands
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("bench: sink: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, in)
		cancel()
	}()
	if _, err := fmt.Fprintf(out, "%s%s%s\n", SinkBanner, ln.Addr(), mark); err != nil {
		ln.Close()
		return err
	}
	return serveSink(ctx, ln, size, land)
}

// SelfSink is the SinkCommand of a program whose `bench --tcp-sink SIZE`
// runs RunSink: this executable (kvtier, or the fake CLI of the script test).
func SelfSink() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: tcp-process sink: %w", err)
	}
	return []string{exe, "bench", "--tcp-sink"}, nil
}

// SinkBanner starts the line a sink process prints once it listens:
// "sink 127.0.0.1:PORT", followed by SinkLands when it lands messages in
// a working set (tcp-process-store).
const SinkBanner = "sink "

// SinkLands ends the banner of a sink that lands its messages.
const SinkLands = " lands"

// StartSink runs argv with the message size appended as its last argument;
// the command must print SinkBanner and its address on its first line of
// standard output, serve ServeSink there, and exit when its standard input
// closes (kvtier bench --tcp-sink SIZE does). stop closes that input and
// waits for the process (killing it after 5 s).
func StartSink(ctx context.Context, argv []string, size int) (addr string, stop func() error, err error) {
	return startSink(ctx, argv, size, false)
}

// startSink is StartSink, for a sink that lands its messages in a working
// set when lands is set (tcp-process-store).
func startSink(ctx context.Context, argv []string, size int, lands bool) (addr string, stop func() error, err error) {
	if len(argv) == 0 {
		return "", nil, errors.New("bench: no sink command for the tcp-process baseline")
	}
	cmd := exec.Command(argv[0], append(argv[1:len(argv):len(argv)], strconv.Itoa(size))...)
	if lands {
		cmd.Env = append(os.Environ(), SinkLandsEnv+"=1")
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("bench: start sink %s: %w", argv[0], err)
	}
	exited := make(chan error, 1)
	stop = func() error {
		stdin.Close()
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				return fmt.Errorf("bench: sink process: %w", err)
			}
			return nil
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("bench: sink process did not exit when its input closed; killed")
		}
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		a, ok := strings.CutPrefix(strings.TrimSpace(l), SinkBanner)
		a, landing := strings.CutSuffix(a, SinkLands)
		switch {
		case !ok || a == "":
			err = fmt.Errorf("bench: sink printed %q, want %q and an address", l, SinkBanner)
		case lands && !landing:
			// A sink command on another host does not see this
			// process's environment: it must ask for landing itself.
			err = fmt.Errorf("bench: the sink %s does not land its messages, as tcp-process-store needs: add --tcp-sink-lands to the sink command", argv[0])
		case !lands && landing:
			err = fmt.Errorf("bench: the sink %s lands its messages (tcp-process-store), not this baseline's: drop --tcp-sink-lands from the sink command", argv[0])
		default:
			return a, stop, nil
		}
	case <-time.After(10 * time.Second):
		err = errors.New("bench: sink printed no address within 10 s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	return "", nil, errors.Join(err, stop())
}

// Memcpy measures copy() of size bytes between two pre-faulted buffers on one
// goroutine for duration.
func Memcpy(size int, duration time.Duration) Result {
	src, dst := make([]byte, size), make([]byte, size)
	for i := 0; i < size; i += 4096 {
		src[i], dst[i] = 1, 1
	}
	var h hdr.Histogram
	r := Result{System: BaselineMemcpy, Op: "copy", Size: size, Concurrency: 1, Batch: 1}
	start := time.Now()
	deadline := start.Add(duration)
	for {
		t0 := time.Now()
		if !t0.Before(deadline) {
			break
		}
		copy(dst, src)
		h.Record(time.Since(t0).Nanoseconds())
		r.Ops++
	}
	r.finish(time.Since(start), &h)
	return r
}

// RunBaseline measures baseline name (tcp, tcp-process, tcp-process-cold,
// tcp-process-store or memcpy) at every
// size of o (and, for the TCP ones, every concurrency), each for
// o.Duration. tcp-process starts o.SinkCommand (see StartSink) once per
// size and concurrency.
func RunBaseline(ctx context.Context, name string, o Options) ([]Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	var out []Result
	for _, size := range o.Sizes {
		switch name {
		case BaselineMemcpy:
			if err := ctx.Err(); err != nil {
				return out, err
			}
			out = append(out, Memcpy(size, o.Duration))
		case BaselineTCP, BaselineTCPProcess, BaselineTCPProcessCold, BaselineTCPProcessStore:
			for _, c := range o.Concurrency {
				var r Result
				var err error
				if name == BaselineTCP {
					r, err = RawTCP(ctx, size, c, o.Duration)
				} else {
					r, err = rawTCPProcess(ctx, o.SinkCommand, size, c, o.Duration, name)
				}
				if err != nil {
					return out, err
				}
				out = append(out, r)
			}
		default:
			return nil, fmt.Errorf("bench: unknown baseline %q (want tcp, tcp-process, tcp-process-cold, tcp-process-store or memcpy)", name)
		}
	}
	return out, nil
}
