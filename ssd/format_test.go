package ssd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"testing"
)

// encodeMetaV1 encodes a version 1 metadata file: records, no frames.
func encodeMetaV1(h metaHeader, recs []metaRecord) []byte {
	b := encodeHeaderVersion(h, metaVersion1)
	for _, r := range recs {
		b = appendRecord(b, r)
	}
	return b
}

// encodeMeta encodes a version 2 metadata file with one commit frame per
// record (as sequential Puts write it).
func encodeMeta(h metaHeader, recs []metaRecord) []byte {
	frames := make([]int, len(recs))
	for i := range frames {
		frames[i] = 1
	}
	return encodeFramed(h, recs, frames)
}

// encodeFramed encodes a version 2 file whose frame i holds frames[i]
// records.
func encodeFramed(h metaHeader, recs []metaRecord, frames []int) []byte {
	b := encodeHeader(h)
	for _, n := range frames {
		var body []byte
		for _, r := range recs[:n] {
			body = appendRecord(body, r)
		}
		recs = recs[n:]
		b = appendFrame(b, body, n)
	}
	return b
}

// reencode encodes what decodeMeta returned, in the file's version.
func reencode(d decodedMeta) []byte {
	if d.Version == metaVersion1 {
		return encodeMetaV1(d.Header, d.Records)
	}
	return encodeFramed(d.Header, d.Records, d.Frames)
}

// encoders are both metadata versions, each with the size one more record
// adds (a version 2 record is committed in a frame of its own).
var encoders = []struct {
	name   string
	encode func(metaHeader, []metaRecord) []byte
	extra  int
}{
	{"v1", encodeMetaV1, 0},
	{"v2", encodeMeta, frameHeaderSize},
}

func TestMetadataRoundTrip(t *testing.T) {
	for _, enc := range encoders {
		t.Run(enc.name, func(t *testing.T) { testMetadataRoundTrip(t, enc.encode, enc.extra) })
	}
}

func testMetadataRoundTrip(t *testing.T, encode func(metaHeader, []metaRecord) []byte, extra int) {
	h := metaHeader{Bucket: 42, Created: 1234567890}
	recs := []metaRecord{
		{Tenant: "", Key: "a", Offset: 0, Length: 0, CRC32C: 0},
		{Tenant: "tenant", Key: "key/with/slashes", Offset: Block, Length: 3 * Block, CRC32C: 0xdeadbeef},
		{Tenant: "t", Key: string(make([]byte, 300)), Offset: 4 * Block, Length: 1, CRC32C: 7},
	}
	b := encode(h, recs)
	d, err := decodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if d.Header != h || !slices.Equal(d.Records, recs) || d.Valid != len(b) || !bytes.Equal(reencode(d), b) {
		t.Fatalf("decoded %+v", d)
	}
	if len(encodeHeader(h)) != metaHeaderSize || recordSize("t", "k") != len(appendRecord(nil, metaRecord{Tenant: "t", Key: "k"})) {
		t.Fatal("sizes disagree with the encoding")
	}
	// A zero-filled reserve after the records is not data, not a torn record.
	if d, err := decodeMeta(append(slices.Clone(b), make([]byte, 1000)...)); err != nil || d.Torn || len(d.Records) != 3 || d.Valid != len(b) {
		t.Fatalf("with reserve: %v %+v", err, d)
	}
	// Every cut inside the last record is a torn tail, never an error, also
	// when the reserve follows it.
	for cut := len(b) - 20; cut < len(b); cut++ {
		torn := append(slices.Clone(b[:cut]), make([]byte, 4096)...)
		if d, err := decodeMeta(torn); err != nil || !d.Torn || len(d.Records) != 2 {
			t.Fatalf("cut at %d with reserve: %v %+v", cut, err, d)
		}
	}
	last := len(b) - recordSize(recs[2].Tenant, recs[2].Key) - extra
	for cut := last; cut < len(b); cut++ {
		d, err := decodeMeta(b[:cut])
		if err != nil || len(d.Records) != 2 || d.Valid != last || (cut > last && !d.Torn) {
			t.Fatalf("cut at %d: %v, %d records, valid %d", cut, err, len(d.Records), d.Valid)
		}
	}
}

