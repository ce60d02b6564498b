package ssd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// The removals log (see doc.go, "Removals") records every removal the
// master ordered, so that recovery never serves or re-registers an object
// that was removed. Its byte format is specified in doc.go.
const (
	removalsFile    = "removals"
	removalsTmpFile = "removals.tmp"
	removalsMagic   = "KVTSSDRM"
	removalsVersion = 1
	removalsHdrSize = 16

	remDelete = 1 // one object at one location
	remCutoff = 2 // every matching object of buckets below a boundary

	remDeleteFixed = 1 + 8 + 8 + 2 + 2     // kind, bucket, offset, T, K
	remCutoffFixed = 1 + 8 + 8 + 2 + 4 + 4 // kind, before bucket, before offset, T, P, N
	// MaxRemovalPattern bounds a cutoff's pattern (the master refuses
	// longer ones before they reach an appliance).
	MaxRemovalPattern = 4096
	// maxRemovalKeep bounds a cutoff's list of spared objects.
	maxRemovalKeep = 1 << 20
	maxRemBody     = remCutoffFixed + maxName + MaxRemovalPattern + 16*maxRemovalKeep
)

// errRemovals classifies a removals log that is corrupt (as opposed to a
// torn last record).
var errRemovals = errors.New("ssd: corrupt removals log")

// remRecord is one decoded record of the removals log.
type remRecord struct {
	Kind   byte
	Tenant string
	Key    string // delete: the key
	// Before and Off are the removal's point (bucket id, offset): it
	// removes objects stored at locations before it.
	Before, Off   uint64
	Pattern       string // cutoff: RE2, matched against the key ("" matches every key)
	Keep          []Location
	compiledMatch func(string) bool // set by the tier, not encoded
}

func encodeRemovalsHeader() []byte {
	b := make([]byte, removalsHdrSize)
	copy(b, removalsMagic)
	binary.LittleEndian.PutUint16(b[8:10], removalsVersion)
	binary.LittleEndian.PutUint32(b[12:16], crc32.Checksum(b[:12], castagnoli))
	return b
}

// appendRemoval appends the encoding of r. Tenant and key are at most
// maxName bytes, the pattern at most MaxRemovalPattern (callers check).
func appendRemoval(dst []byte, r remRecord) []byte {
	start := len(dst)
	var body int
	if r.Kind == remDelete {
		body = remDeleteFixed + len(r.Tenant) + len(r.Key)
	} else {
		body = remCutoffFixed + len(r.Tenant) + len(r.Pattern) + 16*len(r.Keep)
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(body))
	dst = append(dst, r.Kind)
	if r.Kind == remDelete {
		dst = binary.LittleEndian.AppendUint64(dst, r.Before)
		dst = binary.LittleEndian.AppendUint64(dst, r.Off)
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(r.Tenant)))
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(r.Key)))
		dst = append(dst, r.Tenant...)
		dst = append(dst, r.Key...)
	} else {
		dst = binary.LittleEndian.AppendUint64(dst, r.Before)
		dst = binary.LittleEndian.AppendUint64(dst, r.Off)
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(r.Tenant)))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Pattern)))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(r.Keep)))
		dst = append(dst, r.Tenant...)
		dst = append(dst, r.Pattern...)
		for _, l := range r.Keep {
			dst = binary.LittleEndian.AppendUint64(dst, l.Bucket)
			dst = binary.LittleEndian.AppendUint64(dst, l.Offset)
		}
	}
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// decodedRemovals is a decoded removals log.
type decodedRemovals struct {
	Records []remRecord
	Valid   int  // length of the intact prefix
	Torn    bool // a torn last record was dropped
}

