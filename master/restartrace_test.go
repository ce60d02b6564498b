package master

import (
	"sync"
	"testing"
)

// TestRestartFinishesBeforeTheNewIncarnationActs: a restarted appliance's
// heartbeat and its segment mount race (its heartbeat loop starts with the
// process); whichever first shows the new incarnation starts the restart
// (restartNode). Its other contacts must not act before that restart is
// done: a mount answered first was unmounted by it ("owner restarted"),
// and an SSD registration ended first left the copies it had just
// registered unconfirmed, dropped at the restart's registration end. Seen
// as TestRestartDropsCopiesTheMasterRefuses (appliance) failing under
// load: 4 of 300 runs.
func TestRestartFinishesBeforeTheNewIncarnationActs(t *testing.T) {
	for i := range 300 {
		m, _ := newTest(t, Config{})
		old := Identity{Incarnation: "inc-1", DiskID: "disk"}
		if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", Identity: old}); err != nil {
			t.Fatal(err)
		}
		if err := m.MountSegmentAs(ctx, "box", old, Segment{Name: "box/mem0", Endpoint: "box:1", Size: 1 << 20}); err != nil {
			t.Fatal(err)
		}
		kept := DiskObject{Key: "kept", Size: 10, Bucket: 1, Length: 10}
		if errs, err := m.RegisterDiskObjects(ctx, "box", []DiskObject{kept}); err != nil || errs[0] != nil {
			t.Fatal(err, errs)
		}
		if _, err := m.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:1", Identity: old, Leaving: true}); err != nil {
			t.Fatal(err)
		}
		// The new incarnation: its first beat and its start (mount, then
		// the SSD registration) at once.
		inc := Identity{Incarnation: "inc-2", DiskID: "disk"}
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _ = m.Heartbeat(ctx, HeartbeatRequest{Client: "box", Endpoint: "box:2", Identity: inc})
		})
		var startErr error
		wg.Go(func() {
			if startErr = m.MountSegmentAs(ctx, "box", inc, Segment{Name: "box/mem0", Endpoint: "box:2", Size: 1 << 20}); startErr != nil {
				return
			}
			errs, err := m.RegisterDiskObjects(ctx, "box", []DiskObject{kept})
			if err == nil && errs[0] != nil {
				err = errs[0]
			}
			if startErr = err; err == nil {
				startErr = m.EndDiskRegistration(ctx, "box")
			}
		})
		wg.Wait()
		if startErr != nil {
			t.Fatalf("run %d: the new incarnation's start: %v", i, startErr)
		}
		if _, err := m.GetReplicaList(ctx, "reader", "", "kept"); err != nil {
			t.Fatalf("run %d: the copy the new incarnation registered is not served: %v", i, err)
		}
		if segs := m.ListSegments(ctx); len(segs) != 1 || segs[0].State != SegMounted {
			t.Fatalf("run %d: the new incarnation's mount: %+v", i, segs)
		}
	}
}
