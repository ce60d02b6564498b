package client

import (
	"context"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// rebuildRetry bounds how long Put, Get and the batch calls retry a master
// that answers UNAVAILABLE_IN_CURRENT_STATUS to PutStart or GetReplicaList
// (a batch call asks again for just the keys so answered): it is
// rebuilding its object table from the appliances' reports (a restart or
// a new HA leader; package master, "Rebuild"), which takes about one
// heartbeat interval. GetReplicaList also answers it for an object whose
// only copies are on the SSD of an appliance that restarted and is
// re-registering them (milliseconds). Those two calls answer that code for
// nothing else.
const rebuildRetry = 5 * time.Second

// whileRebuilding runs call until it does not answer
// UNAVAILABLE_IN_CURRENT_STATUS, rebuildRetry passes or ctx ends.
func whileRebuilding(ctx context.Context, call func() error) error {
	deadline := time.Now().Add(rebuildRetry)
	wait := 10 * time.Millisecond
	for {
		err := call()
		if !kverr.Is(err, kverr.UnavailableInCurrentStatus) || time.Now().Add(wait).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}
