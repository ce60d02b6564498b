package pdu

import (
	"errors"
	"fmt"
)

// Error is a fatal transport error in a received PDU. It says which field
// was wrong and carries what the receiver must put in its TermReq.
type Error struct {
	Field  string // e.g. "plen", "hdgst"
	FES    uint16 // Fatal Error Status
	FEI    uint32 // Fatal Error Information: byte offset of the field (FES 1/6)
	Msg    string
	Header []byte // copy of up to 128 bytes of the offending PDU header
}

func (e *Error) Error() string {
	return fmt.Sprintf("nvme-tcp: bad %s (FES %d, FEI %d): %s", e.Field, e.FES, e.FEI, e.Msg)
}

// ErrDigest is matched (errors.Is) by every header or data digest mismatch.
var ErrDigest = errors.New("nvme-tcp: digest mismatch")

func (e *Error) Is(target error) bool {
	return target == ErrDigest && (e.Field == "hdgst" || e.Field == "ddgst")
}

func newErr(field string, fes uint16, fei uint32, hdr []byte, format string, args ...any) *Error {
	h := hdr
	if len(h) > MaxTermReqData {
		h = h[:MaxTermReqData]
	}
	return &Error{Field: field, FES: fes, FEI: fei, Msg: fmt.Sprintf(format, args...), Header: append([]byte(nil), h...)}
}

// NewError builds an *Error for checks made outside this package (for
// example a target's R2T window checks).
func NewError(field string, fes uint16, fei uint32, hdr []byte, msg string) *Error {
	return newErr(field, fes, fei, hdr, "%s", msg)
}

// TermReqFor returns the TermReq a receiver sends for err: C2HTermReq when
// fromHost is false (a controller answering a bad host PDU).
func TermReqFor(e *Error, fromHost bool) *TermReq {
	return &TermReq{FromHost: fromHost, FES: e.FES, FEI: e.FEI, Data: e.Header}
}
