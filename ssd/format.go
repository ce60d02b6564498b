package ssd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/kvtier/kvtier/internal/crc32c"
)

// castagnoli is the CRC32C table; hash/crc32 uses the SSE4.2 / ARMv8 CRC
// instructions for it when the CPU has them. Read-only after init.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C (Castagnoli) of b, the checksum Put expects and
// ReadExtent verifies.
func Checksum(b []byte) uint32 { return crc32c.Checksum(b) }

// Block is the direct-I/O unit: object offsets, data-file writes and reads
// are multiples of Block and start on Block-aligned memory.
const Block = 4096

// padded returns the space an object of n bytes occupies in a data file:
// n rounded up to Block, at least one Block (so every object has its own
// offset, even an empty one).
func padded(n uint64) uint64 {
	if n == 0 {
		return Block
	}
	return (n + Block - 1) &^ (Block - 1)
}

// Metadata file layout (see doc.go for the normative description).
const (
	metaMagic      = "KVTSSDM1"
	metaVersion    = 2 // written by this build
	metaVersion1   = 1 // still read: one record per append, no frames
	metaHeaderSize = 32

	recFixed   = 24 // offset(8) length(8) crc(4) tenantLen(2) keyLen(2)
	maxName    = 1<<16 - 1
	maxRecBody = recFixed + 2*maxName
	// recOverhead is the length prefix plus the trailing record CRC.
	recOverhead = 8
	// maxMetaReserve bounds how far ahead of its records a metadata file is
	// zero-filled (allocated and written once), so appending a record
	// overwrites allocated blocks and its fdatasync needs no journal commit
	// for a size change. The tier uses Capacity/64 within [4 KiB, 64 KiB].
	maxMetaReserve = 64 << 10

	idsMagic = "KVTSSDID"
	idsSize  = 20
)

// metaHeader is the fixed header at the start of every metadata file.
type metaHeader struct {
	Bucket  uint64
	Created int64 // unix nanoseconds, from the tier's clock
}

// metaRecord describes one object of a bucket.
type metaRecord struct {
	Tenant string
	Key    string
	Offset uint64
	Length uint64
	CRC32C uint32
}

// errMetaHeader and errMetaRecord classify decode failures; both mean the
// metadata file is corrupt (quarantine), as opposed to a torn tail.
var (
	errMetaHeader = errors.New("ssd: bad metadata header")
	errMetaRecord = errors.New("ssd: corrupt metadata record")
)

func encodeHeader(h metaHeader) []byte {
	b := make([]byte, metaHeaderSize)
	copy(b[0:8], metaMagic)
	binary.LittleEndian.PutUint16(b[8:10], metaVersion)
	binary.LittleEndian.PutUint16(b[10:12], metaHeaderSize)
	binary.LittleEndian.PutUint64(b[12:20], h.Bucket)
	binary.LittleEndian.PutUint64(b[20:28], uint64(h.Created))
	binary.LittleEndian.PutUint32(b[28:32], crc32.Checksum(b[0:28], castagnoli))
	return b
}

func decodeHeader(b []byte) (metaHeader, error) {
	h, _, err := decodeHeaderVersion(b)
	return h, err
}

// encodeHeaderVersion is encodeHeader with a chosen format version (tests
// write version 1 files with it).
func encodeHeaderVersion(h metaHeader, v uint16) []byte {
	b := encodeHeader(h)
	binary.LittleEndian.PutUint16(b[8:10], v)
	binary.LittleEndian.PutUint32(b[28:32], crc32.Checksum(b[0:28], castagnoli))
	return b
}

