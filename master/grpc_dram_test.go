package master

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
)

// TestDramRecordsConn: the in-process records stream answers the outbox at
// once, hands a put's commit record to its holder and lets PutEnd answer
// on the acknowledgement (not on the timeout), carries a Remove's free,
// refuses another client's acknowledgement, and ends with io.EOF when the
// master stops.
func TestDramRecordsConn(t *testing.T) {
	m, _ := newTest(t, Config{DramSyncTimeout: 5 * time.Second})
	if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "box", DramDirectory: true}); err != nil {
		t.Fatal(err)
	}
	mountMem(t, m, "box", "box/mem0", 1<<20)
	c := m.OpenDramRecords(ctx)
	if _, err := c.Recv(); err == nil {
		t.Fatal("Recv before the first Send answered")
	}
	req := &kvtierpb.TakeDramRecordsRequest{ClientId: "box"}
	if err := c.Send(req); err != nil {
		t.Fatal(err)
	}
	first, err := c.Recv()
	if err != nil || first.Outbox == 0 || len(first.Records) != 0 {
		t.Fatalf("first answer %v, %v: want the outbox and no records", first, err)
	}
	outbox := first.Outbox
	took := func(free bool, key string) {
		t.Helper()
		r, err := c.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if r.Outbox != outbox || len(r.Records) != 1 || r.Records[0].Free != free || string(r.Records[0].Key) != key && !free {
			t.Fatalf("answer %v: want one record (free %v) of %q", r, free, key)
		}
		req.Outbox, req.AckThrough = outbox, r.Records[0].Seq
		if err := c.Send(req); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		put(t, m, "w", "k", 100)
		done <- time.Since(start)
	}()
	took(false, "k")
	if d := <-done; d > 2*time.Second {
		t.Fatalf("PutEnd took %v: the acknowledgement did not reach it", d)
	}
	if ctrOf(m, "dram_commits_unconfirmed") != 0 {
		t.Fatal("an acknowledged commit counted unconfirmed")
	}
	go func() { done <- 0; _ = m.Remove(ctx, "", "k", false) }()
	<-done
	took(true, "")
	if err := c.Send(&kvtierpb.TakeDramRecordsRequest{ClientId: "other"}); err == nil {
		t.Fatal("another client's acknowledgement taken on the stream")
	}
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { m.Run(rctx); close(ran) }()
	errc := make(chan error, 1)
	go func() { _, err := c.Recv(); errc <- err }()
	stop()
	<-ran
	select {
	case err := <-errc:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("Recv after the master stopped: %v, want io.EOF", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Recv still waiting after the master stopped")
	}
}
