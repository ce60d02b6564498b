package pdu

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Side says which end of the connection a Reader is on, and so which PDU
// types are legal.
type Side int

const (
	// ControllerSide reads what a host sends: ICReq, then CapsuleCmd,
	// H2CData and H2CTermReq.
	ControllerSide Side = iota
	// HostSide reads what a controller sends: ICResp (or C2HTermReq), then
	// CapsuleResp, C2HData, R2T and C2HTermReq.
	HostSide
	// AnySide accepts every known PDU type in any order (for decoding
	// captured traffic).
	AnySide
)

// ReaderConfig bounds what a Reader accepts. Zero values mean defaults.
type ReaderConfig struct {
	Side Side
	// MaxCapsuleData is the largest in-capsule data accepted (default 8192).
	MaxCapsuleData int
	// MaxH2CData is the MAXH2CDATA this controller granted (default 131072).
	MaxH2CData int
	// MaxC2HData is the largest C2HData payload accepted (default 1 MiB).
	MaxC2HData int
	// BufferSize is the bufio size (default 64 KiB).
	BufferSize int
}

func (c *ReaderConfig) defaults() {
	if c.MaxCapsuleData <= 0 {
		c.MaxCapsuleData = 8192
	}
	if c.MaxH2CData <= 0 {
		c.MaxH2CData = 128 << 10
	}
	if c.MaxC2HData <= 0 {
		c.MaxC2HData = 1 << 20
	}
	if c.BufferSize <= 0 {
		c.BufferSize = 64 << 10
	}
}

// Frame is a received PDU whose header has been validated. Its accessors
// decode the type-specific header; Raw is valid until the next Reader.Next.
type Frame struct {
	Header
	raw     []byte // hlen bytes
	DataLen int    // bytes of data still to be read with ReadData/Data
}

// Raw returns the hlen header bytes (without digest).
func (f *Frame) Raw() []byte { return f.raw }

// ICReq decodes an ICReq header.
func (f *Frame) ICReq() ICReq {
	b := f.raw
	return ICReq{PFV: binary.LittleEndian.Uint16(b[8:]), HPDA: b[10], DGST: b[11], MAXR2T: binary.LittleEndian.Uint32(b[12:])}
}

// ICResp decodes an ICResp header.
func (f *Frame) ICResp() ICResp {
	b := f.raw
	return ICResp{PFV: binary.LittleEndian.Uint16(b[8:]), CPDA: b[10], DGST: b[11], MAXH2CDATA: binary.LittleEndian.Uint32(b[12:])}
}

// TermReq decodes a TermReq header (Data is not filled in).
func (f *Frame) TermReq() TermReq {
	b := f.raw
	return TermReq{FromHost: f.Type == TypeH2CTermReq, FES: binary.LittleEndian.Uint16(b[8:]), FEI: binary.LittleEndian.Uint32(b[10:])}
}

// Command decodes the SQE of a CapsuleCmd.
func (f *Frame) Command() (c Command) { c.Unmarshal(f.raw[8:72]); return }

// Completion decodes the CQE of a CapsuleResp.
func (f *Frame) Completion() (c Completion) { c.Unmarshal(f.raw[8:24]); return }

// DataHeader decodes H2CData/C2HData fields (ttag is 0 for C2HData).
func (f *Frame) DataHeader() (cccid, ttag uint16, datao, datal uint32) {
	b := f.raw
	le := binary.LittleEndian
	return le.Uint16(b[8:]), le.Uint16(b[10:]), le.Uint32(b[12:]), le.Uint32(b[16:])
}

// R2T decodes an R2T header.
func (f *Frame) R2T() R2T {
	b := f.raw
	le := binary.LittleEndian
	return R2T{CCCID: le.Uint16(b[8:]), TTAG: le.Uint16(b[10:]), R2TO: le.Uint32(b[12:]), R2TL: le.Uint32(b[16:])}
}

// Reader reads one PDU at a time from a stream into reusable buffers.
// It is not safe for concurrent use.
type Reader struct {
	br         *bufio.Reader
	cfg        ReaderConfig
	negotiated bool
	opt        Options
	hdr        [ICLen + DigestLen]byte
	frame      Frame
	pad        int  // padding bytes before the pending data
	ddgst      bool // pending data has a digest
	buf        []byte
}

// NewReader returns a Reader over r.
func NewReader(r io.Reader, cfg ReaderConfig) *Reader {
	cfg.defaults()
	return &Reader{br: bufio.NewReaderSize(r, cfg.BufferSize), cfg: cfg}
}

// SetNegotiated records the digests and data alignment agreed by
// ICReq/ICResp; o.PDA is the alignment this side asked its peer to use.
// After it, IC PDUs are sequence errors.
func (r *Reader) SetNegotiated(o Options) {
	r.negotiated = true
	r.opt = o
}