func decodeHeaderVersion(b []byte) (metaHeader, int, error) {
	if len(b) < metaHeaderSize {
		return metaHeader{}, 0, fmt.Errorf("%w: %d bytes, need %d", errMetaHeader, len(b), metaHeaderSize)
	}
	if string(b[0:8]) != metaMagic {
		return metaHeader{}, 0, fmt.Errorf("%w: magic %q", errMetaHeader, b[0:8])
	}
	if got, want := binary.LittleEndian.Uint32(b[28:32]), crc32.Checksum(b[0:28], castagnoli); got != want {
		return metaHeader{}, 0, fmt.Errorf("%w: checksum %08x, computed %08x", errMetaHeader, got, want)
	}
	v := binary.LittleEndian.Uint16(b[8:10])
	if v != metaVersion && v != metaVersion1 {
		return metaHeader{}, 0, fmt.Errorf("%w: format version %d, this build reads %d and %d", errMetaHeader, v, metaVersion1, metaVersion)
	}
	if n := binary.LittleEndian.Uint16(b[10:12]); n != metaHeaderSize {
		return metaHeader{}, 0, fmt.Errorf("%w: header length %d", errMetaHeader, n)
	}
	return metaHeader{
		Bucket:  binary.LittleEndian.Uint64(b[12:20]),
		Created: int64(binary.LittleEndian.Uint64(b[20:28])),
	}, int(v), nil
}

// recordSize is the encoded size of a record for tenant and key.
func recordSize(tenant, key string) int {
	return recOverhead + recFixed + len(tenant) + len(key)
}

// appendRecord appends the encoding of r to dst. Tenant and key must be at
// most maxName bytes (Put checks).
func appendRecord(dst []byte, r metaRecord) []byte {
	start := len(dst)
	body := recFixed + len(r.Tenant) + len(r.Key)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(body))
	dst = binary.LittleEndian.AppendUint64(dst, r.Offset)
	dst = binary.LittleEndian.AppendUint64(dst, r.Length)
	dst = binary.LittleEndian.AppendUint32(dst, r.CRC32C)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(r.Tenant)))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(r.Key)))
	dst = append(dst, r.Tenant...)
	dst = append(dst, r.Key...)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// decodedMeta is the result of decoding a whole metadata file.
type decodedMeta struct {
	Header  metaHeader
	Version int // format version of the file: 1 or 2
	Records []metaRecord
	// Frames holds, for a version 2 file, the number of records of each
	// commit frame in file order (nil for version 1).
	Frames []int
	// Valid is the length of the intact prefix (header plus whole records,
	// or whole frames). Bytes after it are the zero-filled reserve or a
	// dropped torn tail.
	Valid int
	// Torn reports that a torn tail (a record, or a commit frame) was
	// dropped.
	Torn bool
}

// decodeMeta decodes a metadata file of either version. Zero bytes after
// the last record or frame are the file's reserve (see maxMetaReserve), not
// data. A bad header is an error wrapping errMetaHeader; a corrupt record
// or frame that cannot be the torn tail is an error wrapping errMetaRecord.
// decodeMeta never panics on any input.
func decodeMeta(b []byte) (decodedMeta, error) {
	h, v, err := decodeHeaderVersion(b)
	if err != nil {
		return decodedMeta{}, err
	}
	d := decodedMeta{Header: h, Version: v, Valid: metaHeaderSize}
	z := len(bytes.TrimRight(b, "\x00")) // end of the non-zero content
	if v == metaVersion1 {
		return decodeRecordsV1(b, z, d)
	}
	return decodeFrames(b, z, d)
}

// recStatus classifies the bytes at the start of a record.
type recStatus int

const (
	recOK     recStatus = iota
	recShort            // the input ends inside the record
	recBadCRC           // the record checksum fails
)

// parseRecord decodes the record at the start of rest. err reports a body
// length out of range or, once the checksum passed, a failing field check;
// otherwise the status says whether the record is whole and intact.
func parseRecord(rest []byte) (r metaRecord, total int, st recStatus, err error) {
	if len(rest) < 4 {
		return r, 0, recShort, nil
	}
	body := int(binary.LittleEndian.Uint32(rest[0:4]))
	if body < recFixed || body > maxRecBody {
		return r, 0, recOK, fmt.Errorf("body length %d", body)
	}
	total = recOverhead + body
	if total > len(rest) {
		return r, total, recShort, nil
	}
	rec := rest[:total]
	if binary.LittleEndian.Uint32(rec[total-4:]) != crc32.Checksum(rec[:total-4], castagnoli) {
		return r, total, recBadCRC, nil
	}
	tl := int(binary.LittleEndian.Uint16(rec[24:26]))
	kl := int(binary.LittleEndian.Uint16(rec[26:28]))
	if recFixed+tl+kl != body {
		return r, total, recOK, fmt.Errorf("tenant %d + key %d bytes do not fill body of %d", tl, kl, body)
	}
	r = metaRecord{
		Offset: binary.LittleEndian.Uint64(rec[4:12]),
		Length: binary.LittleEndian.Uint64(rec[12:20]),
		CRC32C: binary.LittleEndian.Uint32(rec[20:24]),
		Tenant: string(rec[28 : 28+tl]),
		Key:    string(rec[28+tl : 28+tl+kl]),
	}
	switch {
	case r.Key == "":
		return r, total, recOK, errors.New("empty key")
	case r.Offset%Block != 0:
		return r, total, recOK, fmt.Errorf("offset %d not %d-aligned", r.Offset, Block)
	case r.Offset+padded(r.Length) < r.Offset:
		return r, total, recOK, errors.New("extent overflows")
	}
	return r, total, recOK, nil
}

