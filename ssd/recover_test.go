package ssd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/kvtier/kvtier/kverr"
)

// stored is a tier with objects in three sealed buckets (ids 1..3) and an
// open bucket 4, closed so its directory can be reopened.
type stored struct {
	dir  string
	locs map[string]Location
	vals map[string][]byte
}

func newStored(t *testing.T) stored {
	t.Helper()
	s := stored{dir: t.TempDir(), locs: map[string]Location{}, vals: map[string][]byte{}}
	tr, err := Open(context.Background(), Config{Dir: s.dir, BucketSize: 4 * Block})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 14 {
		key := fmt.Sprintf("o%d", i)
		s.vals[key] = value(uint64(i), 3000+i)
		s.locs[key] = mustPut(t, tr, key, s.vals[key])
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	return s
}

// reopen opens the stored directory again and checks that exactly the
// objects outside the lost buckets are served, with their bytes.
func (s stored) reopen(t *testing.T, lost ...uint64) *Tier {
	t.Helper()
	tr := openTier(t, Config{Dir: s.dir, BucketSize: 4 * Block})
	for key, loc := range s.locs {
		e, ok := tr.Lookup("t", key)
		if slices.Contains(lost, loc.Bucket) {
			if ok {
				t.Fatalf("%s of lost bucket %d is served", key, loc.Bucket)
			}
			wantCode(t, tr.ReadExtent(context.Background(), loc.Bucket, loc.Offset, make([]byte, loc.Length)), kverr.ObjectNotFound)
			continue
		}
		if !ok || e.Loc != loc {
			t.Fatalf("%s not recovered (got %+v %v, want %+v)", key, e, ok, loc)
		}
		mustRead(t, tr, loc, s.vals[key])
	}
	return tr
}

func (s stored) metaPath(id uint64) string { return filepath.Join(s.dir, metaName(id)) }
func (s stored) dataPath(id uint64) string { return filepath.Join(s.dir, dataName(id)) }

func patchFile(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestRestartRecoversEveryBucket(t *testing.T) {
	s := newStored(t)
	tr := s.reopen(t)
	st := tr.Stats()
	if st.Buckets != 4 || st.Objects != 14 || st.OpenBucket != 0 || len(tr.Quarantined()) != 0 {
		t.Fatalf("recovered stats %+v, quarantined %v", st, tr.Quarantined())
	}
	if got := len(tr.Objects()); got != 14 {
		t.Fatalf("Objects for re-registration: %d", got)
	}
	// Recovered buckets are sealed; ids keep increasing.
	loc := mustPut(t, tr, "new", value(50, 100))
	if loc.Bucket != 5 {
		t.Fatalf("new object in bucket %d, want 5", loc.Bucket)
	}
}

func TestRestartAfterCrashWithoutClose(t *testing.T) {
	dir := t.TempDir()
	crashed, err := Open(context.Background(), Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer crashed.Close() // releases its descriptors at test end; the lock error is expected
	v := value(1, 70000)
	loc := mustPut(t, crashed, "k", v)
	// The process dies: the kernel drops its flock; nothing was closed or sealed.
	if err := crashed.lock.Close(); err != nil {
		t.Fatal(err)
	}
	tr := openTier(t, Config{Dir: dir})
	mustRead(t, tr, loc, v)
}

// recordsEnd returns where the next record of a metadata file would go.
func recordsEnd(t *testing.T, path string) int64 {
	t.Helper()
	return int64(readMetaFile(t, path).Valid)
}

func TestRestartDropsTornRecord(t *testing.T) {
	full := appendRecord(nil, metaRecord{Tenant: "t", Key: "ghost", Offset: 4 * Block, Length: 10, CRC32C: 1})
	badCRC := slices.Clone(full)
	badCRC[len(badCRC)-1] ^= 0xff
	for name, tail := range map[string][]byte{
		"cut short":    full[:len(full)-3],
		"length only":  full[:3],
		"bad checksum": badCRC,
	} {
		for _, atEOF := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/at EOF %v", name, atEOF), func(t *testing.T) {
				s := newStored(t)
				end := recordsEnd(t, s.metaPath(2))
				if atEOF { // a file without a zero reserve after its records
					if err := os.Truncate(s.metaPath(2), end); err != nil {
						t.Fatal(err)
					}
				}
				patchFile(t, s.metaPath(2), end, tail)
				tr := s.reopen(t)
				if _, ok := tr.Lookup("t", "ghost"); ok {
					t.Fatal("torn record served")
				}
				if st := tr.Stats(); st.TornRecords != 1 || st.QuarantinedBuckets != 0 {
					t.Fatalf("stats %+v", st)
				}
				if now, _ := os.Stat(s.metaPath(2)); now.Size() != end {
					t.Fatalf("torn tail not cut: %d bytes, records end at %d", now.Size(), end)
				}
			})
		}
	}
}

