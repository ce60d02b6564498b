package transfer

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// Direct-put frames (op 6) carry puts to a node that places them itself;
// see "Direct puts" in the package documentation for the layout.
const (
	opPut Op = 6

	// MaxDirectPuts is the most puts one direct-put frame may carry.
	MaxDirectPuts = 4096
	// MaxDirectPutKey is the longest key a direct-put frame carries.
	MaxDirectPutKey = 4096
	// putDescFixed is a put descriptor without its key and segment name.
	putDescFixed = 20
	// maxPutDescLen bounds the descriptor section.
	maxPutDescLen = 4 << 20
	// putResultFixed is a result without its message.
	putResultFixed = 4
)

// DirectPut is one put of a direct-put frame: what PutStart needs, but
// the client, tenant and replica count (one MEMORY replica, on the node
// the frame goes to).
type DirectPut struct {
	Key              string
	Size             uint64
	CRC32C           uint32
	SoftPin, HardPin bool
	SoftPinTTL       time.Duration // 0: the master's default; whole ms on the wire
	PreferredSegment string        // one of the node's segments, or ""
}

const (
	putFlagSoftPin = 1 << 0
	putFlagHardPin = 1 << 1
)

// checkPutHeader validates a direct-put frame's header (fields read as
// ticket length, count, descriptor and payload lengths).
func checkPutHeader(h reqHeader) error {
	k, d := h.bucket, h.offset
	switch {
	case h.grant:
		return fmt.Errorf("%w: direct-put frame of version 2", errMalformed)
	case h.nameLen < 1 || h.nameLen > grant.MaxTicketSize:
		return fmt.Errorf("%w: put ticket length %d outside 1..%d", errMalformed, h.nameLen, grant.MaxTicketSize)
	case k < 1 || k > MaxDirectPuts:
		return fmt.Errorf("%w: %d puts outside 1..%d", errMalformed, k, MaxDirectPuts)
	case d < k*(putDescFixed+1) || d > maxPutDescLen:
		return fmt.Errorf("%w: put descriptor section of %d bytes for %d puts", errMalformed, d, k)
	case h.length < k || h.length > MaxFrameLength:
		return fmt.Errorf("%w: put payload of %d bytes for %d puts (at most %d)", errMalformed, h.length, k, MaxFrameLength)
	}
	return nil
}

// putDescsLen is the descriptor section's length for puts.
func putDescsLen(puts []DirectPut) int {
	n := 0
	for i := range puts {
		n += putDescFixed + len(puts[i].Key) + len(puts[i].PreferredSegment)
	}
	return n
}

// checkPuts validates puts on the sending side, before anything is sent.
func checkPuts(puts []DirectPut, values [][]byte) (uint64, error) {
	if len(puts) < 1 || len(puts) > MaxDirectPuts || len(values) != len(puts) {
		return 0, kverr.New(kverr.InvalidParams, "", "direct put: %d puts, %d values (1..%d)", len(puts), len(values), MaxDirectPuts)
	}
	var total uint64
	for i := range puts {
		p := &puts[i]
		switch {
		case len(p.Key) < 1 || len(p.Key) > MaxDirectPutKey:
			return 0, kverr.New(kverr.InvalidParams, p.Key, "direct put: key of %d bytes (1..%d)", len(p.Key), MaxDirectPutKey)
		case len(p.PreferredSegment) > MaxNameLen:
			return 0, kverr.New(kverr.InvalidParams, p.Key, "direct put: segment name of %d bytes", len(p.PreferredSegment))
		case p.Size == 0 || p.Size != uint64(len(values[i])):
			return 0, kverr.New(kverr.InvalidParams, p.Key, "direct put: size %d, value of %d bytes", p.Size, len(values[i]))
		case p.SoftPinTTL < 0 || p.SoftPinTTL.Milliseconds() > 1<<32-1:
			return 0, kverr.New(kverr.InvalidParams, p.Key, "direct put: soft-pin TTL %v", p.SoftPinTTL)
		}
		total += p.Size
	}
	if total > MaxFrameLength {
		return 0, kverr.New(kverr.InvalidParams, "", "direct put: %d bytes in one frame (at most %d)", total, MaxFrameLength)
	}
	if putDescsLen(puts) > maxPutDescLen {
		return 0, kverr.New(kverr.InvalidParams, "", "direct put: descriptors above %d bytes", maxPutDescLen)
	}
	return total, nil
}

