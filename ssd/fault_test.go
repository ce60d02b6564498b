package ssd

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/ncw/directio"

	"github.com/kvtier/kvtier/kverr"
)

func TestDiskFullENOSPC(t *testing.T) {
	fi := NewFaultInjector(OSFS{})
	tr := openTier(t, Config{FS: fi})
	v1 := value(1, 50000)
	l1 := mustPut(t, tr, "one", v1)

	fi.FailWritesAfter(dataSuffix, 2*Block, syscall.ENOSPC) // the next data write is torn, then the disk is full
	v2 := value(2, 50000)
	_, err := tr.Put(context.Background(), "t", "two", v2, Checksum(v2))
	wantCode(t, err, kverr.NoAvailableHandle)
	if !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("error does not say the disk is full: %v", err)
	}
	if _, ok := tr.Lookup("t", "two"); ok {
		t.Fatal("failed Put is indexed")
	}
	mustRead(t, tr, l1, v1) // intact objects keep serving

	// Still full: creating the next bucket fails too, clearly.
	fi.FailWritesAfter("", 0, syscall.ENOSPC)
	_, err = tr.Put(context.Background(), "t", "two", v2, Checksum(v2))
	wantCode(t, err, kverr.NoAvailableHandle)

	fi.FailWritesAfter("", -1, nil) // space freed
	l2 := mustPut(t, tr, "two", v2)
	if l2.Bucket == l1.Bucket {
		t.Fatal("bucket with a failed write kept taking objects")
	}
	mustRead(t, tr, l2, v2)
	if st := tr.Stats(); st.WriteErrors < 2 || st.Objects != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestReadOnlyFileSystem(t *testing.T) {
	dir := t.TempDir()
	fi := NewFaultInjector(OSFS{})
	tr, err := Open(context.Background(), Config{Dir: dir, FS: fi, BucketMaxObjects: 1})
	if err != nil {
		t.Fatal(err)
	}
	v := value(1, 9000)
	loc := mustPut(t, tr, "k", v)

	fi.SetReadOnly(true)
	_, err = tr.Put(context.Background(), "t", "k2", v, Checksum(v))
	wantCode(t, err, kverr.FileWriteFail)
	if !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("error does not say read-only: %v", err)
	}
	mustRead(t, tr, loc, v)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}

	// Opening a tier on a read-only file system recovers and serves; a torn
	// tail cannot be cut off but is still never served.
	fi.SetReadOnly(false)
	patchFile(t, metaPathOf(dir, loc.Bucket), recordsEnd(t, metaPathOf(dir, loc.Bucket)), []byte{9, 9})
	fi.SetReadOnly(true)
	ro := openTier(t, Config{Dir: dir, FS: fi})
	mustRead(t, ro, loc, v)
	if st := ro.Stats(); st.TornRecords != 1 || st.Objects != 1 {
		t.Fatalf("stats %+v", st)
	}
	_, err = ro.Put(context.Background(), "t", "k3", v, Checksum(v))
	wantCode(t, err, kverr.FileWriteFail)
}

func metaPathOf(dir string, id uint64) string { _, m := bucketFiles(dir, id); return m }

func TestReadIOError(t *testing.T) {
	fi := NewFaultInjector(OSFS{})
	tr := openTier(t, Config{FS: fi})
	v := value(1, 3*Block)
	loc := mustPut(t, tr, "k", v)
	fi.FailReads(dataSuffix, syscall.EIO)
	wantFailedRead(t, tr, loc, make([]byte, len(v)), kverr.FileReadFail, "EIO on the data file")
	fi.FailReads("", nil)
	mustRead(t, tr, loc, v)
	if st := tr.Stats(); st.ReadErrors != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestChecksumMismatchNeverReturnsBytes(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, Config{Dir: dir})
	v := value(1, 3*Block+5)
	loc := mustPut(t, tr, "k", v)
	data, _ := bucketFiles(dir, loc.Bucket)
	// Flip one bit on disk behind the tier's back (a media error).
	f, err := os.OpenFile(data, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{v[Block+7] ^ 0x10}
	if _, err := f.WriteAt(b, int64(loc.Offset)+Block+7); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for name, dst := range map[string][]byte{
		"unaligned": make([]byte, len(v)),
		"aligned":   directio.AlignedBlock(int(padded(uint64(len(v)))))[:len(v)],
	} {
		wantFailedRead(t, tr, loc, dst, kverr.ChecksumMismatch, name)
	}
	if st := tr.Stats(); st.ChecksumFailures != 2 || st.BytesRead != 0 {
		t.Fatalf("stats %+v", st)
	}
}