// TestFrameTornInAnyPage checks the version 2 rule for a commit frame of
// several records torn page by page: whichever of its pages reached the
// disk, the frame is dropped as torn and the frames before it are kept.
func TestFrameTornInAnyPage(t *testing.T) {
	h := metaHeader{Bucket: 7, Created: 1}
	first := []metaRecord{{Tenant: "t", Key: "committed", Offset: 0, Length: 10, CRC32C: 1}}
	var batch []metaRecord
	for i := range 200 { // ~7 KiB of records: the frame spans three pages
		batch = append(batch, metaRecord{Tenant: "tenant", Key: string(rune('a'+i%26)) + "/key-of-some-length", Offset: uint64(i+1) * Block, Length: 5, CRC32C: uint32(i)})
	}
	good := encodeFramed(h, first, []int{1})
	full := encodeFramed(h, append(slices.Clone(first), batch...), []int{1, len(batch)})
	const page = 4096
	pages := (len(full) + page - 1) / page
	for mask := 0; mask < 1<<pages; mask++ {
		// Pages in mask reached the disk; the others kept the zero reserve
		// (the file's first page always holds the header and the first frame).
		img := make([]byte, pages*page+page)
		copy(img, good)
		for pg := range pages {
			if mask&(1<<pg) != 0 {
				lo, hi := pg*page, min((pg+1)*page, len(full))
				copy(img[lo:hi], full[lo:hi])
			}
		}
		d, err := decodeMeta(img)
		if err != nil {
			t.Fatalf("pages %b: %v", mask, err)
		}
		switch {
		case mask == 1<<pages-1:
			if d.Torn || len(d.Records) != 1+len(batch) {
				t.Fatalf("all pages: %d records, torn %v", len(d.Records), d.Torn)
			}
		case len(d.Records) != 1 || d.Valid != len(good) || (!d.Torn && mask&^1 != 0):
			t.Fatalf("pages %b: %d records, valid %d, torn %v", mask, len(d.Records), d.Valid, d.Torn)
		}
	}
}

func TestMetadataCorruption(t *testing.T) {
	for _, enc := range encoders {
		b := enc.encode(metaHeader{Bucket: 1}, []metaRecord{{Key: "a"}, {Key: "b", Offset: Block}})
		for _, tc := range []struct {
			name string
			off  int
			want error
		}{
			{"magic", 0, errMetaHeader},
			{"version", 8, errMetaHeader},
			{"bucket id", 13, errMetaHeader},
			{"header checksum", 30, errMetaHeader},
			{"first record body", metaHeaderSize + 5, errMetaRecord},
			{"first record length", metaHeaderSize + 2, errMetaRecord},
			{"first record key", metaHeaderSize + enc.extra + 28, errMetaRecord},
		} {
			c := slices.Clone(b)
			c[tc.off] ^= 0x40
			if _, err := decodeMeta(c); !errors.Is(err, tc.want) {
				t.Errorf("%s %s: err %v, want %v", enc.name, tc.name, err, tc.want)
			}
		}
		if _, err := decodeMeta(b[:10]); !errors.Is(err, errMetaHeader) {
			t.Errorf("%s short header: %v", enc.name, err)
		}
	}
	// Version 2: a frame header with a valid checksum but impossible fields,
	// and a frame whose records disagree with its count.
	body := appendRecord(nil, metaRecord{Key: "a"})
	bad := appendFrame(encodeHeader(metaHeader{Bucket: 1}), body, 2)
	if _, err := decodeMeta(bad); !errors.Is(err, errMetaRecord) {
		t.Errorf("frame count: %v", err)
	}
	huge := encodeHeader(metaHeader{Bucket: 1})
	huge = binary.LittleEndian.AppendUint32(huge, maxFrameBody+1)
	huge = binary.LittleEndian.AppendUint32(huge, 1)
	huge = binary.LittleEndian.AppendUint32(huge, 0)
	huge = binary.LittleEndian.AppendUint32(huge, crc32.Checksum(huge[metaHeaderSize:], castagnoli))
	if _, err := decodeMeta(huge); !errors.Is(err, errMetaRecord) {
		t.Errorf("huge frame: %v", err)
	}
	// A version this build does not know.
	if _, err := decodeMeta(encodeHeaderVersion(metaHeader{Bucket: 1}, 3)); !errors.Is(err, errMetaHeader) {
		t.Errorf("version 3: %v", err)
	}
}

func TestBucketNames(t *testing.T) {
	for _, id := range []uint64{1, 0xabc, 1<<64 - 1} {
		for _, n := range []string{dataName(id), metaName(id)} {
			got, _, ok := parseBucketName(n)
			if !ok || got != id {
				t.Fatalf("parse %q = %d %v", n, got, ok)
			}
		}
	}
	for _, n := range []string{"b00000000000000001.data", "b000000000000000G.data", "b000000000000000A.meta", "x0000000000000001.meta", "b0000000000000001.tmp", "bucket-ids"} {
		if _, _, ok := parseBucketName(n); ok {
			t.Fatalf("%q parsed as a bucket file", n)
		}
	}
	if next, err := decodeIDs(encodeIDs(77)); err != nil || next != 77 {
		t.Fatalf("ids round trip: %d %v", next, err)
	}
	bad := encodeIDs(77)
	bad[9] ^= 1
	if _, err := decodeIDs(bad); err == nil {
		t.Fatal("corrupt ids file accepted")
	}
}

