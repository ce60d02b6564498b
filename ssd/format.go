package ssd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// castagnoli is the CRC32C table; hash/crc32 uses the SSE4.2 / ARMv8 CRC
// instructions for it when the CPU has them. Read-only after init.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns the CRC32C (Castagnoli) of b, the checksum Put expects and
// ReadExtent verifies.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

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
	metaVersion    = 1
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
	if len(b) < metaHeaderSize {
		return metaHeader{}, fmt.Errorf("%w: %d bytes, need %d", errMetaHeader, len(b), metaHeaderSize)
	}
	if string(b[0:8]) != metaMagic {
		return metaHeader{}, fmt.Errorf("%w: magic %q", errMetaHeader, b[0:8])
	}
	if got, want := binary.LittleEndian.Uint32(b[28:32]), crc32.Checksum(b[0:28], castagnoli); got != want {
		return metaHeader{}, fmt.Errorf("%w: checksum %08x, computed %08x", errMetaHeader, got, want)
	}
	if v := binary.LittleEndian.Uint16(b[8:10]); v != metaVersion {
		return metaHeader{}, fmt.Errorf("%w: format version %d, this build reads %d", errMetaHeader, v, metaVersion)
	}
	if n := binary.LittleEndian.Uint16(b[10:12]); n != metaHeaderSize {
		return metaHeader{}, fmt.Errorf("%w: header length %d", errMetaHeader, n)
	}
	return metaHeader{
		Bucket:  binary.LittleEndian.Uint64(b[12:20]),
		Created: int64(binary.LittleEndian.Uint64(b[20:28])),
	}, nil
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
	Records []metaRecord
	// Valid is the length of the intact prefix (header plus whole records).
	// Bytes after it are the zero-filled reserve or a dropped torn record.
	Valid int
	// Torn reports that a torn trailing record was dropped.
	Torn bool
}

// decodeMeta decodes a metadata file. Zero bytes after the last record are
// the file's reserve (see maxMetaReserve), not data. A bad header, or a record
// that fails its checks while non-zero bytes follow its span, is corruption
// (an error wrapping errMetaHeader or errMetaRecord). The last record is torn
// (dropped, Torn set) when fewer than 4 non-zero bytes remain, when it runs
// past the end of the input, or when it fails its checksum with nothing but
// zeros after it. decodeMeta never panics on any input.
func decodeMeta(b []byte) (decodedMeta, error) {
	h, err := decodeHeader(b)
	if err != nil {
		return decodedMeta{}, err
	}
	d := decodedMeta{Header: h, Valid: metaHeaderSize}
	z := len(bytes.TrimRight(b, "\x00")) // end of the non-zero content
	p := metaHeaderSize
	for p < z {
		rest := b[p:]
		if z-p < 4 {
			d.Torn = true // not even a whole length field made it
			return d, nil
		}
		body := int(binary.LittleEndian.Uint32(rest[0:4]))
		if body < recFixed || body > maxRecBody {
			return d, fmt.Errorf("%w at byte %d: body length %d", errMetaRecord, p, body)
		}
		total := recOverhead + body
		if total > len(rest) {
			d.Torn = true // the last record is cut short
			return d, nil
		}
		rec := rest[:total]
		if got, want := binary.LittleEndian.Uint32(rec[total-4:]), crc32.Checksum(rec[:total-4], castagnoli); got != want {
			if p+total >= z {
				d.Torn = true // the last record's bytes did not all reach the disk
				return d, nil
			}
			return d, fmt.Errorf("%w at byte %d: checksum %08x, computed %08x", errMetaRecord, p, got, want)
		}
		tl := int(binary.LittleEndian.Uint16(rec[24:26]))
		kl := int(binary.LittleEndian.Uint16(rec[26:28]))
		if recFixed+tl+kl != body {
			return d, fmt.Errorf("%w at byte %d: tenant %d + key %d bytes do not fill body of %d", errMetaRecord, p, tl, kl, body)
		}
		r := metaRecord{
			Offset: binary.LittleEndian.Uint64(rec[4:12]),
			Length: binary.LittleEndian.Uint64(rec[12:20]),
			CRC32C: binary.LittleEndian.Uint32(rec[20:24]),
			Tenant: string(rec[28 : 28+tl]),
			Key:    string(rec[28+tl : 28+tl+kl]),
		}
		if r.Key == "" {
			return d, fmt.Errorf("%w at byte %d: empty key", errMetaRecord, p)
		}
		if r.Offset%Block != 0 {
			return d, fmt.Errorf("%w at byte %d: offset %d not %d-aligned", errMetaRecord, p, r.Offset, Block)
		}
		if r.Offset+padded(r.Length) < r.Offset {
			return d, fmt.Errorf("%w at byte %d: extent overflows", errMetaRecord, p)
		}
		d.Records = append(d.Records, r)
		p += total
		d.Valid = p
	}
	return d, nil
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
