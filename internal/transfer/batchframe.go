package transfer

import (
	"encoding/binary"
	"fmt"
)

// Batch frames (ops 4 and 5) carry many extents of one Submit to one peer in
// one request and one response; see "Batch frames" in the package
// documentation for the layout.
const (
	opBatchRead  Op = 4 // many extents, server -> client, in one frame
	opBatchWrite Op = 5 // many extents, client -> server, in one frame

	// MaxBatchExtents is the most extents one batch frame may carry.
	MaxBatchExtents = 4096
	// maxBatchNames is the most segment names in a batch frame's table.
	maxBatchNames = 255
	// batchExtentLen is the size of one extent descriptor.
	batchExtentLen = 16
	// maxBatchDescLen bounds a batch frame's descriptor section: a full
	// name table and MaxBatchExtents descriptors.
	maxBatchDescLen = maxBatchNames*(1+MaxNameLen) + MaxBatchExtents*batchExtentLen
)

func (o Op) isBatch() bool { return o == opBatchRead || o == opBatchWrite }

// batchExtent is one extent of a batch frame.
type batchExtent struct {
	name   int // index in the frame's name table
	offset uint64
	length uint64
}

// batchDescLen is the descriptor section's length for names and n extents.
func batchDescLen(names []string, n int) int {
	l := n * batchExtentLen
	for _, s := range names {
		l += 1 + len(s)
	}
	return l
}

// appendBatchDesc appends the descriptor section (the name table, then one
// descriptor per extent) to b.
func appendBatchDesc(b []byte, names []string, exts []batchExtent) []byte {
	for _, s := range names {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	for _, x := range exts {
		b = binary.BigEndian.AppendUint16(b, uint16(x.name))
		b = binary.BigEndian.AppendUint16(b, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(x.length))
		b = binary.BigEndian.AppendUint64(b, x.offset)
	}
	return b
}

// checkBatchHeader validates the counts of a batch request header: nameLen
// is the number of names, bucket the number of extents, offset the
// descriptor section's length, length the payload total.
func checkBatchHeader(h reqHeader) error {
	switch {
	case h.nameLen < 1 || h.nameLen > maxBatchNames:
		return fmt.Errorf("%w: batch name count %d outside 1..%d", errMalformed, h.nameLen, maxBatchNames)
	case h.bucket < 1 || h.bucket > MaxBatchExtents:
		return fmt.Errorf("%w: batch extent count %d outside 1..%d", errMalformed, h.bucket, MaxBatchExtents)
	case h.bucket < uint64(h.nameLen):
		return fmt.Errorf("%w: batch of %d extents names %d segments", errMalformed, h.bucket, h.nameLen)
	case h.length < h.bucket || h.length > MaxFrameLength:
		return fmt.Errorf("%w: batch payload %d outside %d..%d", errMalformed, h.length, h.bucket, MaxFrameLength)
	}
	lo := uint64(h.nameLen)*2 + h.bucket*batchExtentLen
	hi := uint64(h.nameLen)*(1+MaxNameLen) + h.bucket*batchExtentLen
	if h.offset < lo || h.offset > hi {
		return fmt.Errorf("%w: batch descriptor of %d bytes outside %d..%d for %d names and %d extents", errMalformed, h.offset, lo, hi, h.nameLen, h.bucket)
	}
	return nil
}

// parseBatchDesc decodes and validates a batch frame's descriptor section
// against its header (already checked by checkBatchHeader): every name
// 1..255 bytes, every name used, every extent's name index in the table,
// its length 1..64 MiB, its range not overflowing, the lengths summing to
// the header's payload length, nothing left over. It appends to names and
// exts (reused buffers) and returns them. Bounds against the segments are
// the server's next check.
func parseBatchDesc(desc []byte, h reqHeader, names [][]byte, exts []batchExtent) ([][]byte, []batchExtent, error) {
	names, exts = names[:0], exts[:0]
	if uint64(len(desc)) != h.offset {
		return names, exts, fmt.Errorf("batch descriptor of %d bytes, header says %d", len(desc), h.offset)
	}
	p := 0
	for i := range h.nameLen {
		if p >= len(desc) {
			return names, exts, fmt.Errorf("batch name table ends at name %d of %d", i, h.nameLen)
		}
		n := int(desc[p])
		p++
		if n < 1 || p+n > len(desc) {
			return names, exts, fmt.Errorf("batch name %d: length %d outside 1..%d", i, n, min(MaxNameLen, len(desc)-p))
		}
		names = append(names, desc[p:p+n])
		p += n
	}
	if uint64(len(desc)-p) != h.bucket*batchExtentLen {
		return names, exts, fmt.Errorf("batch descriptor has %d bytes for %d extents of %d", len(desc)-p, h.bucket, batchExtentLen)
	}
	used := make([]bool, len(names))
	var total uint64
	for i := range int(h.bucket) {
		d := desc[p : p+batchExtentLen]
		p += batchExtentLen
		x := batchExtent{
			name:   int(binary.BigEndian.Uint16(d[0:])),
			length: uint64(binary.BigEndian.Uint32(d[4:])),
			offset: binary.BigEndian.Uint64(d[8:]),
		}
		switch {
		case x.name >= len(names):
			return names, exts, fmt.Errorf("batch extent %d: name index %d outside the table of %d", i, x.name, len(names))
		case binary.BigEndian.Uint16(d[2:]) != 0:
			return names, exts, fmt.Errorf("batch extent %d: reserved bytes not zero", i)
		case x.length < 1 || x.length > MaxFrameLength:
			return names, exts, fmt.Errorf("batch extent %d: length %d outside 1..%d", i, x.length, MaxFrameLength)
		case x.offset > ^uint64(0)-x.length:
			return names, exts, fmt.Errorf("batch extent %d: offset %d + length %d overflows", i, x.offset, x.length)
		}
		used[x.name] = true
		total += x.length
		if total > h.length {
			return names, exts, fmt.Errorf("batch extents sum past the header's payload length %d at extent %d", h.length, i)
		}
		exts = append(exts, x)
	}
	if total != h.length {
		return names, exts, fmt.Errorf("batch extents sum to %d bytes, header says %d", total, h.length)
	}
	for i, u := range used {
		if !u {
			return names, exts, fmt.Errorf("batch name %d (%q) used by no extent", i, names[i])
		}
	}
	return names, exts, nil
}