// SetMaxH2CData changes the MAXH2CDATA bound (controller side).
func (r *Reader) SetMaxH2CData(n int) { r.cfg.MaxH2CData = n }

func (r *Reader) legal(t Type) (ok bool, fes uint16) {
	known := fixedHLen(t) != 0
	if !known {
		return false, FESInvalidHeaderField
	}
	switch r.cfg.Side {
	case AnySide:
		return true, 0
	case ControllerSide:
		switch t {
		case TypeICReq:
			if r.negotiated {
				return false, FESSequenceError
			}
			return true, 0
		case TypeCapsuleCmd, TypeH2CData, TypeH2CTermReq:
			if !r.negotiated && t != TypeH2CTermReq {
				return false, FESSequenceError
			}
			return true, 0
		}
	case HostSide:
		switch t {
		case TypeICResp:
			if r.negotiated {
				return false, FESSequenceError
			}
			return true, 0
		case TypeC2HTermReq:
			return true, 0
		case TypeCapsuleResp, TypeC2HData, TypeR2T:
			if !r.negotiated {
				return false, FESSequenceError
			}
			return true, 0
		}
	}
	return false, FESInvalidHeaderField
}

// Next skips whatever is left of the previous PDU, reads and validates the
// next PDU header and returns it. Data, if any, must then be read with
// ReadData or Data (or is skipped by the next call). A validation failure
// returns an *Error; an I/O failure returns the I/O error.
func (r *Reader) Next() (*Frame, error) {
	if r.frame.DataLen > 0 || r.pad > 0 {
		if err := r.skipData(); err != nil {
			return nil, err
		}
	}
	h := r.hdr[:]
	if _, err := io.ReadFull(r.br, h[:CommonHeaderLen]); err != nil {
		return nil, err
	}
	ch := ParseHeader(h)
	r.frame = Frame{Header: ch}
	r.pad, r.ddgst = 0, false
	if ok, fes := r.legal(ch.Type); !ok {
		return nil, newErr("type", fes, 0, h[:8], "PDU type %v not expected here", ch.Type)
	}
	hlen := fixedHLen(ch.Type)
	if int(ch.HLEN) != hlen {
		return nil, newErr("hlen", FESInvalidHeaderField, 2, h[:8], "%v hlen %d, want %d", ch.Type, ch.HLEN, hlen)
	}
	hd := r.opt.HDGST && hasHeaderDigest(ch.Type)
	if hasHeaderDigest(ch.Type) && (ch.Flags&FlagHDGST != 0) != r.opt.HDGST && r.cfg.Side != AnySide {
		return nil, newErr("flags", FESInvalidHeaderField, 1, h[:8], "HDGSTF=%v but header digests negotiated=%v", ch.Flags&FlagHDGST != 0, r.opt.HDGST)
	}
	if r.cfg.Side == AnySide {
		hd = hasHeaderDigest(ch.Type) && ch.Flags&FlagHDGST != 0
	}
	minimal := hlen
	if hd {
		minimal += DigestLen
	}
	plen := int(ch.PLEN)
	// Read the rest of the header (and its digest) when PLEN says it is
	// there, so errors carry the whole header and fields are trustworthy.
	hb := h[:CommonHeaderLen]
	if plen >= minimal && (plen == ICLen || (ch.Type != TypeICReq && ch.Type != TypeICResp)) {
		if _, err := io.ReadFull(r.br, h[CommonHeaderLen:minimal]); err != nil {
			return nil, unexpected(err)
		}
		hb = h[:hlen]
		if hd {
			want := binary.LittleEndian.Uint32(h[hlen:])
			if got := CRC32C(hb); got != want {
				return nil, newErr("hdgst", FESHeaderDigest, 0, hb, "header digest 0x%08x, computed 0x%08x", want, got)
			}
		}
	}
	dataLen := 0
	switch ch.Type {
	case TypeICReq, TypeICResp:
		if plen != ICLen {
			return nil, newErr("plen", FESInvalidHeaderField, 4, hb, "%v plen %d, want 128", ch.Type, plen)
		}
	case TypeH2CTermReq, TypeC2HTermReq:
		if plen < TermReqHLen || plen > TermReqHLen+MaxTermReqData {
			return nil, newErr("plen", FESInvalidHeaderField, 4, hb, "TermReq plen %d outside 24..152", plen)
		}
		dataLen = plen - TermReqHLen
	case TypeCapsuleResp, TypeR2T:
		if plen != minimal {
			return nil, newErr("plen", FESInvalidHeaderField, 4, hb, "%v plen %d, want %d", ch.Type, plen, minimal)
		}
	default: // CapsuleCmd, H2CData, C2HData
		if plen < minimal {
			return nil, newErr("plen", FESInvalidHeaderField, 4, hb, "%v plen %d shorter than header %d", ch.Type, plen, minimal)
		}
		if plen == minimal {
			if ch.Type != TypeCapsuleCmd {
				return nil, newErr("plen", FESInvalidHeaderField, 4, hb, "%v without data", ch.Type)
			}
			if ch.Flags&FlagDDGST != 0 {
				return nil, newErr("flags", FESInvalidHeaderField, 1, hb, "DDGSTF set on a PDU without data")
			}
			break
		}
		dd := r.opt.DDGST
		if r.cfg.Side == AnySide {
			dd = ch.Flags&FlagDDGST != 0
		} else if (ch.Flags&FlagDDGST != 0) != dd {
			return nil, newErr("flags", FESInvalidHeaderField, 1, hb, "DDGSTF=%v but data digests negotiated=%v", ch.Flags&FlagDDGST != 0, dd)
		}
		limit := r.cfg.MaxCapsuleData
		switch ch.Type {
		case TypeH2CData:
			limit = r.cfg.MaxH2CData
		case TypeC2HData:
			limit = r.cfg.MaxC2HData
		}
		if plen > minimal+255+DigestLen+limit {
			// more than any padding plus the largest payload: PLEN is wrong
			// no matter where PDO points
			if ch.Type == TypeH2CData {
				return nil, newErr("datal", FESDataLimitExceeded, 16, hb, "H2CData plen %d exceeds MAXH2CDATA %d", plen, limit)
			}
			return nil, newErr("plen", FESInvalidHeaderField, 4, hb, "%v plen %d exceeds limit %d", ch.Type, plen, limit)
		}
		align := (int(r.opt.PDA) + 1) * 4
		pdo := int(ch.PDO)
		if pdo < minimal || pdo%align != 0 {
			return nil, newErr("pdo", FESInvalidHeaderField, 3, hb, "pdo %d (header %d, alignment %d)", pdo, minimal, align)
		}
		ddLen := 0
		if dd {
			ddLen = DigestLen
		}
		if plen <= pdo+ddLen {
			return nil, newErr("pdo", FESInvalidHeaderField, 3, hb, "pdo %d leaves no data in plen %d", pdo, plen)
		}
		dataLen = plen - pdo - ddLen
		if dataLen > limit {
			if ch.Type == TypeH2CData {
				return nil, newErr("datal", FESDataLimitExceeded, 16, hb, "H2CData carries %d bytes, MAXH2CDATA %d", dataLen, limit)
			}
			return nil, newErr("plen", FESInvalidHeaderField, 4, hb, "%v carries %d data bytes, limit %d", ch.Type, dataLen, limit)
		}
		r.pad = pdo - minimal
		r.ddgst = dd
	}
	raw := h[:hlen]
	r.frame.raw = raw
	r.frame.DataLen = dataLen
	switch ch.Type {
	case TypeICReq, TypeICResp:
		if r.cfg.Side == AnySide {
			break // negotiation checks are the receiving side's business
		}
		if pfv := binary.LittleEndian.Uint16(raw[8:]); pfv != 0 {
			return nil, newErr("pfv", FESInvalidHeaderField, 8, raw, "PFV %d unsupported", pfv)
		}
		if raw[10] > 31 {
			return nil, newErr("pda", FESInvalidHeaderField, 10, raw, "PDA %d > 31", raw[10])
		}
	case TypeH2CData, TypeC2HData:
		if datal := binary.LittleEndian.Uint32(raw[16:]); int(datal) != dataLen {
			return nil, newErr("datal", FESInvalidHeaderField, 16, raw, "DATAL %d but PDU carries %d bytes", datal, dataLen)
		}
		if ch.Type == TypeC2HData && ch.Flags&FlagSuccess != 0 && ch.Flags&FlagLast == 0 {
			return nil, newErr("flags", FESInvalidHeaderField, 1, raw, "SUCCESS without LAST_PDU")
		}
	}
	return &r.frame, nil
}

