package transfer

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kvtier/kvtier/kverr"
)

// The test binary doubles as a server process: with helperEnv set it serves
// one segment (pattern-filled) over the transfer engine and a raw TCP
// baseline server, prints "<engine addr> <raw addr>" and exits when stdin
// closes.
const helperEnv = "KVTIER_TRANSFER_HELPER"

const helperSegment = "helper-seg"

func TestMain(m *testing.M) {
	if v := os.Getenv(helperEnv); v != "" {
		os.Exit(runHelper(v))
	}
	os.Exit(m.Run())
}

// pattern is the deterministic content of test segments.
func pattern(off uint64) byte { return byte(off*131 + off>>9) }

func fillPattern(b []byte, base uint64) {
	for i := range b {
		b[i] = pattern(base + uint64(i))
	}
}

func runHelper(spec string) int {
	if addr, ok := strings.CutPrefix(spec, "shmclient:"); ok {
		return runShmClient(addr)
	}
	spec, shared := strings.CutPrefix(spec, "shm:")
	size, err := strconv.ParseUint(spec, 10, 64)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper: bad size:", err)
		return 2
	}
	e, err := New(Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer e.Close()
	var mem []byte
	if shared {
		f, m, err := sharedMemory(int(size))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		if err := e.ShareMemory(m, f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		mem = m
	} else {
		mem = make([]byte, size)
	}
	fillPattern(mem, 0)
	if err := e.RegisterSegment(helperSegment, mem); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	addr, err := e.Listen("127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer raw.Close()
	go serveRaw(raw, mem)
	fmt.Printf("%s %s\n", addr, raw.Addr())
	io.Copy(io.Discard, os.Stdin) // until the parent closes our stdin
	return 0
}

// serveRaw is the plain-Go TCP baseline: a 9-byte command {op, u64 n}; 'R'
// makes the server write n bytes of mem, 'W' makes it read n bytes into mem
// and answer one byte.
func serveRaw(l net.Listener, mem []byte) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var cmd [9]byte
			for {
				if _, err := io.ReadFull(c, cmd[:]); err != nil {
					return
				}
				n := binary.BigEndian.Uint64(cmd[1:])
				if n > uint64(len(mem)) {
					return
				}
				switch cmd[0] {
				case 'R':
					if _, err := c.Write(mem[:n]); err != nil {
						return
					}
				case 'W':
					if _, err := io.ReadFull(c, mem[:n]); err != nil {
						return
					}
					if _, err := c.Write(cmd[:1]); err != nil {
						return
					}
				default:
					return
				}
			}
		}()
	}
}

// helperProc is a running server process.
type helperProc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	addr    string
	rawAddr string
	once    sync.Once
}

// startHelper re-executes the test binary as a server of a size-byte segment.
func startHelper(tb testing.TB, size uint64) *helperProc {
	tb.Helper()
	return startHelperSpec(tb, strconv.FormatUint(size, 10))
}

// startHelperSpec starts the helper with spec ("<size>" or "shm:<size>").
func startHelperSpec(tb testing.TB, spec string) *helperProc {
	tb.Helper()
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+spec)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	h := &helperProc{cmd: cmd, stdin: stdin}
	tb.Cleanup(h.stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("helper did not start: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		tb.Fatalf("helper said %q", line)
	}
	h.addr, h.rawAddr = f[0], f[1]
	return h
}

func (h *helperProc) stop() {
	h.once.Do(func() {
		h.stdin.Close()
		h.cmd.Wait()
	})
}

// kill ends the helper abruptly.
func (h *helperProc) kill() {
	h.once.Do(func() {
		h.cmd.Process.Kill()
		h.stdin.Close()
		h.cmd.Wait()
	})
}

func newEngine(tb testing.TB, cfg Config) *Engine {
	tb.Helper()
	e, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

// serverEngine returns a listening engine with one segment of size bytes.
func serverEngine(tb testing.TB, name string, size int) (*Engine, []byte, string) {
	tb.Helper()
	e := newEngine(tb, Config{})
	mem := make([]byte, size)
	fillPattern(mem, 0)
	if err := e.RegisterSegment(name, mem); err != nil {
		tb.Fatal(err)
	}
	addr, err := e.Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return e, mem, addr.String()
}

func do1(tb testing.TB, e *Engine, r Request) error {
	tb.Helper()
	errs := e.Do(context.Background(), []Request{r})
	if len(errs) != 1 {
		tb.Fatalf("%d errors for one request", len(errs))
	}
	return errs[0]
}

func wantCode(tb testing.TB, err error, code kverr.Code, substr string) {
	tb.Helper()
	if kverr.CodeOf(err) != code {
		tb.Fatalf("got %v, want code %v", err, code)
	}
	if substr != "" && !strings.Contains(err.Error(), substr) {
		tb.Fatalf("error %q does not mention %q", err, substr)
	}
}

// serveInput feeds in to a serving connection of e over a pipe, drains
// the answers, and returns once the connection's goroutine has ended. The
// fuzz targets check and reset segment memory between inputs: a server
// goroutine of the previous input still copying into the segment raced
// with that (FuzzServe under -race in CI, 2026-12-03: a batch WRITE's
// readScatter against the next input's batch READ).
func serveInput(e *Engine, in []byte) {
	a, b := net.Pipe()
	done := make(chan struct{})
	e.wg.Add(1)
	go func() {
		defer close(done)
		e.serveConn(a)
	}()
	go func() { b.Write(in); b.Close() }()
	io.Copy(io.Discard, b)
	<-done
}
