package tests

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/master"
)

// benchCluster is one `kvtier standalone` process (master and appliance,
// offload off so the SSD does not compete for the two cores), so that a
// benchmark moves bytes between two processes, the benchmark's and the
// store's, as the raw TCP baseline does. KVTIER_BENCH_PROFILE=FILE writes
// the standalone's CPU profile there (it is stopped with SIGTERM).
type benchCluster struct{ grpc string }

func startBenchCluster(b testing.TB) *benchCluster {
	b.Helper()
	m := startProcB(b, "standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--name", "bench-box", "--dram", "512MiB", "--ssd-dir", "", "--offload", "off", "--cpuprofile", os.Getenv("KVTIER_BENCH_PROFILE"))
	return &benchCluster{grpc: m["grpc"]}
}

func (c *benchCluster) newClient(b testing.TB) *client.Client {
	return c.newClientWith(b, client.Config{})
}

// newClientWith connects a client with cfg (MasterAddr filled in). Unless
// its transfers are TCP-only, it returns once the client has mapped the
// appliance's shared memory (that happens in the background on first
// contact), so no timed operation goes over TCP by accident.
func (c *benchCluster) newClientWith(b testing.TB, cfg client.Config) *client.Client {
	cfg.MasterAddr = c.grpc
	ctx := context.Background()
	cl, err := client.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	if cfg.Transfer.DisableSharedMemory {
		return cl
	}
	deadline := time.Now().Add(10 * time.Second)
	// Above what goes direct over TCP from the box's host (client
	// directOverShmMax), so the put moves its bytes with the transfer
	// engine, which maps the box's memory.
	warm := make([]byte, 256<<10)
	for i := 0; cl.Engine().Stats().SharedRequests == 0; i++ {
		if time.Now().After(deadline) {
			b.Fatalf("client never mapped the appliance's shared memory: %+v", cl.Engine().Stats())
		}
		key := fmt.Sprintf("bench/warm-up/%d", i)
		if err := cl.Put(ctx, key, warm); err != nil {
			b.Fatal(err)
		}
		_ = cl.Remove(ctx, key, true)
		time.Sleep(10 * time.Millisecond)
	}
	return cl
}

var benchListen = regexp.MustCompile(`^listening (.*)$`)

func startProcB(b testing.TB, args ...string) map[string]string {
	b.Helper()
	cmd := exec.Command(kvtierBin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stopGracefully(cmd) })
	sc := bufio.NewScanner(out)
	addrs := map[string]string{}
	deadline := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer deadline.Stop()
	for sc.Scan() {
		if m := benchListen.FindStringSubmatch(sc.Text()); m != nil {
			for _, kv := range regexpFields(m[1]) {
				addrs[kv[0]] = kv[1]
			}
			go func() { _, _ = bufio.NewReader(out).WriteTo(discard{}) }()
			return addrs
		}
	}
	b.Fatalf("%v: no listening line", args)
	return nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func regexpFields(s string) [][2]string {
	var out [][2]string
	for _, f := range regexp.MustCompile(`(\S+)=(\S+)`).FindAllStringSubmatch(s, -1) {
		out = append(out, [2]string{f[1], f[2]})
	}
	return out
}

// startInprocB runs a master in this process and returns its gRPC address.
func startInprocB(b *testing.B) string { return startInproc(b, master.Config{}).addr }

// stopGracefully sends SIGTERM (so a --cpuprofile is flushed and segments
// unmount) and falls back to SIGKILL after a few seconds.
func stopGracefully(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.AfterFunc(5*time.Second, func() { _ = cmd.Process.Kill() })
	_ = cmd.Wait()
	t.Stop()
}

// TestBenchClientMapsSharedMemory: the benchmarks' clients map the
// standalone's memory before they are timed (newClientWith's warm-up),
// whatever size of put goes direct over TCP from the box's host. The
// benchmarks run outside make test; this keeps their harness working.
func TestBenchClientMapsSharedMemory(t *testing.T) {
	c := startBenchCluster(t)
	cl := c.newClient(t)
	if cl.Engine().Stats().SharedRequests == 0 {
		t.Fatal("no shared-memory transfer after the warm-up")
	}
}