// decodeRemovals decodes a removals log. As for version 1 metadata files,
// records are appended one write (and fdatasync) at a time, so only the
// last can be torn: a record whose length runs past the end of the file, or
// whose CRC fails with nothing but zeros after it, is torn and dropped. Any
// other damage is an error wrapping errRemovals. It never panics.
func decodeRemovals(b []byte) (decodedRemovals, error) {
	var d decodedRemovals
	if len(b) < removalsHdrSize || string(b[:8]) != removalsMagic ||
		binary.LittleEndian.Uint32(b[12:16]) != crc32.Checksum(b[:12], castagnoli) {
		return d, fmt.Errorf("%w: bad header", errRemovals)
	}
	if v := binary.LittleEndian.Uint16(b[8:10]); v != removalsVersion {
		return d, fmt.Errorf("%w: version %d, this build reads %d", errRemovals, v, removalsVersion)
	}
	z := len(b)
	for z > removalsHdrSize && b[z-1] == 0 {
		z--
	}
	p := removalsHdrSize
	d.Valid = p
	for p < z {
		if z-p < 4 {
			d.Torn = true
			return d, nil
		}
		l := int(binary.LittleEndian.Uint32(b[p:]))
		if l < 1 || l > maxRemBody {
			return d, fmt.Errorf("%w: record at %d: body length %d", errRemovals, p, l)
		}
		end := p + 4 + l + 4
		if end > len(b) {
			d.Torn = true
			return d, nil
		}
		if binary.LittleEndian.Uint32(b[p+4+l:]) != crc32.Checksum(b[p:p+4+l], castagnoli) {
			if end >= z {
				d.Torn = true
				return d, nil
			}
			return d, fmt.Errorf("%w: record at %d: checksum", errRemovals, p)
		}
		r, err := parseRemoval(b[p+4 : p+4+l])
		if err != nil {
			return d, fmt.Errorf("%w: record at %d: %v", errRemovals, p, err)
		}
		d.Records = append(d.Records, r)
		p = end
		d.Valid = p
	}
	return d, nil
}

func parseRemoval(body []byte) (remRecord, error) {
	var r remRecord
	r.Kind = body[0]
	switch r.Kind {
	case remDelete:
		if len(body) < remDeleteFixed {
			return r, fmt.Errorf("delete body %d bytes", len(body))
		}
		r.Before = binary.LittleEndian.Uint64(body[1:])
		r.Off = binary.LittleEndian.Uint64(body[9:])
		t, k := int(binary.LittleEndian.Uint16(body[17:])), int(binary.LittleEndian.Uint16(body[19:]))
		if remDeleteFixed+t+k != len(body) || k == 0 {
			return r, fmt.Errorf("delete lengths %d+%d in %d bytes", t, k, len(body))
		}
		r.Tenant = string(body[remDeleteFixed : remDeleteFixed+t])
		r.Key = string(body[remDeleteFixed+t:])
	case remCutoff:
		if len(body) < remCutoffFixed {
			return r, fmt.Errorf("cutoff body %d bytes", len(body))
		}
		r.Before = binary.LittleEndian.Uint64(body[1:])
		r.Off = binary.LittleEndian.Uint64(body[9:])
		t := int(binary.LittleEndian.Uint16(body[17:]))
		pl := uint64(binary.LittleEndian.Uint32(body[19:]))
		n := uint64(binary.LittleEndian.Uint32(body[23:]))
		if pl > MaxRemovalPattern || n > maxRemovalKeep || uint64(remCutoffFixed+t)+pl+16*n != uint64(len(body)) {
			return r, fmt.Errorf("cutoff lengths %d+%d+16*%d in %d bytes", t, pl, n, len(body))
		}
		q := remCutoffFixed
		r.Tenant = string(body[q : q+t])
		q += t
		r.Pattern = string(body[q : q+int(pl)])
		q += int(pl)
		for range n {
			r.Keep = append(r.Keep, Location{Bucket: binary.LittleEndian.Uint64(body[q:]), Offset: binary.LittleEndian.Uint64(body[q+8:])})
			q += 16
		}
	default:
		return r, fmt.Errorf("unknown kind %d", r.Kind)
	}
	return r, nil
}
