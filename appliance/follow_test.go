package appliance

import (
	"context"
	"testing"
	"time"
)

// TestAwaitFollow: a directory report's wait for the records stream ends
// when the stream follows the master's outbox (not another one), and at
// its bound or the context's end otherwise.
func TestAwaitFollow(t *testing.T) {
	var d dramSeen
	if d.followsAnother(0x22) {
		t.Fatal("following nothing yet (a first start): no other master's records to wait past")
	}
	d.applied(0x11, 5) // following an old master
	if !d.followsAnother(0x22) || d.followsAnother(0x11) {
		t.Fatal("followsAnother: following 0x11, asked about 0x22 and 0x11")
	}
	done := make(chan bool, 1)
	go func() { done <- d.awaitFollow(context.Background(), 0x22, 5*time.Second) }()
	time.Sleep(20 * time.Millisecond)
	d.applied(0x11, 6) // the old stream moves on: still waiting
	select {
	case ok := <-done:
		t.Fatalf("awaitFollow returned %v while the old outbox was followed", ok)
	case <-time.After(50 * time.Millisecond):
	}
	d.applied(0x22, 0) // the stream reached the new master
	if ok := <-done; !ok {
		t.Fatal("awaitFollow false once the outbox was followed")
	}
	if !d.awaitFollow(context.Background(), 0x22, 0) {
		t.Fatal("already following: awaitFollow must not wait")
	}
	start := time.Now()
	if d.awaitFollow(context.Background(), 0x33, 30*time.Millisecond) || time.Since(start) < 30*time.Millisecond {
		t.Fatal("awaitFollow of an outbox never followed must wait out its bound and say false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d.awaitFollow(ctx, 0x33, time.Minute) {
		t.Fatal("awaitFollow true after its context ended")
	}
}
