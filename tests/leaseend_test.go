package tests

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// TestLeaseEndingMidTransferIsLeaseExpired: a read lease that ends while
// its object is still on the wire (here a 1 ms lease against a 32 MiB read
// over TCP) makes the appliance refuse the remaining slices, because their
// grants end with the lease. The SDK asks once more with a fresh lease and
// then answers LEASE_EXPIRED ("query again"), the code a lease running out
// always had, never TRANSFER_FAIL as if the object could not be read.
func TestLeaseEndingMidTransferIsLeaseExpired(t *testing.T) {
	c := startCluster(t, "--lease-ttl", "1ms")
	c.appliance("box-a", "--shm=false")
	cl := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v := randomBytes(7, 32<<20)
	if err := cl.Put(ctx, "big", v); err != nil {
		t.Fatal(err)
	}
	var last error
	// The appliance enforces grants from its first key on (a heartbeat
	// after mount); until then nothing refuses the late slices.
	eventually(t, 15*time.Second, "a lease ending mid-transfer answered as LEASE_EXPIRED with the grant refusal", func() bool {
		_, last = cl.Get(ctx, "big")
		return kverr.Is(last, kverr.LeaseExpired) && strings.Contains(last.Error(), "grant refused (expired)")
	})
	if kverr.Is(last, kverr.TransferFail) {
		t.Fatalf("lease end reported as a transfer failure: %v", last)
	}
}
