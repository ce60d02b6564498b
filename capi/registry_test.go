//go:build cgo

package main

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestRegistry(t *testing.T) {
	var r registry
	if r.register(0x1000, 0x1000) != codeOK || r.register(0x1000, 0x1000) != codeOK {
		t.Fatal("register (twice) failed")
	}
	for _, c := range []struct {
		p    uintptr
		n    uint64
		want bool
	}{
		{0x1000, 0x1000, true}, {0x1800, 0x800, true}, {0x1800, 0x801, false},
		{0xfff, 2, false}, {0x2000, 1, false}, {0, 0, false}, {^uintptr(0), 2, false},
	} {
		done, ok := r.use(c.p, c.n)
		if ok != c.want {
			t.Errorf("use(%#x, %#x) = %v, want %v", c.p, c.n, ok, c.want)
		}
		if ok {
			done()
		}
	}
	if r.register(^uintptr(0)-1, 10) != codeInvalidParams {
		t.Error("a range wrapping the address space was registered")
	}
	// Another size at the same address replaces the registration.
	if r.register(0x1000, 0x10) != codeOK {
		t.Fatal("re-register with another size failed")
	}
	if _, ok := r.use(0x1000, 0x11); ok {
		t.Error("the old, larger registration is still in effect")
	}
	if r.unregister(0x1000) != codeOK || r.unregister(0x1000) != codeInvalidParams {
		t.Error("unregister: want OK once, then INVALID_PARAMS")
	}
	if len(r.regions) != 0 {
		t.Errorf("%d regions left", len(r.regions))
	}
}

// TestRegistryUnregisterWaits: unregister returns only after the calls
// using the region end, and no call starts using it afterwards.
func TestRegistryUnregisterWaits(t *testing.T) {
	var r registry
	r.register(0x10000, 1<<20)
	var inUse, after atomic.Int32
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if done, ok := r.use(0x10000, 4096); ok {
					inUse.Add(1)
					time.Sleep(50 * time.Microsecond)
					inUse.Add(-1)
					done()
				} else {
					after.Add(1)
				}
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	if r.unregister(0x10000) != codeOK {
		t.Fatal("unregister failed")
	}
	if n := inUse.Load(); n != 0 {
		t.Fatalf("unregister returned with %d calls still using the region", n)
	}
	time.Sleep(5 * time.Millisecond)
	close(stop)
	wg.Wait()
	if after.Load() == 0 {
		t.Fatal("no call was refused after unregister: the test proved nothing")
	}
}

// TestHandlesConcurrent: calls on a handle from many goroutines while it is
// destroyed end cleanly (-1 once it is gone), and destroy waits for the
// calls in flight. Run under -race.
func TestHandlesConcurrent(t *testing.T) {
	addr := startStandalone(t, "64MiB")
	h := kvtier_go_create()
	if rc := setup(h, "localhost", 0, 0, "tcp", addr); rc != codeOK {
		t.Fatalf("setup: %d", rc)
	}
	if rc := setup(h, "localhost", 0, 0, "tcp", addr); rc != codeInvalidParams {
		t.Fatalf("second setup: %d, want -600", rc)
	}
	var ok, gone atomic.Int32
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				_, c, release, code := acquire(h)
				if code != codeOK {
					if code != codeInternalError {
						t.Errorf("acquire after destroy: %d, want -1", code)
					}
					gone.Add(1)
					return
				}
				key := string(rune('a'+g)) + "/k"
				err := c.Put(context.Background(), key, []byte("v"))
				release()
				if err != nil {
					t.Errorf("put: %v", err)
					return
				}
				ok.Add(1)
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	kvtier_go_destroy(h)
	wg.Wait()
	if ok.Load() == 0 || gone.Load() != 8 {
		t.Fatalf("%d calls succeeded, %d goroutines saw the handle go (want >0 and 8)", ok.Load(), gone.Load())
	}
	kvtier_go_destroy(h) // a second destroy is ignored
	if lookup(h) != nil {
		t.Fatal("the handle is still in the table")
	}
}
