package namespace

import (
	"errors"
	"testing"
)

// Requests the kernel refuses at io_submit complete as unsubmitted, so
// their waiters fall back to pread/pwrite instead of hanging; the ring
// still works afterwards and closes cleanly.
func TestAIOUnsubmittedFallsBack(t *testing.T) {
	a, err := newAIO(16)
	if err != nil {
		t.Skipf("Linux AIO not available here: %v", err)
	}
	var b aioBatch
	var reqs []*aioReq
	for i := 0; i < 3; i++ {
		r, err := a.queue(&b, iocbCmdPread, -1, AlignedBuffer(4096), 0) // bad fd: refused
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	a.submit(&b)
	for _, r := range reqs {
		if err := a.wait(r); !errors.Is(err, errAIOUnavailable) {
			t.Fatalf("refused request: %v, want errAIOUnavailable", err)
		}
	}
	if len(a.pending) != 0 || len(a.free) != 3 {
		t.Fatalf("pending %d free eventfds %d after refusal", len(a.pending), len(a.free))
	}
	a.close()
	if _, err := a.start(iocbCmdPread, -1, AlignedBuffer(4096), 0); !errors.Is(err, errAIOUnavailable) {
		t.Fatalf("start after close: %v", err)
	}
}

// Beyond depth requests in flight, further ones are not queued (they use
// pread/pwrite) and no more eventfds are made.
func TestAIODepthBound(t *testing.T) {
	a, err := newAIO(2)
	if err != nil {
		t.Skipf("Linux AIO not available here: %v", err)
	}
	defer a.close()
	var b aioBatch
	for i := 0; i < 2; i++ {
		if _, err := a.queue(&b, iocbCmdPread, -1, AlignedBuffer(4096), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.queue(&b, iocbCmdPread, -1, AlignedBuffer(4096), 0); !errors.Is(err, errAIOUnavailable) {
		t.Fatalf("third request with depth 2: %v", err)
	}
	reqs := append([]*aioReq(nil), b.reqs...)
	a.submit(&b)
	for _, r := range reqs {
		a.wait(r)
	}
	if len(a.all) != 2 {
		t.Fatalf("%d eventfds made for depth 2", len(a.all))
	}
}
