package transfer

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire constants; see the package documentation for the byte layout.
const (
	requestMagic  uint32 = 0x4B565451 // "KVTQ"
	responseMagic uint32 = 0x4B565453 // "KVTS"
	wireVersion   uint8  = 1
	// grantVersion marks a request frame that carries data-plane grants
	// (one after a single frame's name, one per extent after a batch
	// frame's descriptor section); responses stay at wireVersion.
	grantVersion uint8 = 2

	requestHeaderLen  = 40
	responseHeaderLen = 32

	// MaxNameLen is the longest segment or source name on the wire.
	MaxNameLen = 255
	// MaxFrameLength is the largest payload one frame may carry (64 MiB).
	MaxFrameLength = 64 << 20
	// maxMessageLen is the longest error message in a response.
	maxMessageLen = 1024
	// maxShmAddrLen is the longest Unix socket address an SHM response
	// carries (sun_path is 108 bytes).
	maxShmAddrLen = 107

	// opShm asks a server for its shared-memory socket (see shm.go).
	opShm Op = 3
)

var errMalformed = errors.New("malformed frame")

// reqHeader is the fixed part of a request frame.
type reqHeader struct {
	op      Op
	nameLen int
	id      uint64
	bucket  uint64
	offset  uint64
	length  uint64
	grant   bool // version 2: grants follow the name (or the descriptors)
}

// putRequestHeader encodes h into b[:requestHeaderLen].
func putRequestHeader(b []byte, h reqHeader) {
	_ = b[requestHeaderLen-1]
	binary.BigEndian.PutUint32(b[0:], requestMagic)
	b[4] = wireVersion
	if h.grant {
		b[4] = grantVersion
	}
	b[5] = byte(h.op)
	binary.BigEndian.PutUint16(b[6:], uint16(h.nameLen))
	binary.BigEndian.PutUint64(b[8:], h.id)
	binary.BigEndian.PutUint64(b[16:], h.bucket)
	binary.BigEndian.PutUint64(b[24:], h.offset)
	binary.BigEndian.PutUint64(b[32:], h.length)
}

// parseRequestHeader decodes and validates the fixed part of a request. Any
// error means the stream cannot be trusted and the connection is closed.
func parseRequestHeader(b []byte) (reqHeader, error) {
	if len(b) < requestHeaderLen {
		return reqHeader{}, fmt.Errorf("%w: short header (%d bytes)", errMalformed, len(b))
	}
	if m := binary.BigEndian.Uint32(b[0:]); m != requestMagic {
		return reqHeader{}, fmt.Errorf("%w: bad magic %#08x", errMalformed, m)
	}
	if b[4] != wireVersion && b[4] != grantVersion {
		return reqHeader{}, fmt.Errorf("%w: unsupported version %d", errMalformed, b[4])
	}
	h := reqHeader{
		grant:   b[4] == grantVersion,
		op:      Op(b[5]),
		nameLen: int(binary.BigEndian.Uint16(b[6:])),
		id:      binary.BigEndian.Uint64(b[8:]),
		bucket:  binary.BigEndian.Uint64(b[16:]),
		offset:  binary.BigEndian.Uint64(b[24:]),
		length:  binary.BigEndian.Uint64(b[32:]),
	}
	if h.op == opPut {
		if err := checkPutHeader(h); err != nil {
			return reqHeader{}, err
		}
		return h, nil
	}
	if h.op.isBatch() {
		if err := checkBatchHeader(h); err != nil {
			return reqHeader{}, err
		}
		return h, nil
	}
	if h.op != Read && h.op != Write && h.op != opShm {
		return reqHeader{}, fmt.Errorf("%w: unknown op %d", errMalformed, b[5])
	}
	if h.nameLen < 1 || h.nameLen > MaxNameLen {
		return reqHeader{}, fmt.Errorf("%w: name length %d outside 1..%d", errMalformed, h.nameLen, MaxNameLen)
	}
	if h.op == opShm {
		if h.grant {
			return reqHeader{}, fmt.Errorf("%w: SHM request with a grant", errMalformed)
		}
		if h.length != 0 || h.bucket != 0 || h.offset != 0 {
			return reqHeader{}, fmt.Errorf("%w: SHM request with length, bucket or offset set", errMalformed)
		}
		return h, nil
	}
	if h.length < 1 || h.length > MaxFrameLength {
		return reqHeader{}, fmt.Errorf("%w: length %d outside 1..%d", errMalformed, h.length, MaxFrameLength)
	}
	return h, nil
}

// respHeader is the fixed part of a response frame.
type respHeader struct {
	op         Op
	status     uint16 // kverr.Code; 0 = OK
	id         uint64
	payloadLen uint64
	msgLen     int
}

func putResponseHeader(b []byte, h respHeader) {
	_ = b[responseHeaderLen-1]
	binary.BigEndian.PutUint32(b[0:], responseMagic)
	b[4] = wireVersion
	b[5] = byte(h.op)
	binary.BigEndian.PutUint16(b[6:], h.status)
	binary.BigEndian.PutUint64(b[8:], h.id)
	binary.BigEndian.PutUint64(b[16:], h.payloadLen)
	binary.BigEndian.PutUint32(b[24:], uint32(h.msgLen))
	binary.BigEndian.PutUint32(b[28:], 0)
}

func parseResponseHeader(b []byte) (respHeader, error) {
	if len(b) < responseHeaderLen {
		return respHeader{}, fmt.Errorf("%w: short response header (%d bytes)", errMalformed, len(b))
	}
	if m := binary.BigEndian.Uint32(b[0:]); m != responseMagic {
		return respHeader{}, fmt.Errorf("%w: bad response magic %#08x", errMalformed, m)
	}
	if b[4] != wireVersion {
		return respHeader{}, fmt.Errorf("%w: unsupported response version %d", errMalformed, b[4])
	}
	h := respHeader{
		op:         Op(b[5]),
		status:     binary.BigEndian.Uint16(b[6:]),
		id:         binary.BigEndian.Uint64(b[8:]),
		payloadLen: binary.BigEndian.Uint64(b[16:]),
		msgLen:     int(binary.BigEndian.Uint32(b[24:])),
	}
	if h.op != Read && h.op != Write && h.op != opShm && h.op != opPut && !h.op.isBatch() {
		return respHeader{}, fmt.Errorf("%w: unknown response op %d", errMalformed, b[5])
	}
	if h.op == opShm && h.payloadLen > maxShmAddrLen {
		return respHeader{}, fmt.Errorf("%w: SHM socket address of %d bytes > %d", errMalformed, h.payloadLen, maxShmAddrLen)
	}
	if h.msgLen > maxMessageLen {
		return respHeader{}, fmt.Errorf("%w: message length %d > %d", errMalformed, h.msgLen, maxMessageLen)
	}
	if h.payloadLen > MaxFrameLength {
		return respHeader{}, fmt.Errorf("%w: payload length %d > %d", errMalformed, h.payloadLen, MaxFrameLength)
	}
	if h.status != 0 && h.payloadLen != 0 {
		return respHeader{}, fmt.Errorf("%w: error response with payload", errMalformed)
	}
	if (h.op == Write || h.op == opBatchWrite) && h.payloadLen != 0 {
		return respHeader{}, fmt.Errorf("%w: WRITE response with payload", errMalformed)
	}
	if binary.BigEndian.Uint32(b[28:]) != 0 {
		return respHeader{}, fmt.Errorf("%w: reserved response bytes not zero", errMalformed)
	}
	return h, nil
}