// appendPutDescs appends puts' descriptors to b.
func appendPutDescs(b []byte, puts []DirectPut) []byte {
	for i := range puts {
		p := &puts[i]
		var d [putDescFixed]byte
		binary.BigEndian.PutUint64(d[0:], p.Size)
		binary.BigEndian.PutUint32(d[8:], p.CRC32C)
		binary.BigEndian.PutUint32(d[12:], uint32(p.SoftPinTTL.Milliseconds()))
		if p.SoftPin {
			d[16] |= putFlagSoftPin
		}
		if p.HardPin {
			d[16] |= putFlagHardPin
		}
		d[17] = byte(len(p.PreferredSegment))
		binary.BigEndian.PutUint16(d[18:], uint16(len(p.Key)))
		b = append(b, d[:]...)
		b = append(b, p.Key...)
		b = append(b, p.PreferredSegment...)
	}
	return b
}

// parsePutDescs decodes exactly k descriptors filling d, whose sizes must
// sum to total, into out (reused).
func parsePutDescs(d []byte, k int, total uint64, out []DirectPut) ([]DirectPut, error) {
	out = out[:0]
	var sum uint64
	for i := range k {
		if len(d) < putDescFixed {
			return out, fmt.Errorf("put %d: descriptor section ends early", i)
		}
		var p DirectPut
		p.Size = binary.BigEndian.Uint64(d[0:])
		p.CRC32C = binary.BigEndian.Uint32(d[8:])
		p.SoftPinTTL = time.Duration(binary.BigEndian.Uint32(d[12:])) * time.Millisecond
		flags := d[16]
		p.SoftPin, p.HardPin = flags&putFlagSoftPin != 0, flags&putFlagHardPin != 0
		pl, kl := int(d[17]), int(binary.BigEndian.Uint16(d[18:]))
		switch {
		case flags&^(putFlagSoftPin|putFlagHardPin) != 0:
			return out, fmt.Errorf("put %d: unknown flags %#x", i, flags)
		case kl < 1 || kl > MaxDirectPutKey:
			return out, fmt.Errorf("put %d: key of %d bytes (1..%d)", i, kl, MaxDirectPutKey)
		case p.Size == 0 || p.Size > total-sum:
			return out, fmt.Errorf("put %d: size %d beyond the frame's %d payload bytes", i, p.Size, total)
		case len(d) < putDescFixed+kl+pl:
			return out, fmt.Errorf("put %d: descriptor section ends early", i)
		}
		sum += p.Size
		p.Key = string(d[putDescFixed : putDescFixed+kl])
		p.PreferredSegment = string(d[putDescFixed+kl : putDescFixed+kl+pl])
		d = d[putDescFixed+kl+pl:]
		out = append(out, p)
	}
	if len(d) != 0 {
		return out, fmt.Errorf("%d bytes after the last put descriptor", len(d))
	}
	if sum != total {
		return out, fmt.Errorf("put sizes sum to %d, frame carries %d", sum, total)
	}
	return out, nil
}

// appendPutResults appends one result per put: its kverr code (0 OK) and
// message.
func appendPutResults(b []byte, errs []error) []byte {
	for _, err := range errs {
		code, msg := kverr.OK, ""
		if err != nil {
			code, msg = kverr.CodeOf(err), err.Error()
			if ke, ok := err.(*kverr.Error); ok {
				msg = ke.Msg
			}
			if code == kverr.OK || code < 0 || code > 0xFFFF {
				code = kverr.InternalError
			}
			if len(msg) > maxMessageLen {
				msg = msg[:maxMessageLen]
			}
		}
		var r [putResultFixed]byte
		binary.BigEndian.PutUint16(r[0:], uint16(code))
		binary.BigEndian.PutUint16(r[2:], uint16(len(msg)))
		b = append(b, r[:]...)
		b = append(b, msg...)
	}
	return b
}

// parsePutResults decodes exactly k results filling b; keys name them.
func parsePutResults(b []byte, keys []DirectPut) ([]error, error) {
	out := make([]error, len(keys))
	for i := range keys {
		if len(b) < putResultFixed {
			return nil, fmt.Errorf("%w: put results end early", errMalformed)
		}
		code, ml := kverr.Code(binary.BigEndian.Uint16(b[0:])), int(binary.BigEndian.Uint16(b[2:]))
		if ml > maxMessageLen || len(b) < putResultFixed+ml || (code == kverr.OK && ml != 0) {
			return nil, fmt.Errorf("%w: put result %d: message of %d bytes", errMalformed, i, ml)
		}
		if code != kverr.OK {
			out[i] = kverr.New(code, keys[i].Key, "%s", b[putResultFixed:putResultFixed+ml])
		}
		b = b[putResultFixed+ml:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last put result", errMalformed, len(b))
	}
	return out, nil
}