// decodeRecordsV1 decodes the records of a version 1 file, each appended
// (and fdatasync'd) on its own: only the last one can be torn. It is torn
// (dropped, Torn set) when fewer than 4 non-zero bytes remain, when it runs
// past the end of the input, or when it fails its checksum with nothing but
// zeros after it.
func decodeRecordsV1(b []byte, z int, d decodedMeta) (decodedMeta, error) {
	for p := metaHeaderSize; p < z; {
		if z-p < 4 {
			d.Torn = true // not even a whole length field made it
			return d, nil
		}
		r, total, st, err := parseRecord(b[p:])
		switch {
		case err != nil:
			return d, fmt.Errorf("%w at byte %d: %v", errMetaRecord, p, err)
		case st == recShort:
			d.Torn = true // the last record is cut short
			return d, nil
		case st == recBadCRC && p+total >= z:
			d.Torn = true // the last record's bytes did not all reach the disk
			return d, nil
		case st == recBadCRC:
			return d, fmt.Errorf("%w at byte %d: record checksum fails", errMetaRecord, p)
		}
		d.Records = append(d.Records, r)
		p += total
		d.Valid = p
	}
	return d, nil
}

// Version 2 commit frames (see doc.go): a 16-byte frame header, then the
// frame's records encoded as in version 1.
const (
	frameHeaderSize = 16
	// maxFrameBody bounds the records of one frame; a commit with more is
	// written as several frames, each its own write and fdatasync, so one
	// metadata write never exceeds frameHeaderSize + maxFrameBody bytes
	// (plus zeros of a fresh reserve).
	maxFrameBody = 1 << 20
	minRecord    = recOverhead + recFixed + 1
)

// appendFrame appends a frame header for the n encoded records in body,
// then body, to dst.
func appendFrame(dst, body []byte, n int) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(body)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(body, castagnoli))
	dst = binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:start+12], castagnoli))
	return append(dst, body...)
}

// frameAt reports whether an intact frame starts at b[p:], returning its
// body length and record count. A header whose own checksum passes but
// whose fields are impossible is reported through err.
func frameAt(b []byte, p int) (body, n int, headerOK, bodyOK bool, err error) {
	if len(b)-p < frameHeaderSize {
		return 0, 0, false, false, nil
	}
	h := b[p : p+frameHeaderSize]
	if binary.LittleEndian.Uint32(h[12:16]) != crc32.Checksum(h[:12], castagnoli) {
		return 0, 0, false, false, nil
	}
	bl, nr := binary.LittleEndian.Uint32(h[0:4]), binary.LittleEndian.Uint32(h[4:8])
	if bl < minRecord || bl > maxFrameBody || nr == 0 || nr > bl/minRecord {
		return 0, 0, true, false, fmt.Errorf("frame of %d bytes and %d records", bl, nr)
	}
	body, n = int(bl), int(nr)
	end := p + frameHeaderSize + body
	bodyOK = end <= len(b) && binary.LittleEndian.Uint32(h[8:12]) == crc32.Checksum(b[p+frameHeaderSize:end], castagnoli)
	return body, n, true, bodyOK, nil
}

