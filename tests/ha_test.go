package tests

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/ha/hatest"
)

// TestHAFailover: two masters campaign through a real (embedded) etcd; only
// the leader listens. An appliance and a client given both addresses work
// through the leader; after SIGKILL of the leader the standby is elected,
// the appliance re-announces its segments and re-registers its SSD objects,
// and the client reads the same bytes through the new leader.
func TestHAFailover(t *testing.T) {
	_, etcd := hatest.StartEtcd(t)
	addrA, addrB := freePort(t), freePort(t)
	common := append([]string{"--etcd", etcd, "--http-addr", "127.0.0.1:0"}, fastMasterArgs...)
	a := start(t, "master-a", append([]string{"master", "--grpc-addr", addrA}, common...)...)

	// The standby blocks in its campaign and prints no "listening" line.
	b := exec.Command(kvtierBin, append([]string{"master", "--grpc-addr", addrB}, common...)...)
	var bOut lockedBuffer
	b.Stdout, b.Stderr = &bOut, &bOut
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Process.Kill(); _ = b.Wait() })

	masters := addrA + "," + addrB
	c := &cluster{t: t, master: a, grpc: masters}
	c.appliance("ha-box", "--ssd-dir", t.TempDir(), "--ssd-capacity", "256MiB")
	cl, err := client.New(context.Background(), client.Config{MasterAddr: masters, HeartbeatInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	v := randomBytes(99, 200<<10)
	if err := cl.Put(ctx, "ha/key", v); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "SSD copy written", func() bool {
		info, err := cl.Stat(ctx, "ha/key")
		return err == nil && hasReplica(info, kvtierpb.ReplicaType_LOCAL_DISK)
	})
	if strings.Contains(bOut.String(), "listening") {
		t.Fatalf("the standby listens while the leader is alive:\n%s", bOut.String())
	}

	a.kill()
	eventually(t, 30*time.Second, "standby elected and listening", func() bool {
		return strings.Contains(bOut.String(), "listening grpc="+addrB)
	})
	eventually(t, 30*time.Second, "object readable through the new leader", func() bool {
		got, err := cl.Get(ctx, "ha/key")
		return err == nil && bytes.Equal(got, v)
	})
	if err := cl.Put(ctx, "ha/after", []byte("new leader takes puts")); err != nil {
		t.Fatalf("put through the new leader: %v", err)
	}
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
