package tests

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
)

// kvtierBin is the kvtier binary built once for the whole package.
var kvtierBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kvtier-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kvtierBin = filepath.Join(dir, "kvtier")
	build := exec.Command("go", "build", "-o", kvtierBin, "github.com/kvtier/kvtier/cmd/kvtier")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building kvtier:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one kvtier server process.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	addrs  map[string]string // from its "listening k=v ..." line
	logMu  sync.Mutex
	log    strings.Builder
	exited chan struct{}
}

var listenLine = regexp.MustCompile(`^listening (.*)$`)

// start runs `kvtier args...` and waits for its "listening" line.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p, ready := launch(t, name, args...)
	select {
	case <-ready:
	case <-p.exited:
		t.Fatalf("%s exited before listening:\n%s", name, p.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not report its addresses within 60s:\n%s", name, p.output())
	}
	return p
}

// launch runs `kvtier args...`; ready is closed at its "listening" line
// (p.addrs is filled then).
func launch(t *testing.T, name string, args ...string) (*proc, <-chan struct{}) {
	t.Helper()
	p := &proc{t: t, name: name, addrs: map[string]string{}, exited: make(chan struct{})}
	p.cmd = exec.Command(kvtierBin, args...)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go p.collect(stderr)
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			p.append(line)
			if m := listenLine.FindStringSubmatch(line); m != nil {
				for _, kv := range strings.Fields(m[1]) {
					if k, v, ok := strings.Cut(kv, "="); ok {
						p.addrs[k] = v
					}
				}
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.kill() })
	return p, ready
}

func (p *proc) collect(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		p.append(sc.Text())
	}
}

func (p *proc) append(line string) {
	p.logMu.Lock()
	p.log.WriteString(line + "\n")
	p.logMu.Unlock()
}

func (p *proc) output() string {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	return p.log.String()
}

func (p *proc) kill() {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30s of SIGTERM:\n%s", p.name, p.output())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("%s exited with %d after SIGTERM:\n%s", p.name, code, p.output())
	}
}

// cluster is a master plus appliances, each its own process.
type cluster struct {
	t      *testing.T
	master *proc
	grpc   string
	http   string
}

// fastMasterArgs shorten every timeout so fault tests run in seconds.
var fastMasterArgs = []string{"--lease-ttl", "1s", "--client-ttl", "1500ms", "--client-grace", "1500ms",
	"--put-discard-timeout", "1s", "--put-release-timeout", "2s"}

func startCluster(t *testing.T, extra ...string) *cluster {
	args := append([]string{"master", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, fastMasterArgs...)
	args = append(args, extra...)
	m := start(t, "master", args...)
	return &cluster{t: t, master: m, grpc: m.addrs["grpc"], http: m.addrs["http"]}
}

func (c *cluster) appliance(name string, extra ...string) *proc {
	args := append([]string{"appliance", "--master", c.grpc, "--name", name, "--dram", "128MiB",
		"--hugepages", "auto", "--data-addr", "127.0.0.1:0", "--ssd-dir", ""}, extra...)
	return start(c.t, name, args...)
}

// client connects an in-process SDK client (a pure caller) to the cluster.
func (c *cluster) client(t *testing.T) *client.Client {
	t.Helper()
	return c.clientWith(t, client.Config{})
}

// clientWith is client with cfg (MasterAddr and a 200 ms heartbeat filled in).
func (c *cluster) clientWith(t *testing.T, cfg client.Config) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg.MasterAddr, cfg.HeartbeatInterval = c.grpc, 200*time.Millisecond
	cl, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// cli runs a client verb and returns stdout, stderr and the exit code.
func (c *cluster) cli(t *testing.T, stdin []byte, args ...string) (string, string, int) {
	t.Helper()
	if args[0] != "nvme" { // the NVMe initiator verbs talk to a target, not the master
		args = append(args, "--master", c.grpc)
	}
	return runKvtierCode(t, stdin, args...)
}

// runKvtierCode runs the binary with stdin (nil: none) and returns stdout,
// stderr and the exit code.
func runKvtierCode(t *testing.T, stdin []byte, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(kvtierBin, args...)
	if stdin != nil {
		cmd.Stdin = strings.NewReader(string(stdin))
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	code := 0
	if err := cmd.Run(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("kvtier %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errb.String(), code
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("not within %v: %s", within, what)
}

// freePort returns a loopback address whose port was free a moment ago (for
// a process that must come back on the same address).
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
