//go:build cgo

package main

import (
	"context"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

func TestRegistry(t *testing.T) {
	var r registry
	r.regions = append(r.regions, &region{base: 0x1000, size: 0x1000}) // as register would, for a fake address
	if r.register(0x1000, 0x1000) != codeOK {
		t.Fatal("registering the same range again failed")
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
	if r.register(0x1000, 0x10) != codeInvalidParams {
		t.Error("an address this process has not mapped was registered")
	}
	if r.unregister(0x1000) != codeOK || r.unregister(0x1000) != codeInvalidParams {
		t.Error("unregister: want OK once, then INVALID_PARAMS")
	}
	// Real memory: registered; another size at the same address replaces
	// the registration.
	buf := make([]byte, 1<<20)
	p := uintptr(unsafe.Pointer(&buf[0]))
	if r.register(p, 1<<20) != codeOK {
		t.Fatal("registering a Go heap buffer failed")
	}
	if r.register(p, 1<<10) != codeOK {
		t.Fatal("re-register with another size failed")
	}
	if _, ok := r.use(p, 1<<10+1); ok {
		t.Error("the old, larger registration is still in effect")
	}
	if r.unregister(p) != codeOK || len(r.regions) != 0 {
		t.Errorf("unregister left %d regions", len(r.regions))
	}
	runtime.KeepAlive(buf)
}

func TestMappedRW(t *testing.T) {
	buf := make([]byte, 3<<20)
	p := uint64(uintptr(unsafe.Pointer(&buf[0])))
	if !mappedRW(p, uint64(len(buf))) {
		t.Error("a heap buffer is not readable and writable")
	}
	if mappedRW(0x1000, 4096) {
		t.Error("page 1 is mapped")
	}
	// Text is mapped read-only and executable: not a transfer buffer.
	fn := uint64(reflect.ValueOf(TestMappedRW).Pointer())
	if mappedRW(fn, 16) {
		t.Error("code pages count as writable")
	}
	// A PROT_NONE reservation, as the CUDA driver makes for device memory.
	res, err := syscall.Mmap(-1, 0, 1<<20, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(res)
	if mappedRW(uint64(uintptr(unsafe.Pointer(&res[0]))), 4096) {
		t.Error("a PROT_NONE reservation counts as writable")
	}
	runtime.KeepAlive(buf)
}

// TestRegistryUnregisterWaits: unregister returns only after the calls
// using the region end, and no call starts using it afterwards.
func TestRegistryUnregisterWaits(t *testing.T) {
	var r registry
	buf := make([]byte, 1<<20)
	base := uintptr(unsafe.Pointer(&buf[0]))
	if r.register(base, 1<<20) != codeOK {
		t.Fatal("register failed")
	}
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
				if done, ok := r.use(base+4096, 4096); ok {
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
	if r.unregister(base) != codeOK {
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
	runtime.KeepAlive(buf)
}

// TestHandlesConcurrent: calls on a handle from many goroutines while it is
// destroyed end cleanly (-1 once it is gone), and destroy waits for the
// calls in flight. Run under -race.
func TestHandlesConcurrent(t *testing.T) {
	addr := startStandalone(t, "64MiB")
	h := kvtier_go_create()
	if rc := setup(h, "localhost", 0, 0, "tcp", "", addr); rc != codeOK {
		t.Fatalf("setup: %d", rc)
	}
	if rc := setup(h, "localhost", 0, 0, "tcp", "", addr); rc != codeInvalidParams {
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
