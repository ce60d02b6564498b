package initiator_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/initiator"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/target"
)

// TestPerfWritesLand checks that Perf's writes (completion callbacks
// resubmitting on the receiver goroutine, two queues, in-capsule 4 KiB
// and R2T 16 KiB) put whole, intact blocks where it says: every block of
// the namespace it covered holds one slot's pattern (byte j+slot).
func TestPerfWritesLand(t *testing.T) {
	tg, err := target.New(target.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	const size = 1 << 20
	mem, _ := namespace.NewMemory(make([]byte, size), 4096)
	if err := tg.AddSubsystem(target.Subsystem{NQN: sub, Namespaces: []namespace.Namespace{mem}}); err != nil {
		t.Fatal(err)
	}
	addr, err := tg.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := initiator.Dial(context.Background(), addr.String(), initiator.Config{SubNQN: sub, HostNQN: host, IOQueues: 2, QueueDepth: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, bs := range []int{4096, 16384} {
		r, err := initiator.Perf(context.Background(), c, initiator.PerfConfig{RW: "write", BlockSize: bs, QueueDepth: 16, Duration: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if r.IOs < size/uint64(bs) {
			t.Fatalf("bs %d: %d writes do not cover the %d-byte namespace once (%+v)", bs, r.IOs, size, r)
		}
		buf := make([]byte, size)
		if err := c.ReadAt(context.Background(), 1, buf, 0); err != nil {
			t.Fatal(err)
		}
		for off := 0; off < size; off += bs {
			b := buf[off : off+bs]
			slot := b[0]
			for j := range b {
				if b[j] != byte(j)+slot {
					t.Fatalf("bs %d: block at %d byte %d is %d, want %d (slot %d's pattern)", bs, off, j, b[j], byte(j)+slot, slot)
				}
			}
		}
	}
	// More slots than the queues have entries: Perf falls back to a
	// goroutine per slot and still works.
	r, err := initiator.Perf(context.Background(), c, initiator.PerfConfig{RW: "randread", BlockSize: 4096, QueueDepth: 32, Duration: 100 * time.Millisecond})
	if err != nil || r.IOs == 0 {
		t.Fatalf("QD 32 over 2x8 entries: %+v, %v", r, err)
	}
}

// TestPerfQueueDies checks that Perf returns a transfer error, instead of
// waiting for completions that never come, when the target goes away
// during the run.
func TestPerfQueueDies(t *testing.T) {
	tg, addr := startTargetSized(t, 1<<20)
	c, err := initiator.Dial(context.Background(), addr, initiator.Config{SubNQN: sub, HostNQN: host, KeepAlive: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.AfterFunc(100*time.Millisecond, func() { tg.Close() })
	start := time.Now()
	_, err = initiator.Perf(context.Background(), c, initiator.PerfConfig{RW: "randread", QueueDepth: 16, Duration: 20 * time.Second})
	if !kverr.Is(err, kverr.TransferFail) {
		t.Fatalf("perf against a target that closed: %v, want a transfer failure", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("perf took %v to notice the dead queue", d)
	}
}

// TestPerfTargetGoneBeforeStart: a target that went away before Perf
// submits anything gives a transfer error at once (the first submissions
// fail), not a hang or a bare socket error. (A write that fails before the
// receiver noticed the close is wrapped the same way in submitAsync; that
// window is too narrow to hit on purpose.)
func TestPerfTargetGoneBeforeStart(t *testing.T) {
	tg, addr := startTargetSized(t, 1<<20)
	c, err := initiator.Dial(context.Background(), addr, initiator.Config{SubNQN: sub, HostNQN: host, KeepAlive: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tg.Close()
	time.Sleep(50 * time.Millisecond) // let the queues see the close
	if _, err := initiator.Perf(context.Background(), c, initiator.PerfConfig{RW: "randread", QueueDepth: 8, Duration: 5 * time.Second}); !kverr.Is(err, kverr.TransferFail) {
		t.Fatalf("perf against a target closed before the run: %v, want a transfer failure", err)
	}
}
