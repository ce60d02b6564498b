package ssd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/ncw/directio"

	"github.com/kvtier/kvtier/kverr"
)

// pieced is ReadPieces for the pieced-read tests: every object of at least
// two pieces is read in pieces.
const pieced = 8

// pieceSizes are object lengths around the pieced-read boundaries: below
// two pieces (one read), exactly two, with a partial tail block, and odd
// lengths whose last full piece is short (with ReadPieces 2, pieces larger
// than readPiece).
var pieceSizes = []int{
	2*readPiece - Block,
	2 * readPiece,
	2*readPiece + 5,
	3*readPiece + Block + 1,
	5*readPiece + 123,
}

func alignedCopy(n int) []byte {
	return directio.AlignedBlock(int(padded(uint64(n))))[:n]
}

func TestPiecedReadRoundTrip(t *testing.T) {
	vals := make([][]byte, len(pieceSizes))
	for i, n := range pieceSizes {
		vals[i] = value(uint64(i), n)
	}
	for _, pieces := range []int{0, 1, 2, MaxReadPieces} {
		t.Run(fmt.Sprint(pieces), func(t *testing.T) { testPiecedRoundTrip(t, pieces, vals) })
	}
}

func testPiecedRoundTrip(t *testing.T, pieces int, vals [][]byte) {
	tr := openTier(t, Config{ReadPieces: pieces})
	for i, v := range vals {
		n := len(v)
		loc := mustPut(t, tr, string(rune('a'+i)), v)
		for name, dst := range map[string][]byte{"aligned": alignedCopy(n), "unaligned": make([]byte, n+1)[1:]} {
			if err := tr.ReadExtent(context.Background(), loc.Bucket, loc.Offset, dst); err != nil {
				t.Fatalf("%d bytes %s: %v", n, name, err)
			}
			if !bytes.Equal(dst, v) {
				t.Fatalf("%d bytes %s: bytes differ", n, name)
			}
		}
	}
}

// TestPiecedReadCorruptPiece flips one byte in each piece in turn (and in
// the partial tail block): the pieced read must refuse every one.
func TestPiecedReadCorruptPiece(t *testing.T) {
	dir := t.TempDir()
	tr := openTier(t, Config{Dir: dir, ReadPieces: pieced})
	n := 3*readPiece + Block + 9
	v := value(3, n)
	loc := mustPut(t, tr, "k", v)
	data, _ := bucketFiles(dir, loc.Bucket)
	f, err := os.OpenFile(data, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flips := []int{0, readPiece - 1, readPiece, 2*readPiece + 17, 3 * readPiece, n - 1}
	for _, at := range flips {
		off := int64(loc.Offset) + int64(at)
		if _, err := f.WriteAt([]byte{v[at] ^ 0x01}, off); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		wantFailedRead(t, tr, loc, alignedCopy(n), kverr.ChecksumMismatch, fmt.Sprintf("byte %d flipped", at))
		if _, err := f.WriteAt([]byte{v[at]}, off); err != nil { // repair
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		mustRead(t, tr, loc, v)
	}
	if st := tr.Stats(); st.ChecksumFailures != uint64(len(flips)) {
		t.Fatalf("ChecksumFailures %d, want %d", st.ChecksumFailures, len(flips))
	}
}

// TestPiecedReadShortFile makes the data file end inside the extent (a
// lost tail): the early pieces read fine, a later one hits EOF, and the
// read must fail as a whole with nothing left in dst.
func TestPiecedReadShortFile(t *testing.T) {
	fi := NewFaultInjector(OSFS{})
	tr := openTier(t, Config{FS: fi, ReadPieces: pieced})
	n := 4*readPiece + 100
	v := value(4, n)
	loc := mustPut(t, tr, "k", v)
	for _, cut := range []int64{readPiece, 3*readPiece + Block, int64(padded(uint64(n))) - Block} {
		fi.ShortFiles(dataSuffix, int64(loc.Offset)+cut)
		wantFailedRead(t, tr, loc, alignedCopy(n), kverr.FileReadFail, fmt.Sprintf("file cut at %d", cut))
	}
	fi.ShortFiles("", 0)
	mustRead(t, tr, loc, v)
	if st := tr.Stats(); st.ReadErrors != 3 {
		t.Fatalf("ReadErrors %d, want 3", st.ReadErrors)
	}
}

// TestPiecedReadSeam checks that every piece goes through the FS seam: a
// read gate sees one read per piece (and one for the tail block).
func TestPiecedReadSeam(t *testing.T) {
	fi := NewFaultInjector(OSFS{})
	tr := openTier(t, Config{FS: fi, ReadPieces: pieced})
	n := 4*readPiece + 1
	v := value(5, n)
	loc := mustPut(t, tr, "k", v)
	gate := fi.HoldReads(dataSuffix)
	defer gate.Release()
	dst := alignedCopy(n)
	done := make(chan error, 1)
	go func() { done <- tr.ReadExtent(context.Background(), loc.Bucket, loc.Offset, dst) }()
	for range 5 { // four pieces and the tail, all in flight at once
		<-gate.Entered()
	}
	select {
	case err := <-done:
		t.Fatalf("ReadExtent returned while its reads were held: %v", err)
	default:
	}
	gate.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, v) {
		t.Fatal("bytes differ")
	}
}