func TestTornMetadataWriteViaFaultInjector(t *testing.T) {
	dir := t.TempDir()
	fi := NewFaultInjector(OSFS{})
	tr, err := Open(context.Background(), Config{Dir: dir, FS: fi})
	if err != nil {
		t.Fatal(err)
	}
	v1, v2, v3 := value(1, 5000), value(2, 6000), value(3, 7000)
	l1 := mustPut(t, tr, "one", v1)
	fi.FailWritesAfter(metaSuffix, 11, syscall.EIO) // the next record is torn after 11 bytes
	_, err = tr.Put(context.Background(), "t", "two", v2, Checksum(v2))
	wantCode(t, err, kverr.FileWriteFail)
	fi.FailWritesAfter("", -1, nil)
	l3 := mustPut(t, tr, "three", v3)
	if l3.Bucket == l1.Bucket {
		t.Fatal("bucket with a failed metadata write kept taking objects")
	}
	mustRead(t, tr, l1, v1) // the sealed bucket keeps serving
	if _, ok := tr.Lookup("t", "two"); ok {
		t.Fatal("failed Put is indexed")
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	re := openTier(t, Config{Dir: dir})
	mustRead(t, re, l1, v1)
	mustRead(t, re, l3, v3)
	if _, ok := re.Lookup("t", "two"); ok {
		t.Fatal("torn record recovered")
	}
	if st := re.Stats(); st.TornRecords != 1 || st.Objects != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func checkQuarantined(t *testing.T, tr *Tier, s stored, id uint64) {
	t.Helper()
	q := tr.Quarantined()
	var qe *QuarantineError
	if len(q) != 1 || !errors.As(q[0], &qe) || qe.Bucket != id || !qe.Moved {
		t.Fatalf("quarantined %v, want bucket %d moved", q, id)
	}
	if tr.Stats().QuarantinedBuckets != 1 {
		t.Fatalf("stats %+v", tr.Stats())
	}
	if fileExists(s.metaPath(id)) || !fileExists(filepath.Join(s.dir, quarantineDir, metaName(id))) {
		t.Fatal("quarantined metadata not moved to quarantine/")
	}
	if loc := mustPut(t, tr, "after", value(99, 10)); loc.Bucket <= 4 {
		t.Fatalf("new bucket id %d reuses an old one", loc.Bucket)
	}
}

func TestCorruptMetadataHeaderQuarantined(t *testing.T) {
	s := newStored(t)
	patchFile(t, s.metaPath(2), 14, []byte{0x77})
	tr := s.reopen(t, 2)
	checkQuarantined(t, tr, s, 2)
	t.Log(tr.Quarantined()[0])
}

func TestCorruptMiddleRecordQuarantined(t *testing.T) {
	s := newStored(t)
	patchFile(t, s.metaPath(3), metaHeaderSize+6, []byte{0x01})
	tr := s.reopen(t, 3)
	checkQuarantined(t, tr, s, 3)
}

func TestShortDataFileQuarantined(t *testing.T) {
	s := newStored(t)
	if err := os.Truncate(s.dataPath(1), Block); err != nil {
		t.Fatal(err)
	}
	tr := s.reopen(t, 1)
	checkQuarantined(t, tr, s, 1)
	if !fileExists(filepath.Join(s.dir, quarantineDir, dataName(1))) {
		t.Fatal("short data file not moved to quarantine/")
	}
}

func TestShortFilesViaFaultInjector(t *testing.T) {
	s := newStored(t)
	fi := NewFaultInjector(OSFS{})
	// The data file of bucket 2 loses its tail; the metadata of bucket 3 is
	// cut inside its header.
	fi.ShortFiles(dataName(2), Block)
	tr, err := Open(context.Background(), Config{Dir: s.dir, FS: fi, BucketSize: 4 * Block})
	if err != nil {
		t.Fatal(err)
	}
	var qe *QuarantineError
	if q := tr.Quarantined(); len(q) != 1 || !errors.As(q[0], &qe) || qe.Bucket != 2 {
		t.Fatalf("short data: quarantined %v", q)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	fi.ShortFiles(metaName(3), 20)
	tr2 := openTier(t, Config{Dir: s.dir, FS: fi, BucketSize: 4 * Block})
	if q := tr2.Quarantined(); len(q) != 1 || !errors.As(q[0], &qe) || qe.Bucket != 3 {
		t.Fatalf("short metadata: quarantined %v", q)
	}
	for key, loc := range s.locs {
		if loc.Bucket == 1 || loc.Bucket == 4 {
			mustRead(t, tr2, loc, s.vals[key])
		}
	}
}

func TestOrphanFiles(t *testing.T) {
	s := newStored(t)
	// Data without metadata: a crash during creation. Removed.
	if err := os.WriteFile(filepath.Join(s.dir, dataName(20)), make([]byte, Block), 0o644); err != nil {
		t.Fatal(err)
	}
	// Metadata without records and without data: removed.
	if err := os.WriteFile(filepath.Join(s.dir, metaName(21)), encodeHeader(metaHeader{Bucket: 21}), 0o644); err != nil {
		t.Fatal(err)
	}
	// A bucket created and crashed before its header was durable: removed.
	if err := os.WriteFile(filepath.Join(s.dir, metaName(22)), []byte("KVTS"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, dataName(22)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Metadata with records whose data file is gone: quarantined.
	if err := os.Remove(s.dataPath(3)); err != nil {
		t.Fatal(err)
	}
	tr := s.reopen(t, 3)
	for _, p := range []string{dataName(20), metaName(21), metaName(22), dataName(22)} {
		if fileExists(filepath.Join(s.dir, p)) {
			t.Fatalf("orphan %s not removed", p)
		}
	}
	if st := tr.Stats(); st.OrphansRemoved != 4 || st.QuarantinedBuckets != 1 {
		t.Fatalf("stats %+v", st)
	}
	if loc := mustPut(t, tr, "x", value(1, 1)); loc.Bucket != 23 {
		t.Fatalf("next bucket %d, want 23 (above every id seen)", loc.Bucket)
	}
}

func TestBucketIDsIncreaseAfterEverythingEvicted(t *testing.T) {
	dir := t.TempDir()
	tr, err := Open(context.Background(), Config{Dir: dir, BucketMaxObjects: 1})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, tr, "a", value(1, 10))
	mustPut(t, tr, "b", value(2, 10))
	tr.SetCapacity(Block)
	if res, err := tr.EvictOnce(context.Background()); err != nil || len(res.Evicted) != 2 {
		t.Fatalf("evict: %+v %v", res, err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	re := openTier(t, Config{Dir: dir})
	if loc := mustPut(t, re, "c", value(3, 10)); loc.Bucket != 3 {
		t.Fatalf("bucket id %d after restart, want 3", loc.Bucket)
	}
}

func TestRecoveredBucketsAreEvictable(t *testing.T) {
	s := newStored(t)
	m := newFakeMaster()
	tr := openTier(t, Config{Dir: s.dir, BucketSize: 4 * Block, Notifier: m})
	tr.SetCapacity(uint64(float64(tr.Stats().Used) / 0.96))
	res, err := tr.EvictOnce(context.Background())
	if err != nil || len(res.Evicted) == 0 || res.Evicted[0] != 1 {
		t.Fatalf("evicted %+v %v, want bucket 1 first", res, err)
	}
	if fileExists(s.dataPath(1)) || fileExists(s.metaPath(1)) {
		t.Fatal("recovered bucket files not deleted")
	}
}

// TestConcurrentPutsRecover checks group commit: Puts from several
// goroutines share fdatasyncs, and every one that returned is recovered.
func TestConcurrentPutsRecover(t *testing.T) {
	dir := t.TempDir()
	tr, err := Open(context.Background(), Config{Dir: dir, BucketMaxObjects: 25})
	if err != nil {
		t.Fatal(err)
	}
	type put struct {
		loc Location
		v   []byte
	}
	const workers, per = 8, 12
	results := make([][]put, workers)
	done := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range per {
				v := value(uint64(w*100+i), 2000+w*300+i)
				loc, err := tr.Put(context.Background(), "t", fmt.Sprintf("%d/%d", w, i), v, Checksum(v))
				if err != nil {
					done <- err
					return
				}
				results[w] = append(results[w], put{loc, v})
			}
			done <- nil
		}()
	}
	for range workers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	re := openTier(t, Config{Dir: dir})
	if n := re.Stats().Objects; n != workers*per {
		t.Fatalf("recovered %d objects, want %d", n, workers*per)
	}
	for _, rs := range results {
		for _, p := range rs {
			mustRead(t, re, p.loc, p.v)
		}
	}
}
