package fastrpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Wire constants (see the package doc).
const (
	Version       = 1
	MaxPayload    = 64 << 20
	maxMethodLen  = 255
	helloLen      = 8
	reqHeaderLen  = 16
	respHeaderLen = 12

	statusOK    = 0
	statusError = 1
)

var (
	helloMagic = [4]byte{'K', 'V', 'F', 'R'}
	reqMagic   = [4]byte{'K', 'V', 'F', 'Q'}
	respMagic  = [4]byte{'K', 'V', 'F', 'S'}
	hello      = [helloLen]byte{'K', 'V', 'F', 'R', Version}
)

// errMalformed marks a frame that cannot be parsed: the connection is
// closed, since the stream can no longer be trusted to be in step.
var errMalformed = errors.New("fastrpc: malformed frame")

// request is a decoded request frame.
type request struct {
	method  string
	timeout uint32 // milliseconds, 0 = none
	payload []byte
}

// appendRequest appends the request frame for method and payload to dst.
func appendRequest(dst []byte, method string, timeoutMs uint32, payload []byte) ([]byte, error) {
	if len(method) == 0 || len(method) > maxMethodLen {
		return dst, fmt.Errorf("fastrpc: method name of %d bytes outside 1..%d", len(method), maxMethodLen)
	}
	if len(payload) > MaxPayload {
		return dst, fmt.Errorf("fastrpc: request of %d bytes exceeds %d", len(payload), MaxPayload)
	}
	var h [reqHeaderLen]byte
	copy(h[0:4], reqMagic[:])
	binary.BigEndian.PutUint16(h[4:6], uint16(len(method)))
	binary.BigEndian.PutUint32(h[8:12], uint32(len(payload)))
	binary.BigEndian.PutUint32(h[12:16], timeoutMs)
	dst = append(dst, h[:]...)
	dst = append(dst, method...)
	return append(dst, payload...), nil
}

// readRequest reads one request frame. buf is reused for the header, the
// method name and the payload when large enough; the returned payload
// aliases it. A method name found in known is taken from it (no allocation
// per call); known may be nil.
func readRequest(r *bufio.Reader, buf []byte, known map[string]string) (request, []byte, error) {
	if cap(buf) < reqHeaderLen+maxMethodLen {
		buf = make([]byte, reqHeaderLen+maxMethodLen)
	}
	buf = buf[:cap(buf)]
	h := buf[:reqHeaderLen]
	if _, err := io.ReadFull(r, h); err != nil {
		return request{}, buf, err
	}
	q, plen, err := parseRequestHeader(h)
	if err != nil {
		return request{}, buf, err
	}
	mlen := int(binary.BigEndian.Uint16(h[4:6]))
	name := buf[reqHeaderLen : reqHeaderLen+mlen]
	if _, err := io.ReadFull(r, name); err != nil {
		return request{}, buf, err
	}
	if m, ok := known[string(name)]; ok {
		q.method = m
	} else {
		q.method = string(name)
	}
	if cap(buf) < plen {
		buf = make([]byte, plen)
	}
	q.payload = buf[:plen]
	if _, err := io.ReadFull(r, q.payload); err != nil {
		return request{}, buf, err
	}
	return q, buf, nil
}

// parseRequestHeader checks a request header; it returns the timeout and
// the payload length.
func parseRequestHeader(h []byte) (request, int, error) {
	if len(h) < reqHeaderLen {
		return request{}, 0, fmt.Errorf("%w: request header of %d bytes", errMalformed, len(h))
	}
	if [4]byte(h[0:4]) != reqMagic {
		return request{}, 0, fmt.Errorf("%w: request magic %x", errMalformed, h[0:4])
	}
	mlen := binary.BigEndian.Uint16(h[4:6])
	if mlen == 0 || mlen > maxMethodLen {
		return request{}, 0, fmt.Errorf("%w: method name length %d", errMalformed, mlen)
	}
	if binary.BigEndian.Uint16(h[6:8]) != 0 {
		return request{}, 0, fmt.Errorf("%w: reserved bytes set", errMalformed)
	}
	plen := binary.BigEndian.Uint32(h[8:12])
	if plen > MaxPayload {
		return request{}, 0, fmt.Errorf("%w: payload length %d exceeds %d", errMalformed, plen, MaxPayload)
	}
	return request{timeout: binary.BigEndian.Uint32(h[12:16])}, int(plen), nil
}

// appendResponse appends a response frame to dst.
func appendResponse(dst []byte, status byte, payload []byte) []byte {
	var h [respHeaderLen]byte
	copy(h[0:4], respMagic[:])
	h[4] = status
	binary.BigEndian.PutUint32(h[8:12], uint32(len(payload)))
	dst = append(dst, h[:]...)
	return append(dst, payload...)
}

// parseResponseHeader checks a response header; it returns the status and
// the payload length.
func parseResponseHeader(h []byte) (byte, int, error) {
	if len(h) < respHeaderLen {
		return 0, 0, fmt.Errorf("%w: response header of %d bytes", errMalformed, len(h))
	}
	if [4]byte(h[0:4]) != respMagic {
		return 0, 0, fmt.Errorf("%w: response magic %x", errMalformed, h[0:4])
	}
	if h[4] != statusOK && h[4] != statusError {
		return 0, 0, fmt.Errorf("%w: response status %d", errMalformed, h[4])
	}
	if h[5] != 0 || h[6] != 0 || h[7] != 0 {
		return 0, 0, fmt.Errorf("%w: reserved bytes set", errMalformed)
	}
	plen := binary.BigEndian.Uint32(h[8:12])
	if plen > MaxPayload {
		return 0, 0, fmt.Errorf("%w: payload length %d exceeds %d", errMalformed, plen, MaxPayload)
	}
	return h[4], int(plen), nil
}

// helloToken, in byte 5 of a client's hello, says a token follows the
// hello: a 2-byte big-endian length, then that many bytes (at most
// maxTokenLen). A server with an Authenticate function refuses a
// connection whose token it does not know by closing it before any call; a
// server without one ignores the token. Servers answer with the plain
// hello. (Older servers close on the flag: the client then uses gRPC.)
const (
	helloToken  = 1
	maxTokenLen = 4096
)

// parseClientHello checks a client's hello and returns its flags.
func parseClientHello(b []byte) (byte, error) {
	if len(b) != helloLen || [4]byte(b[:4]) != helloMagic || b[4] != Version || b[6] != 0 || b[7] != 0 || b[5]&^helloToken != 0 {
		return 0, fmt.Errorf("%w: hello %x", errMalformed, b)
	}
	return b[5], nil
}

// checkHello reports whether b is a version-1 hello.
func checkHello(b []byte) error {
	if len(b) != helloLen || [helloLen]byte(b) != hello {
		return fmt.Errorf("%w: hello %x", errMalformed, b)
	}
	return nil
}
