package ssd

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/kvtier/kvtier/internal/clock"
	"github.com/kvtier/kvtier/kverr"
)

// fakeMaster is a fake Notifier standing in for the master (another package
// and process): it records DropBucket calls and can refuse them.
type fakeMaster struct {
	mu      sync.Mutex
	refuse  error    // guarded by mu; non-nil: every DropBucket fails with it
	dropped []uint64 // guarded by mu; agreed drops in order
	calls   chan uint64
}

var _ Notifier = (*fakeMaster)(nil)

func newFakeMaster() *fakeMaster { return &fakeMaster{calls: make(chan uint64, 1024)} }

func (m *fakeMaster) DropBucket(ctx context.Context, bucket uint64) error {
	select {
	case m.calls <- bucket:
	default:
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refuse != nil {
		return m.refuse
	}
	m.dropped = append(m.dropped, bucket)
	return nil
}

func (m *fakeMaster) setRefuse(err error) {
	m.mu.Lock()
	m.refuse = err
	m.mu.Unlock()
}

func (m *fakeMaster) drops() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]uint64(nil), m.dropped...)
}

// openTier opens a tier in dir (a fresh temp dir when dir is "") and closes
// it at test end, checking the index invariants first.
func openTier(t testing.TB, cfg Config) *Tier {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	tr, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		checkInvariants(t, tr)
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return tr
}

// checkInvariants verifies that the index and buckets agree and that used
// space is the sum of the buckets'.
func checkInvariants(t testing.TB, tr *Tier) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var used uint64
	for id, b := range tr.buckets {
		if b.id != id {
			t.Errorf("bucket map key %d holds bucket %d", id, b.id)
		}
		used += b.used
		for off, e := range b.extents {
			if e.Loc.Bucket != id || e.Loc.Offset != off {
				t.Errorf("extent %d/%d holds entry at %+v", id, off, e.Loc)
			}
		}
	}
	if used != tr.used {
		t.Errorf("used %d, sum of buckets %d", tr.used, used)
	}
	for k, e := range tr.index {
		b := tr.buckets[e.Loc.Bucket]
		if b == nil {
			t.Errorf("index entry %q points at missing bucket %d", k.key, e.Loc.Bucket)
			continue
		}
		if b.extents[e.Loc.Offset] != e {
			t.Errorf("index entry %q not in bucket %d extents", k.key, e.Loc.Bucket)
		}
	}
}

func value(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func mustPut(t testing.TB, tr *Tier, key string, v []byte) Location {
	t.Helper()
	loc, err := tr.Put(context.Background(), "t", key, v, Checksum(v))
	if err != nil {
		t.Fatalf("Put %s: %v", key, err)
	}
	return loc
}

func mustRead(t testing.TB, tr *Tier, loc Location, want []byte) {
	t.Helper()
	got := make([]byte, loc.Length)
	if err := tr.ReadExtent(context.Background(), loc.Bucket, loc.Offset, got); err != nil {
		t.Fatalf("ReadExtent %+v: %v", loc, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("ReadExtent %+v: bytes differ", loc)
	}
}

func wantCode(t testing.TB, err error, code kverr.Code) {
	t.Helper()
	if kverr.CodeOf(err) != code {
		t.Fatalf("error %v: code %v, want %v", err, kverr.CodeOf(err), code)
	}
}

// wantFailedRead reads loc into dst, first filled with 0xaa, and requires
// the read to fail with code and to leave dst all zero (a failed read
// never hands out bytes); what names the case in the failure.
func wantFailedRead(t testing.TB, tr *Tier, loc Location, dst []byte, code kverr.Code, what string) {
	t.Helper()
	for i := range dst {
		dst[i] = 0xaa
	}
	err := tr.ReadExtent(context.Background(), loc.Bucket, loc.Offset, dst)
	wantCode(t, err, code)
	if !allZero(dst) {
		t.Fatalf("%s: failed read (%v) left bytes in dst", what, err)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}

func bucketFiles(dir string, id uint64) (data, meta string) {
	return filepath.Join(dir, dataName(id)), filepath.Join(dir, metaName(id))
}

func fakeClock() *clock.Fake { return clock.NewFake(time.Unix(1_800_000_000, 0)) }
