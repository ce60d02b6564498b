package initiator_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/initiator"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/target"
)

const (
	sub  = "nqn.2026-11.io.kvtier:init"
	host = "nqn.2026-11.io.kvtier:host"
)

func startTarget(t testing.TB) string {
	_, addr := startTargetSized(t, 8<<20)
	return addr
}

// startTargetSized runs a target with one memory namespace of size bytes
// under sub, closed when the test ends (or earlier by the test).
func startTargetSized(t testing.TB, size int) (*target.Target, string) {
	tg, err := target.New(target.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := namespace.NewMemory(make([]byte, size), 4096)
	if err := tg.AddSubsystem(target.Subsystem{NQN: sub, Namespaces: []namespace.Namespace{mem}}); err != nil {
		t.Fatal(err)
	}
	addr, err := tg.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg, addr.String()
}

func TestConfigValidate(t *testing.T) {
	bad := []initiator.Config{
		{HostNQN: host},
		{SubNQN: sub},
		{SubNQN: sub, HostNQN: host, IOQueues: -1},
		{SubNQN: sub, HostNQN: host, QueueDepth: 1},
		{SubNQN: sub, HostNQN: host, QueueDepth: 5000},
	}
	for _, c := range bad {
		if err := c.Validate(); !kverr.Is(err, kverr.InvalidParams) {
			t.Fatalf("%+v: %v", c, err)
		}
		if _, err := initiator.Dial(context.Background(), "127.0.0.1:1", c); !kverr.Is(err, kverr.InvalidParams) {
			t.Fatalf("Dial accepted %+v: %v", c, err)
		}
	}
	if _, err := initiator.Dial(context.Background(), "127.0.0.1:1", initiator.Config{SubNQN: sub, HostNQN: host}); !kverr.Is(err, kverr.TransferFail) {
		t.Fatalf("dial to a closed port: %v", err)
	}
}

// TestManyQueuesDeep keeps 4 queues × 128 commands outstanding.
func TestManyQueuesDeep(t *testing.T) {
	addr := startTarget(t)
	ctx := context.Background()
	c, err := initiator.Dial(ctx, addr, initiator.Config{SubNQN: sub, HostNQN: host, IOQueues: 4, QueueDepth: 128, HeaderDigest: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 512)
	for i := 0; i < 512; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			p := bytes.Repeat([]byte{byte(i)}, 4096)
			off := int64(i%2048) * 4096
			if err := c.WriteAt(ctx, 1, p, off); err != nil {
				errs <- err
				return
			}
			got := make([]byte, 4096)
			if err := c.ReadAt(ctx, 1, got, off); err != nil || !bytes.Equal(got, p) {
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("I/O failed or data differs: %v", err)
	}
}

// TestCancelDoesNotLeakSlots cancels many commands mid-flight on a queue of
// depth 2; later commands must still find free slots.
func TestCancelDoesNotLeakSlots(t *testing.T) {
	addr := startTarget(t)
	c, err := initiator.Dial(context.Background(), addr, initiator.Config{SubNQN: sub, HostNQN: host, QueueDepth: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64<<10)
	for i := 0; i < 200; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		go cancel()
		err := c.ReadAt(ctx, 1, buf, 0)
		if err != nil && err != context.Canceled {
			t.Fatalf("cancelled read: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < 10; i++ {
		if err := c.ReadAt(ctx, 1, buf, 0); err != nil {
			t.Fatalf("read after cancellations (slots leaked?): %v", err)
		}
	}
}

func TestPerfSmoke(t *testing.T) {
	addr := startTarget(t)
	c, err := initiator.Dial(context.Background(), addr, initiator.Config{SubNQN: sub, HostNQN: host})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, rw := range []string{"randread", "read", "write", "randwrite"} {
		r, err := initiator.Perf(context.Background(), c, initiator.PerfConfig{RW: rw, BlockSize: 8192, QueueDepth: 4, Duration: 150 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if r.IOs == 0 || r.IOPS <= 0 || r.P99 < r.P50 || r.Bytes != r.IOs*8192 {
			t.Fatalf("%s: %+v", rw, r)
		}
	}
	if _, err := initiator.Perf(context.Background(), c, initiator.PerfConfig{RW: "sideways"}); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("bad rw: %v", err)
	}
	if _, err := initiator.Perf(context.Background(), c, initiator.PerfConfig{BlockSize: 1000}); !kverr.Is(err, kverr.InvalidParams) {
		t.Fatalf("bad block size: %v", err)
	}
}

func TestClosedController(t *testing.T) {
	addr := startTarget(t)
	c, err := initiator.Dial(context.Background(), addr, initiator.Config{SubNQN: sub, HostNQN: host})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := c.ReadAt(context.Background(), 1, make([]byte, 4096), 0); !kverr.Is(err, kverr.UnavailableInCurrentStatus) {
		t.Fatalf("read after close: %v", err)
	}
	if err := c.Reconnect(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.ReadAt(context.Background(), 1, make([]byte, 4096), 0); err != nil {
		t.Fatalf("read after reconnect: %v", err)
	}
}

// TestRangeRefusals: a range off the block grid and one past the
// namespace's end are refused before anything is sent, each saying which.
func TestRangeRefusals(t *testing.T) {
	addr := startTarget(t)
	ctx := context.Background()
	c, err := initiator.Dial(ctx, addr, initiator.Config{SubNQN: sub, HostNQN: host})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	nss := c.Namespaces()
	if len(nss) != 1 || nss[0].NSID != 1 {
		t.Fatalf("namespaces %+v, want one, id 1", nss)
	}
	ns := nss[0]
	p := make([]byte, 8192)
	for _, tc := range []struct {
		off  int64
		n    int
		want string
	}{
		{100, 8192, "multiples of"},
		{0, 100, "multiples of"},
		{-4096, 4096, "multiples of"},
		{ns.Size(), 4096, "ends past"},
		{ns.Size() - 4096, 8192, "ends past"},
	} {
		for name, io := range map[string]func() error{
			"read":  func() error { return c.ReadAt(ctx, 1, p[:tc.n], tc.off) },
			"write": func() error { return c.WriteAt(ctx, 1, p[:tc.n], tc.off) },
		} {
			if err := io(); !kverr.Is(err, kverr.InvalidParams) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s [%d,+%d): %v, want INVALID_PARAMS %q", name, tc.off, tc.n, err, tc.want)
			}
		}
	}
	if err := c.ReadAt(ctx, 1, p[:4096], ns.Size()-4096); err != nil {
		t.Fatalf("the last block: %v", err)
	}
}