// IsDataDigest reports whether err is a data digest mismatch from ReadData
// or Data (the connection itself is still usable).
func IsDataDigest(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Field == "ddgst"
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (r *Reader) skipPad() error {
	if r.pad > 0 {
		if _, err := r.br.Discard(r.pad); err != nil {
			return unexpected(err)
		}
		r.pad = 0
	}
	return nil
}

func (r *Reader) skipData() error {
	if err := r.skipPad(); err != nil {
		return err
	}
	n := r.frame.DataLen
	if r.ddgst {
		n += DigestLen
	}
	r.frame.DataLen, r.ddgst = 0, false
	if _, err := r.br.Discard(n); err != nil {
		return unexpected(err)
	}
	return nil
}

// ReadData reads the current PDU's data into dst, which must be exactly
// Frame.DataLen bytes, and verifies the data digest. A data digest mismatch
// is reported by an *Error with Field "ddgst" (IsDataDigest) after the whole
// PDU was consumed: the stream stays in step, so the receiver may fail just
// that command instead of the connection.
func (r *Reader) ReadData(dst []byte) error {
	if len(dst) != r.frame.DataLen {
		return fmt.Errorf("nvme-tcp: ReadData with %d bytes, PDU has %d", len(dst), r.frame.DataLen)
	}
	if err := r.skipPad(); err != nil {
		return err
	}
	r.frame.DataLen = 0
	if _, err := io.ReadFull(r.br, dst); err != nil {
		return unexpected(err)
	}
	if r.ddgst {
		r.ddgst = false
		var d [DigestLen]byte
		if _, err := io.ReadFull(r.br, d[:]); err != nil {
			return unexpected(err)
		}
		want := binary.LittleEndian.Uint32(d[:])
		if got := CRC32C(dst); got != want {
			return newErr("ddgst", FESHeaderDigest, 0, r.frame.raw, "data digest 0x%08x, computed 0x%08x", want, got)
		}
	}
	return nil
}

// Data reads the current PDU's data into a buffer owned by the Reader
// (valid until the next call) and verifies the data digest.
func (r *Reader) Data() ([]byte, error) {
	n := r.frame.DataLen
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	if err := r.ReadData(b); err != nil {
		return nil, err
	}
	return b, nil
}

// Decode decodes one complete PDU in b (which must hold exactly PLEN bytes),
// verifying the digests its flags announce. Data slices alias b.
func Decode(b []byte) (Message, error) {
	r := NewReader(bytes.NewReader(b), ReaderConfig{Side: AnySide, MaxCapsuleData: len(b), MaxH2CData: len(b), MaxC2HData: len(b), BufferSize: 16})
	f, err := r.Next()
	if err != nil {
		return nil, err
	}
	if int(f.PLEN) != len(b) {
		return nil, newErr("plen", FESInvalidHeaderField, 4, b, "plen %d but %d bytes given", f.PLEN, len(b))
	}
	var data []byte
	if f.DataLen > 0 {
		start := int(f.PDO)
		if f.Type == TypeH2CTermReq || f.Type == TypeC2HTermReq {
			start = TermReqHLen
		}
		data = b[start : start+f.DataLen]
		if err := r.ReadData(make([]byte, f.DataLen)); err != nil {
			return nil, err
		}
	}
	switch f.Type {
	case TypeICReq:
		m := f.ICReq()
		return &m, nil
	case TypeICResp:
		m := f.ICResp()
		return &m, nil
	case TypeH2CTermReq, TypeC2HTermReq:
		m := f.TermReq()
		m.Data = data
		return &m, nil
	case TypeCapsuleCmd:
		return &CapsuleCmd{Cmd: f.Command(), Data: data}, nil
	case TypeCapsuleResp:
		return &CapsuleResp{Cpl: f.Completion()}, nil
	case TypeH2CData:
		cccid, ttag, datao, _ := f.DataHeader()
		return &H2CData{CCCID: cccid, TTAG: ttag, DATAO: datao, Last: f.Flags&FlagLast != 0, Data: data}, nil
	case TypeC2HData:
		cccid, _, datao, _ := f.DataHeader()
		return &C2HData{CCCID: cccid, DATAO: datao, Last: f.Flags&FlagLast != 0, Success: f.Flags&FlagSuccess != 0, Data: data}, nil
	default: // TypeR2T
		m := f.R2T()
		return &m, nil
	}
}

// OptionsOf returns the encoding options a decoded PDU was sent with,
// judged from its flags and PDO (PDA is inferred as the smallest alignment
// consistent with PDO).
func OptionsOf(b []byte) Options {
	h := ParseHeader(b)
	o := Options{HDGST: h.Flags&FlagHDGST != 0, DDGST: h.Flags&FlagDDGST != 0}
	if h.PDO != 0 && hasDataDigest(h.Type) {
		for pda := uint8(0); pda < 32; pda++ {
			o.PDA = pda
			if o.dataOffset(int(h.HLEN)) == int(h.PDO) {
				break
			}
		}
	}
	return o
}

// Buffered is the number of received bytes not yet consumed: more than 0
// means part of a PDU (the current one's data or the next one) is here.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// NextBuffered reports whether the next PDU (header, data and digests) has
// already been received in full, so that Next and reading its data will
// not wait for the network. It never reads from the stream.
func (r *Reader) NextBuffered() bool {
	skip := r.pad + r.frame.DataLen
	if r.ddgst {
		skip += DigestLen
	}
	if r.br.Buffered() < skip+CommonHeaderLen {
		return false
	}
	h, err := r.br.Peek(skip + CommonHeaderLen)
	if err != nil {
		return false
	}
	plen := int(binary.LittleEndian.Uint32(h[skip+4:]))
	return r.br.Buffered() >= skip+plen
}