// FuzzMetadata checks that the metadata decoder never panics, that whatever
// it accepts re-encodes to exactly the bytes it called valid, and that
// records built from the fuzz input round-trip, torn at any point.
func FuzzMetadata(f *testing.F) {
	valid := encodeMeta(metaHeader{Bucket: 3, Created: 99}, []metaRecord{{Tenant: "t", Key: "k", Offset: Block, Length: 10, CRC32C: 5}})
	v1 := encodeMetaV1(metaHeader{Bucket: 3, Created: 99}, []metaRecord{{Tenant: "t", Key: "k", Offset: Block, Length: 10, CRC32C: 5}})
	f.Add(v1, "t", "k", uint64(0), uint64(1), uint32(2), 0)
	f.Add(v1[:len(v1)-2], "t", "k", uint64(0), uint64(1), uint32(2), 5)
	multi := encodeFramed(metaHeader{Bucket: 3}, []metaRecord{{Key: "a"}, {Key: "b", Offset: Block}, {Key: "c", Offset: 2 * Block}}, []int{1, 2})
	f.Add(multi, "x", "y", uint64(Block), uint64(3), uint32(4), 11)
	f.Add(append(slices.Clone(multi[:60]), make([]byte, 30)...), "x", "y", uint64(Block), uint64(3), uint32(4), 2)
	f.Add(valid, "t", "k", uint64(0), uint64(1), uint32(2), 0)
	f.Add(valid[:len(valid)-1], "", "key", uint64(Block), uint64(0), uint32(0), 7)
	f.Add(encodeHeader(metaHeader{}), "tenant", "x", uint64(8*Block), uint64(5*Block), uint32(0xffffffff), 40)
	f.Add(append(slices.Clone(valid), make([]byte, 64)...), "a", "b", uint64(1), uint64(1), uint32(1), 1000)
	f.Add([]byte("KVTSSDM1 garbage"), "a", "b", uint64(1<<63), uint64(1<<63), uint32(1), 3)
	f.Add([]byte{}, "", "", uint64(0), uint64(0), uint32(0), 0)
	f.Fuzz(func(t *testing.T, raw []byte, tenant, key string, off, length uint64, crc uint32, cut int) {
		// 1. Arbitrary bytes.
		d, err := decodeMeta(raw)
		if err == nil {
			if d.Valid < metaHeaderSize || d.Valid > len(raw) {
				t.Fatalf("valid %d outside [%d, %d]", d.Valid, metaHeaderSize, len(raw))
			}
			if re := reencode(d); !bytes.Equal(re, raw[:d.Valid]) {
				t.Fatal("accepted bytes do not re-encode to themselves")
			}
		} else if !errors.Is(err, errMetaHeader) && !errors.Is(err, errMetaRecord) {
			t.Fatalf("unclassified error %v", err)
		}

		// 2. A valid file built from the inputs round-trips.
		if key == "" || len(key) > maxName || len(tenant) > maxName {
			return
		}
		off &^= Block - 1
		if off+padded(length) < off {
			return
		}
		recs := []metaRecord{
			{Tenant: tenant, Key: key, Offset: off, Length: length, CRC32C: crc},
			{Tenant: key, Key: key + tenant, Offset: off / 2 &^ (Block - 1), Length: length / 3, CRC32C: ^crc},
		}
		enc := encodeMeta
		if crc&1 == 0 {
			enc = encodeMetaV1
		} else if crc&2 == 0 {
			enc = func(h metaHeader, r []metaRecord) []byte { return encodeFramed(h, r, []int{len(r)}) }
		}
		b := enc(metaHeader{Bucket: off, Created: int64(length)}, recs)
		d, err = decodeMeta(b)
		if err != nil || !slices.Equal(d.Records, recs) || d.Valid != len(b) {
			t.Fatalf("round trip: %v %+v", err, d)
		}
		// 3. Any truncation after the header is a torn tail: a prefix of the
		// records, never an error.
		if cut < 0 {
			cut = -cut
		}
		n := metaHeaderSize + cut%(len(b)-metaHeaderSize+1)
		d, err = decodeMeta(b[:n])
		if err != nil || !slices.Equal(d.Records, recs[:len(d.Records)]) {
			t.Fatalf("cut at %d: %v %+v", n, err, d)
		}
	})
}
