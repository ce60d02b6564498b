package ssd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// noAutoCommit keeps PutAsync's records queued until Sync, Put or Close.
func noAutoCommit(dir string) Config {
	return Config{Dir: dir, CommitInterval: time.Hour, CommitBytes: 1 << 40}
}

func mustPutAsync(t testing.TB, tr *Tier, key string, v []byte) *Pending {
	t.Helper()
	p, err := tr.PutAsync(context.Background(), "t", key, v, Checksum(v))
	if err != nil {
		t.Fatalf("PutAsync %s: %v", key, err)
	}
	return p
}

func mustWait(t testing.TB, p *Pending) Location {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	loc, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	return loc
}

func isDone(p *Pending) bool {
	select {
	case <-p.Done():
		return true
	default:
		return false
	}
}

func readMetaFile(t testing.TB, path string) decodedMeta {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := decodeMeta(raw)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// crash drops the tier's directory lock as a dying process would, leaving
// everything else as it is: queued records are never committed before the
// directory is reopened (the crashed tier is closed at test end).
func crash(t *testing.T, tr *Tier) {
	t.Helper()
	t.Cleanup(func() { tr.Close() })
	if err := tr.lock.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestPutAsyncInvisibleUntilCommit(t *testing.T) {
	ctx := context.Background()
	tr := openTier(t, noAutoCommit(""))
	v := value(1, 9000)
	p := mustPutAsync(t, tr, "k", v)
	if isDone(p) {
		t.Fatal("Pending done before any commit")
	}
	loc := p.Location()
	if _, ok := tr.Lookup("t", "k"); ok || len(tr.Objects()) != 0 || tr.Stats().Objects != 0 {
		t.Fatal("uncommitted object is indexed")
	}
	wantCode(t, tr.ReadExtent(ctx, loc.Bucket, loc.Offset, make([]byte, len(v))), kverr.ObjectNotFound)
	// The same key again waits for the first copy's commit.
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err := tr.PutAsync(short, "t", "k", v, Checksum(v))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second PutAsync of an uncommitted key: %v", err)
	}
	if err := tr.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if !isDone(p) || mustWait(t, p) != loc {
		t.Fatal("Sync did not complete the Pending")
	}
	mustRead(t, tr, loc, v)
	again := mustPutAsync(t, tr, "k", v)
	if !isDone(again) || mustWait(t, again) != loc {
		t.Fatal("already stored object: Pending not done or elsewhere")
	}
	if st := tr.Stats(); st.Puts != 1 || st.Objects != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestGroupCommitOneFrame(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, noAutoCommit(dir))
	var ps []*Pending
	for i := range 5 {
		ps = append(ps, mustPutAsync(t, tr, fmt.Sprint(i), value(uint64(i), 5000)))
	}
	if err := tr.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		mustWait(t, p)
	}
	_, meta := bucketFiles(dir, ps[0].Location().Bucket)
	if d := readMetaFile(t, meta); d.Version != metaVersion || !slices.Equal(d.Frames, []int{5}) {
		t.Fatalf("version %d frames %v, want one frame of 5 records", d.Version, d.Frames)
	}
	if st := tr.Stats(); st.Commits != 1 || st.Puts != 5 {
		t.Fatalf("stats %+v, want 5 Puts in 1 commit", st)
	}
	// Sync with nothing queued returns at once.
	if err := tr.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestPutAsyncCrashBeforeCommit(t *testing.T) {
	dir := t.TempDir()
	crashed, err := Open(context.Background(), noAutoCommit(dir))
	if err != nil {
		t.Fatal(err)
	}
	va, vb := value(1, 20000), value(2, 30000)
	la := mustPut(t, crashed, "a", va) // Put commits at once
	p := mustPutAsync(t, crashed, "b", vb)
	crash(t, crashed)
	re := openTier(t, Config{Dir: dir})
	mustRead(t, re, la, va)
	if _, ok := re.Lookup("t", "b"); ok || len(re.Objects()) != 1 {
		t.Fatal("an object whose commit never ran was recovered")
	}
	if isDone(p) {
		t.Fatal("Pending done without a commit")
	}
}

func TestGroupCommitRecoversAfterCrash(t *testing.T) {
	dir := t.TempDir()
	crashed, err := Open(context.Background(), noAutoCommit(dir))
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string][]byte{}
	locs := map[string]Location{}
	for i := range 12 {
		k := fmt.Sprint(i)
		vals[k] = value(uint64(i), 1000+i*700)
		p := mustPutAsync(t, crashed, k, vals[k])
		if i%5 == 4 {
			if err := crashed.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		locs[k] = p.Location()
	}
	if err := crashed.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	crash(t, crashed)
	re := openTier(t, Config{Dir: dir})
	for k, loc := range locs {
		mustRead(t, re, loc, vals[k])
	}
}

func TestCloseCommitsQueued(t *testing.T) {
	dir := t.TempDir()
	tr, err := Open(context.Background(), noAutoCommit(dir))
	if err != nil {
		t.Fatal(err)
	}
	v := value(1, 7000)
	p := mustPutAsync(t, tr, "k", v)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	loc := mustWait(t, p)
	wantCode(t, tr.Sync(context.Background()), kverr.UnavailableInCurrentStatus)
	re := openTier(t, Config{Dir: dir})
	mustRead(t, re, loc, v)
}

func TestCommitTriggers(t *testing.T) {
	t.Run("bytes", func(t *testing.T) {
		tr := openTier(t, Config{CommitInterval: time.Hour, CommitBytes: 3 * Block})
		var ps []*Pending
		for i := range 3 {
			ps = append(ps, mustPutAsync(t, tr, fmt.Sprint(i), value(uint64(i), Block)))
		}
		for _, p := range ps {
			mustWait(t, p) // no Sync: the third object reached CommitBytes
		}
	})
	t.Run("interval", func(t *testing.T) {
		tr := openTier(t, Config{CommitInterval: time.Millisecond, CommitBytes: 1 << 40})
		for i := range 3 {
			v := value(uint64(i), 100)
			loc := mustWait(t, mustPutAsync(t, tr, fmt.Sprint(i), v))
			mustRead(t, tr, loc, v)
		}
	})
}

func TestCommitDataSyncFails(t *testing.T) {
	dir := t.TempDir()
	fi := NewFaultInjector(OSFS{})
	cfg := noAutoCommit(dir)
	cfg.FS = fi
	tr, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	v1 := value(1, 5000)
	l1 := mustPut(t, tr, "one", v1)
	fi.FailSyncs(dataSuffix, syscall.EIO)
	p2 := mustPutAsync(t, tr, "two", value(2, 6000))
	p3 := mustPutAsync(t, tr, "three", value(3, 7000))
	wantCode(t, tr.Sync(context.Background()), kverr.FileWriteFail)
	for _, p := range []*Pending{p2, p3} {
		_, err := p.Wait(context.Background())
		wantCode(t, err, kverr.FileWriteFail)
	}
	if _, ok := tr.Lookup("t", "two"); ok {
		t.Fatal("object whose data sync failed is indexed")
	}
	_, meta := bucketFiles(dir, l1.Bucket)
	if d := readMetaFile(t, meta); len(d.Records) != 1 {
		t.Fatalf("records written after a failed data sync: %d", len(d.Records))
	}
	fi.FailSyncs("", nil)
	v4 := value(4, 3000)
	l4 := mustPut(t, tr, "two", v4)
	if l4.Bucket == l1.Bucket {
		t.Fatal("bucket with a failed commit kept taking objects")
	}
	mustRead(t, tr, l1, v1)
	if st := tr.Stats(); st.WriteErrors != 2 || st.Objects != 2 {
		t.Fatalf("stats %+v", st)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	re := openTier(t, Config{Dir: dir})
	mustRead(t, re, l1, v1)
	mustRead(t, re, l4, v4)
	if _, ok := re.Lookup("t", "three"); ok {
		t.Fatal("object whose commit failed recovered")
	}
}

func TestCommitTornFrameViaFaultInjector(t *testing.T) {
	dir := t.TempDir()
	fi := NewFaultInjector(OSFS{})
	cfg := noAutoCommit(dir)
	cfg.FS = fi
	tr, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	v1 := value(1, 5000)
	l1 := mustPut(t, tr, "one", v1)
	fi.FailWritesAfter(metaSuffix, 30, syscall.EIO) // the next frame is torn after 30 bytes
	p2 := mustPutAsync(t, tr, "two", value(2, 6000))
	p3 := mustPutAsync(t, tr, "three", value(3, 6000))
	wantCode(t, tr.Sync(context.Background()), kverr.FileWriteFail)
	for _, p := range []*Pending{p2, p3} {
		_, err := p.Wait(context.Background())
		wantCode(t, err, kverr.FileWriteFail)
	}
	fi.FailWritesAfter("", -1, nil)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	re := openTier(t, Config{Dir: dir})
	mustRead(t, re, l1, v1)
	if st := re.Stats(); st.TornRecords != 1 || st.Objects != 1 || st.QuarantinedBuckets != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestTornFrameOnDisk damages the last commit frame of a bucket in the
// ways a crash during its write can (header page lost, body page lost, cut
// short) and checks that recovery drops exactly that frame; damage to an
// earlier frame quarantines the bucket.
func TestTornFrameOnDisk(t *testing.T) {
	build := func(t *testing.T) (dir string, first, second map[string]Location, vals map[string][]byte, frame2 int64) {
		dir = t.TempDir()
		tr, err := Open(context.Background(), noAutoCommit(dir))
		if err != nil {
			t.Fatal(err)
		}
		first, second, vals = map[string]Location{}, map[string]Location{}, map[string][]byte{}
		for i := range 3 {
			k := fmt.Sprintf("first-%d", i)
			vals[k] = value(uint64(i), 2000)
			first[k] = mustPutAsync(t, tr, k, vals[k]).Location()
		}
		if err := tr.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, meta := bucketFiles(dir, 1)
		frame2 = int64(readMetaFile(t, meta).Valid)
		for i := range 150 { // about 8 KiB of records: the frame spans pages
			k := fmt.Sprintf("second-%03d-with-a-longer-key-name", i)
			vals[k] = value(uint64(100+i), 100)
			second[k] = mustPutAsync(t, tr, k, vals[k]).Location()
		}
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
		return dir, first, second, vals, frame2
	}
	for _, tc := range []struct {
		name  string
		patch func(t *testing.T, meta string, frame2 int64)
	}{
		{"header lost", func(t *testing.T, meta string, f int64) { patchFile(t, meta, f, make([]byte, frameHeaderSize)) }},
		{"middle page lost", func(t *testing.T, meta string, f int64) { patchFile(t, meta, f+4096, make([]byte, 4096)) }},
		{"cut short", func(t *testing.T, meta string, f int64) {
			if err := os.Truncate(meta, f+5000); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, first, second, vals, frame2 := build(t)
			_, meta := bucketFiles(dir, 1)
			tc.patch(t, meta, frame2)
			re := openTier(t, Config{Dir: dir})
			for k, loc := range first {
				mustRead(t, re, loc, vals[k])
			}
			for k := range second {
				if _, ok := re.Lookup("t", k); ok {
					t.Fatalf("%s of the torn frame recovered", k)
				}
			}
			if st := re.Stats(); st.TornRecords != 1 || st.QuarantinedBuckets != 0 {
				t.Fatalf("stats %+v", st)
			}
			if fi, _ := os.Stat(meta); fi.Size() != frame2 {
				t.Fatalf("torn frame not cut: %d bytes, frames end at %d", fi.Size(), frame2)
			}
		})
	}
	t.Run("earlier frame corrupt", func(t *testing.T) {
		dir, _, _, _, _ := build(t)
		_, meta := bucketFiles(dir, 1)
		patchFile(t, meta, metaHeaderSize+frameHeaderSize+40, []byte{0xff})
		re := openTier(t, Config{Dir: dir})
		if q := re.Quarantined(); len(q) != 1 {
			t.Fatalf("quarantined %v, want bucket 1", q)
		}
	})
}

// TestVersion1BucketRead checks that a bucket written by the version 1
// format (one record per append) is recovered, its torn last record dropped,
// while new buckets are written as version 2.
func TestVersion1BucketRead(t *testing.T) {
	dir := t.TempDir()
	data, meta := bucketFiles(dir, 3)
	va, vb := value(1, 5000), value(2, 100)
	img := make([]byte, 3*Block)
	copy(img, va)
	copy(img[2*Block:], vb)
	if err := os.WriteFile(data, img, 0o644); err != nil {
		t.Fatal(err)
	}
	recs := []metaRecord{
		{Tenant: "t", Key: "a", Offset: 0, Length: uint64(len(va)), CRC32C: Checksum(va)},
		{Tenant: "t", Key: "b", Offset: 2 * Block, Length: uint64(len(vb)), CRC32C: Checksum(vb)},
	}
	file := encodeMetaV1(metaHeader{Bucket: 3, Created: 1}, recs)
	torn := appendRecord(nil, metaRecord{Tenant: "t", Key: "ghost", Offset: 3 * Block, Length: 1, CRC32C: 1})
	file = append(file, torn[:len(torn)-5]...)
	if err := os.WriteFile(meta, append(file, make([]byte, Block)...), 0o644); err != nil {
		t.Fatal(err)
	}
	tr := openTier(t, Config{Dir: dir})
	mustRead(t, tr, Location{Bucket: 3, Offset: 0, Length: uint64(len(va))}, va)
	mustRead(t, tr, Location{Bucket: 3, Offset: 2 * Block, Length: uint64(len(vb))}, vb)
	if st := tr.Stats(); st.Objects != 2 || st.TornRecords != 1 {
		t.Fatalf("stats %+v", st)
	}
	loc := mustPut(t, tr, "c", value(3, 10))
	_, newMeta := bucketFiles(dir, loc.Bucket)
	if loc.Bucket != 4 || readMetaFile(t, newMeta).Version != metaVersion {
		t.Fatalf("new object in bucket %d, want 4 with a version %d file", loc.Bucket, metaVersion)
	}
}

// TestConcurrentPutAsyncAndSync runs writers, Syncs and readers at once
// (meant for -race) and checks that every object a Pending reported durable
// is recovered with its bytes.
func TestConcurrentPutAsyncAndSync(t *testing.T) {
	dir := t.TempDir()
	tr, err := Open(context.Background(), Config{Dir: dir, BucketSize: 32 * Block, BucketMaxObjects: 10,
		CommitInterval: 2 * time.Millisecond, CommitBytes: 8 * Block})
	if err != nil {
		t.Fatal(err)
	}
	const workers, per = 4, 30
	var mu sync.Mutex
	var durable []durablePut
	var wg sync.WaitGroup
	errs := make(chan error, workers*per+1)
	for w := range workers {
		wg.Go(func() {
			var mine []*Pending
			var vals [][]byte
			for i := range per {
				v := value(uint64(w*1000+i), 500+i*131)
				p, err := tr.PutAsync(context.Background(), "t", fmt.Sprintf("%d/%d", w, i), v, Checksum(v))
				if err != nil {
					errs <- err
					return
				}
				mine, vals = append(mine, p), append(vals, v)
				if i%7 == 0 {
					if err := tr.Sync(context.Background()); err != nil {
						errs <- err
						return
					}
				}
			}
			for i, p := range mine {
				loc, err := p.Wait(context.Background())
				if err != nil {
					errs <- err
					return
				}
				got := make([]byte, len(vals[i]))
				if err := tr.ReadExtent(context.Background(), loc.Bucket, loc.Offset, got); err != nil || string(got) != string(vals[i]) {
					errs <- fmt.Errorf("read back %+v: %v", loc, err)
					return
				}
				mu.Lock()
				durable = append(durable, durablePut{loc, vals[i]})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	crashAndRecoverAll(t, tr, dir, durable)
}

// TestPreallocatedTail checks that a data file is allocated ahead of its
// objects while the bucket takes writes, and that Close and, after a crash,
// recovery cut the tail past the last committed object.
func TestPreallocatedTail(t *testing.T) {
	size := func(path string) int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	dir := t.TempDir()
	tr, err := Open(context.Background(), Config{Dir: dir, BucketSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	v := value(1, 3*Block+1)
	loc := mustPut(t, tr, "a", v)
	data, _ := bucketFiles(dir, loc.Bucket)
	if got := size(data); got != 1<<20 {
		t.Fatalf("data file %d bytes while open, want the bucket's 1 MiB allocated", got)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if got := size(data); got != 4*Block {
		t.Fatalf("data file %d bytes after Close, want %d", got, 4*Block)
	}

	// A crash leaves the allocated tail and an uncommitted object's bytes;
	// recovery cuts both.
	crashed, err := Open(context.Background(), Config{Dir: dir, BucketSize: 1 << 20, CommitInterval: time.Hour, CommitBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	l2 := mustPut(t, crashed, "b", v)
	mustPutAsync(t, crashed, "c", value(3, 2*Block))
	crash(t, crashed)
	data2, _ := bucketFiles(dir, l2.Bucket)
	re := openTier(t, Config{Dir: dir})
	if got := size(data2); got != 4*Block {
		t.Fatalf("data file %d bytes after recovery, want %d", got, 4*Block)
	}
	mustRead(t, re, loc, v)
	mustRead(t, re, l2, v)
	if _, ok := re.Lookup("t", "c"); ok {
		t.Fatal("uncommitted object recovered")
	}
}

// TestCommitSplitsLargeBatches checks that a commit with more than
// maxFrameBody bytes of records for one bucket is written as several
// frames, each within the bound recovery relies on.
func TestCommitSplitsLargeBatches(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, noAutoCommit(dir))
	long := string(make([]byte, 60000))
	var ps []*Pending
	for i := range 20 { // 20 records of ~60 KB: 1.2 MB
		ps = append(ps, mustPutAsync(t, tr, fmt.Sprintf("%s%02d", long, i), value(uint64(i), 10)))
	}
	if err := tr.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		mustWait(t, p)
	}
	_, meta := bucketFiles(dir, ps[0].Location().Bucket)
	d := readMetaFile(t, meta)
	if len(d.Frames) != 2 || d.Frames[0]+d.Frames[1] != 20 || len(d.Records) != 20 {
		t.Fatalf("frames %v, want 20 records in 2 frames", d.Frames)
	}
	if st := tr.Stats(); st.Commits != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestChecksumVerifiedWhileWriting covers large values whose checksum is
// verified during their write: a mismatch still stores nothing and gives
// the space back, also for a key that is already stored.
func TestChecksumVerifiedWhileWriting(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, Config{Dir: dir})
	ctx := context.Background()
	first := value(1, 300<<10)
	l1 := mustPut(t, tr, "first", first) // opens the bucket: verified before writing
	before := tr.Stats()
	bad := value(2, 300<<10)
	_, err := tr.Put(ctx, "t", "bad", bad, Checksum(bad)^1)
	wantCode(t, err, kverr.ChecksumMismatch)
	_, err = tr.Put(ctx, "t", "first", bad, Checksum(first)) // stored key, wrong bytes
	wantCode(t, err, kverr.ChecksumMismatch)
	if after := tr.Stats(); after.Used != before.Used || after.Objects != 1 || after.Buckets != 1 || after.Puts != 1 {
		t.Fatalf("a value failing its checksum changed the tier: %+v, before %+v", after, before)
	}
	if _, ok := tr.Lookup("t", "bad"); ok {
		t.Fatal("value failing its checksum is indexed")
	}
	good := value(3, 300<<10)
	l3 := mustPut(t, tr, "good", good)
	if l3.Bucket != l1.Bucket || l3.Offset != padded(uint64(len(first))) {
		t.Fatalf("next object at %+v, want the failed value's offset %d given back", l3, padded(uint64(len(first))))
	}
	mustRead(t, tr, l3, good)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	re := openTier(t, Config{Dir: dir})
	mustRead(t, re, l1, first)
	mustRead(t, re, l3, good)
	if n := re.Stats().Objects; n != 2 {
		t.Fatalf("recovered %d objects, want 2", n)
	}
}

// TestPutMixedWithPutAsync runs Puts (each waiting for its own commit)
// beside PutAsync streams and Syncs, all on small buckets, then crashes:
// every object whose Put returned or whose Pending completed must be
// recovered intact, with no torn or quarantined bucket.
func TestPutMixedWithPutAsync(t *testing.T) {
	dir := t.TempDir()
	tr, err := Open(context.Background(), Config{Dir: dir, BucketSize: 32 * Block, BucketMaxObjects: 10,
		CommitInterval: time.Hour, CommitBytes: 1 << 40}) // rounds come from Put and Sync only
	if err != nil {
		t.Fatal(err)
	}
	const workers, per = 4, 24
	var mu sync.Mutex
	var durable []durablePut
	var wg sync.WaitGroup
	errs := make(chan error, workers*per)
	for w := range workers {
		wg.Go(func() {
			var mine []*Pending
			var vals [][]byte
			for i := range per {
				v := value(uint64(w*1000+i), 700+i*97)
				key := fmt.Sprintf("%d/%d", w, i)
				if (w+i)%2 == 0 {
					loc, err := tr.Put(context.Background(), "t", key, v, Checksum(v))
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					durable = append(durable, durablePut{loc, v})
					mu.Unlock()
					continue
				}
				p, err := tr.PutAsync(context.Background(), "t", key, v, 0)
				if err != nil {
					errs <- err
					return
				}
				mine, vals = append(mine, p), append(vals, v)
				if i%5 == 0 {
					if err := tr.Sync(context.Background()); err != nil {
						errs <- err
						return
					}
				}
			}
			if err := tr.Sync(context.Background()); err != nil {
				errs <- err
				return
			}
			for i, p := range mine {
				if !isDone(p) {
					errs <- fmt.Errorf("Pending %d of worker %d not done after Sync", i, w)
					return
				}
				loc, err := p.Wait(context.Background())
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				durable = append(durable, durablePut{loc, vals[i]})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	crashAndRecoverAll(t, tr, dir, durable)
}

// durablePut is an object whose Put returned or whose Pending completed.
type durablePut struct {
	loc Location
	v   []byte
}

// crashAndRecoverAll checks tr, crashes it, reopens dir and requires every
// durable object back intact: exactly those objects, nothing torn or
// quarantined.
func crashAndRecoverAll(t *testing.T, tr *Tier, dir string, durable []durablePut) {
	t.Helper()
	checkInvariants(t, tr)
	crash(t, tr)
	re := openTier(t, Config{Dir: dir})
	if st := re.Stats(); st.Objects != len(durable) || st.QuarantinedBuckets != 0 || st.TornRecords != 0 {
		t.Fatalf("recovered %+v, want %d objects, nothing torn or quarantined", st, len(durable))
	}
	for _, p := range durable {
		mustRead(t, re, p.loc, p.v)
	}
}