// decodeFrames decodes the commit frames of a version 2 file. A frame is
// written only after the frame before it was fdatasync'd, so only the last
// one can be torn, in any of its pages. The frame at p is torn (dropped with
// everything after it, Torn set) when its header fails its checksum and no
// intact frame starts anywhere after p, when it runs past the end of the
// input, or when its body fails its checksum with nothing but zeros after
// its span. Otherwise a failing frame is corruption.
func decodeFrames(b []byte, z int, d decodedMeta) (decodedMeta, error) {
	for p := metaHeaderSize; p < z; {
		body, n, headerOK, bodyOK, err := frameAt(b, p)
		if err != nil {
			return d, fmt.Errorf("%w at byte %d: %v", errMetaRecord, p, err)
		}
		end := p + frameHeaderSize + body
		switch {
		case !headerOK:
			if q := intactFrameAfter(b, p+1, z); q >= 0 {
				return d, fmt.Errorf("%w at byte %d: frame header fails its checksum, intact frame at byte %d", errMetaRecord, p, q)
			}
			d.Torn = true
			return d, nil
		case end > len(b):
			d.Torn = true // the last frame is cut short
			return d, nil
		case !bodyOK && end >= z:
			d.Torn = true // the last frame's pages did not all reach the disk
			return d, nil
		case !bodyOK:
			return d, fmt.Errorf("%w at byte %d: frame checksum fails", errMetaRecord, p)
		}
		recs := make([]metaRecord, 0, n)
		for q := p + frameHeaderSize; q < end; {
			r, total, st, err := parseRecord(b[q:end])
			if err == nil && st != recOK {
				err = errors.New("record cut or failing its checksum inside an intact frame")
			}
			if err != nil {
				return d, fmt.Errorf("%w at byte %d: %v", errMetaRecord, q, err)
			}
			recs = append(recs, r)
			q += total
		}
		if len(recs) != n {
			return d, fmt.Errorf("%w at byte %d: frame announces %d records, holds %d", errMetaRecord, p, n, len(recs))
		}
		d.Records = append(d.Records, recs...)
		d.Frames = append(d.Frames, n)
		p = end
		d.Valid = p
	}
	return d, nil
}

// intactFrameAfter returns the offset of the first intact frame starting in
// [from, z), or -1.
func intactFrameAfter(b []byte, from, z int) int {
	for q := from; q+frameHeaderSize <= z; q++ {
		if _, _, headerOK, bodyOK, err := frameAt(b, q); headerOK && bodyOK && err == nil {
			return q
		}
	}
	return -1
}

func allZero(b []byte) bool {
	return len(bytes.TrimLeft(b, "\x00")) == 0
}

// encodeIDs encodes the bucket-id high-water file.
func encodeIDs(next uint64) []byte {
	b := make([]byte, idsSize)
	copy(b[0:8], idsMagic)
	binary.LittleEndian.PutUint64(b[8:16], next)
	binary.LittleEndian.PutUint32(b[16:20], crc32.Checksum(b[0:16], castagnoli))
	return b
}

func decodeIDs(b []byte) (uint64, error) {
	if len(b) != idsSize || string(b[0:8]) != idsMagic {
		return 0, errors.New("ssd: bucket-ids file: bad size or magic")
	}
	if binary.LittleEndian.Uint32(b[16:20]) != crc32.Checksum(b[0:16], castagnoli) {
		return 0, errors.New("ssd: bucket-ids file: checksum mismatch")
	}
	return binary.LittleEndian.Uint64(b[8:16]), nil
}

// File names. Bucket files are "b" + 16 lower-case hex digits of the id +
// ".data" or ".meta"; see doc.go.
const (
	dataSuffix    = ".data"
	metaSuffix    = ".meta"
	idsFile       = "bucket-ids"
	idsTmpFile    = "bucket-ids.tmp"
	lockFile      = "LOCK"
	quarantineDir = "quarantine"
)

func dataName(id uint64) string { return fmt.Sprintf("b%016x%s", id, dataSuffix) }
func metaName(id uint64) string { return fmt.Sprintf("b%016x%s", id, metaSuffix) }

// parseBucketName returns the id and kind (dataSuffix or metaSuffix) of a
// bucket file name.
func parseBucketName(name string) (id uint64, kind string, ok bool) {
	if len(name) != 1+16+5 || name[0] != 'b' {
		return 0, "", false
	}
	kind = name[17:]
	if kind != dataSuffix && kind != metaSuffix {
		return 0, "", false
	}
	hex := name[1:17]
	if strings.ToLower(hex) != hex {
		return 0, "", false
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		return 0, "", false
	}
	return id, kind, true
}
