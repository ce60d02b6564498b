package pdu

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/kvtier/kvtier/internal/crc32c"
)

// Type is the PDU-Type byte of the common header.
type Type uint8

// PDU types.
const (
	TypeICReq       Type = 0x00
	TypeICResp      Type = 0x01
	TypeH2CTermReq  Type = 0x02
	TypeC2HTermReq  Type = 0x03
	TypeCapsuleCmd  Type = 0x04
	TypeCapsuleResp Type = 0x05
	TypeH2CData     Type = 0x06
	TypeC2HData     Type = 0x07
	TypeR2T         Type = 0x09
)

func (t Type) String() string {
	switch t {
	case TypeICReq:
		return "ICReq"
	case TypeICResp:
		return "ICResp"
	case TypeH2CTermReq:
		return "H2CTermReq"
	case TypeC2HTermReq:
		return "C2HTermReq"
	case TypeCapsuleCmd:
		return "CapsuleCmd"
	case TypeCapsuleResp:
		return "CapsuleResp"
	case TypeH2CData:
		return "H2CData"
	case TypeC2HData:
		return "C2HData"
	case TypeR2T:
		return "R2T"
	}
	return fmt.Sprintf("Type(0x%02x)", uint8(t))
}

// Common header flag bits.
const (
	FlagHDGST   uint8 = 0x01
	FlagDDGST   uint8 = 0x02
	FlagLast    uint8 = 0x04
	FlagSuccess uint8 = 0x08
)

// Digest bits of ICReq/ICResp DGST.
const (
	DigestHeader uint8 = 0x01
	DigestData   uint8 = 0x02
)

// Sizes.
const (
	CommonHeaderLen = 8
	ICLen           = 128
	TermReqHLen     = 24
	CmdHLen         = 72
	RespHLen        = 24
	DataHLen        = 24
	R2THLen         = 24
	DigestLen       = 4
	// MaxTermReqData is the most offending-header bytes a TermReq carries.
	MaxTermReqData = 128
	// MinMaxH2CData is the smallest MAXH2CDATA a controller may grant.
	MinMaxH2CData = 4096
)

// FES values (Fatal Error Status of a TermReq).
const (
	FESInvalidHeaderField uint16 = 0x01
	FESSequenceError      uint16 = 0x02
	FESHeaderDigest       uint16 = 0x03
	FESDataOutOfRange     uint16 = 0x04
	FESDataLimitExceeded  uint16 = 0x05
	FESUnsupportedParam   uint16 = 0x06
)

// CRC32C returns the NVMe/TCP digest of b.
func CRC32C(b []byte) uint32 { return crc32c.Checksum(b) }

// fixedHLen returns the fixed header length of t, or 0 for an unknown type.
func fixedHLen(t Type) int {
	switch t {
	case TypeICReq, TypeICResp:
		return ICLen
	case TypeH2CTermReq, TypeC2HTermReq:
		return TermReqHLen
	case TypeCapsuleCmd:
		return CmdHLen
	case TypeCapsuleResp:
		return RespHLen
	case TypeH2CData, TypeC2HData:
		return DataHLen
	case TypeR2T:
		return R2THLen
	}
	return 0
}

// hasHeaderDigest reports whether PDUs of type t carry HDGST when enabled.
func hasHeaderDigest(t Type) bool {
	switch t {
	case TypeCapsuleCmd, TypeCapsuleResp, TypeH2CData, TypeC2HData, TypeR2T:
		return true
	}
	return false
}

// hasDataDigest reports whether PDUs of type t carry DDGST (when they carry
// data and data digests are enabled).
func hasDataDigest(t Type) bool {
	switch t {
	case TypeCapsuleCmd, TypeH2CData, TypeC2HData:
		return true
	}
	return false
}

// Options are the per-connection encoding parameters agreed in ICReq/ICResp.
type Options struct {
	HDGST bool  // header digests enabled
	DDGST bool  // data digests enabled
	PDA   uint8 // the receiver's data alignment (0's based dwords, 0..31)
}

// dataOffset returns the PDO for a PDU of type t with data under o.
func (o Options) dataOffset(hlen int) int {
	off := hlen
	if o.HDGST {
		off += DigestLen
	}
	align := (int(o.PDA) + 1) * 4
	return (off + align - 1) / align * align
}

// Header is the decoded 8-byte common header.
type Header struct {
	Type  Type
	Flags uint8
	HLEN  uint8
	PDO   uint8
	PLEN  uint32
}

// ParseHeader decodes the common header in b (len(b) >= 8). It does no
// validation.
func ParseHeader(b []byte) Header {
	return Header{Type: Type(b[0]), Flags: b[1], HLEN: b[2], PDO: b[3], PLEN: binary.LittleEndian.Uint32(b[4:8])}
}

// Message is any PDU that can be encoded.
type Message interface {
	// PDUType is the type byte.
	PDUType() Type
	// AppendPDU appends the complete PDU encoded under o to b.
	AppendPDU(b []byte, o Options) []byte
}

// appendFrame writes CH + psh (+hdgst) (+pad) + data (+ddgst).
// psh is the header after the 8-byte CH (hlen-8 bytes).
func appendFrame(b []byte, t Type, flags uint8, psh []byte, data []byte, o Options) []byte {
	b, trailer, dd := appendFrameHead(b, t, flags, psh, data, o)
	b = append(b, data...)
	if dd {
		b = append(b, trailer[:]...)
	}
	return b
}

// appendFrameHead appends everything of the frame that precedes the data
// (CH, PSH, HDGST, padding) and returns the DDGST trailer separately, so a
// writer can send large data from the caller's buffer without copying it.
func appendFrameHead(b []byte, t Type, flags uint8, psh []byte, data []byte, o Options) ([]byte, [DigestLen]byte, bool) {
	var trailer [DigestLen]byte
	b, dd := appendHead(b, t, flags, psh, len(data), o)
	if dd {
		binary.LittleEndian.PutUint32(trailer[:], CRC32C(data))
	}
	return b, trailer, dd
}

// appendHead appends what precedes n bytes of data (CH, PSH, HDGST,
// padding) and reports whether a data digest must follow the data.
func appendHead(b []byte, t Type, flags uint8, psh []byte, n int, o Options) ([]byte, bool) {
	hlen := CommonHeaderLen + len(psh)
	hd := o.HDGST && hasHeaderDigest(t)
	dd := o.DDGST && hasDataDigest(t) && n > 0
	if hd {
		flags |= FlagHDGST
	}
	if dd {
		flags |= FlagDDGST
	}
	pdo := 0
	plen := hlen
	if hd {
		plen += DigestLen
	}
	if n > 0 {
		if t == TypeH2CTermReq || t == TypeC2HTermReq {
			pdo = 0 // TermReq data follows the header directly and PDO stays 0
		} else {
			pdo = o.dataOffset(hlen)
			plen = pdo
		}
		plen += n
		if dd {
			plen += DigestLen
		}
	}
	start := len(b)
	b = append(b, byte(t), flags, byte(hlen), byte(pdo), 0, 0, 0, 0)
	binary.LittleEndian.PutUint32(b[start+4:], uint32(plen))
	b = append(b, psh...)
	if hd {
		b = binary.LittleEndian.AppendUint32(b, CRC32C(b[start:start+hlen]))
	}
	if n > 0 {
		for len(b)-start < pdo {
			b = append(b, 0)
		}
	}
	return b, dd
}

// AppendC2HDataFill appends one C2HData PDU (DATAO 0) carrying n bytes
// that fill writes straight into b, so a controller serving from memory
// copies each byte once on its way to the socket; a data digest, if o
// negotiated one, is computed after fill. On a fill error it returns b as
// it was and the error.
func AppendC2HDataFill(b []byte, o Options, cccid uint16, last, success bool, n int, fill func([]byte) error) ([]byte, error) {
	start := len(b)
	var psh [DataHLen - CommonHeaderLen]byte
	binary.LittleEndian.PutUint16(psh[0:], cccid)
	binary.LittleEndian.PutUint32(psh[8:], uint32(n))
	var f uint8
	if last {
		f |= FlagLast
	}
	if success {
		f |= FlagSuccess
	}
	b, dd := appendHead(b, TypeC2HData, f, psh[:], n, o)
	from := len(b)
	b = slices.Grow(b, n+DigestLen)[:from+n]
	data := b[from:]
	if err := fill(data); err != nil {
		return b[:start], err
	}
	if dd {
		b = binary.LittleEndian.AppendUint32(b, CRC32C(data))
	}
	return b, nil
}

// framer is implemented by the PDUs that carry bulk data; Writer uses it
// to send that data without copying.
type framer interface {
	frame() (t Type, flags uint8, psh []byte, data []byte)
}

// ICReq is the host's Initialize Connection Request.
type ICReq struct {
	PFV    uint16
	HPDA   uint8
	DGST   uint8 // DigestHeader|DigestData requested
	MAXR2T uint32
}

func (*ICReq) PDUType() Type { return TypeICReq }

func (m *ICReq) AppendPDU(b []byte, _ Options) []byte {
	var psh [ICLen - CommonHeaderLen]byte
	binary.LittleEndian.PutUint16(psh[0:], m.PFV)
	psh[2] = m.HPDA
	psh[3] = m.DGST
	binary.LittleEndian.PutUint32(psh[4:], m.MAXR2T)
	return appendFrame(b, TypeICReq, 0, psh[:], nil, Options{})
}

// ICResp is the controller's Initialize Connection Response.
type ICResp struct {
	PFV        uint16
	CPDA       uint8
	DGST       uint8
	MAXH2CDATA uint32
}

func (*ICResp) PDUType() Type { return TypeICResp }

func (m *ICResp) AppendPDU(b []byte, _ Options) []byte {
	var psh [ICLen - CommonHeaderLen]byte
	binary.LittleEndian.PutUint16(psh[0:], m.PFV)
	psh[2] = m.CPDA
	psh[3] = m.DGST
	binary.LittleEndian.PutUint32(psh[4:], m.MAXH2CDATA)
	return appendFrame(b, TypeICResp, 0, psh[:], nil, Options{})
}

// TermReq is an H2CTermReq (FromHost) or C2HTermReq.
type TermReq struct {
	FromHost bool
	FES      uint16
	FEI      uint32
	Data     []byte // up to 128 bytes of the offending PDU header
}

func (m *TermReq) PDUType() Type {
	if m.FromHost {
		return TypeH2CTermReq
	}
	return TypeC2HTermReq
}

func (m *TermReq) AppendPDU(b []byte, _ Options) []byte {
	var psh [TermReqHLen - CommonHeaderLen]byte
	binary.LittleEndian.PutUint16(psh[0:], m.FES)
	binary.LittleEndian.PutUint32(psh[2:], m.FEI)
	d := m.Data
	if len(d) > MaxTermReqData {
		d = d[:MaxTermReqData]
	}
	return appendFrame(b, m.PDUType(), 0, psh[:], d, Options{})
}

// CapsuleCmd carries one submission queue entry and optional in-capsule data.
type CapsuleCmd struct {
	Cmd  Command
	Data []byte
}

func (*CapsuleCmd) PDUType() Type { return TypeCapsuleCmd }

func (m *CapsuleCmd) AppendPDU(b []byte, o Options) []byte {
	t, f, psh, data := m.frame()
	return appendFrame(b, t, f, psh, data, o)
}

func (m *CapsuleCmd) frame() (Type, uint8, []byte, []byte) {
	psh := make([]byte, 64)
	m.Cmd.Marshal(psh)
	return TypeCapsuleCmd, 0, psh, m.Data
}

// CapsuleResp carries one completion queue entry.
type CapsuleResp struct {
	Cpl Completion
}

func (*CapsuleResp) PDUType() Type { return TypeCapsuleResp }

func (m *CapsuleResp) AppendPDU(b []byte, o Options) []byte {
	var psh [16]byte
	m.Cpl.Marshal(psh[:])
	return appendFrame(b, TypeCapsuleResp, 0, psh[:], nil, o)
}

// H2CData carries write data from host to controller for an R2T.
type H2CData struct {
	CCCID uint16
	TTAG  uint16
	DATAO uint32
	Last  bool
	Data  []byte // DATAL = len(Data)
}

func (*H2CData) PDUType() Type { return TypeH2CData }

func (m *H2CData) AppendPDU(b []byte, o Options) []byte {
	t, f, psh, data := m.frame()
	return appendFrame(b, t, f, psh, data, o)
}

func (m *H2CData) frame() (Type, uint8, []byte, []byte) {
	psh := make([]byte, DataHLen-CommonHeaderLen)
	binary.LittleEndian.PutUint16(psh[0:], m.CCCID)
	binary.LittleEndian.PutUint16(psh[2:], m.TTAG)
	binary.LittleEndian.PutUint32(psh[4:], m.DATAO)
	binary.LittleEndian.PutUint32(psh[8:], uint32(len(m.Data)))
	var f uint8
	if m.Last {
		f |= FlagLast
	}
	return TypeH2CData, f, psh, m.Data
}

// C2HData carries read data from controller to host.
type C2HData struct {
	CCCID   uint16
	DATAO   uint32
	Last    bool
	Success bool // completion implied; no CapsuleResp follows
	Data    []byte
}

func (*C2HData) PDUType() Type { return TypeC2HData }

func (m *C2HData) AppendPDU(b []byte, o Options) []byte {
	t, f, psh, data := m.frame()
	return appendFrame(b, t, f, psh, data, o)
}

func (m *C2HData) frame() (Type, uint8, []byte, []byte) {
	psh := make([]byte, DataHLen-CommonHeaderLen)
	binary.LittleEndian.PutUint16(psh[0:], m.CCCID)
	binary.LittleEndian.PutUint32(psh[4:], m.DATAO)
	binary.LittleEndian.PutUint32(psh[8:], uint32(len(m.Data)))
	var f uint8
	if m.Last {
		f |= FlagLast
	}
	if m.Success {
		f |= FlagSuccess
	}
	return TypeC2HData, f, psh, m.Data
}

// R2T asks the host for a range of a write command's data.
type R2T struct {
	CCCID uint16
	TTAG  uint16
	R2TO  uint32
	R2TL  uint32
}

func (*R2T) PDUType() Type { return TypeR2T }

func (m *R2T) AppendPDU(b []byte, o Options) []byte {
	var psh [R2THLen - CommonHeaderLen]byte
	binary.LittleEndian.PutUint16(psh[0:], m.CCCID)
	binary.LittleEndian.PutUint16(psh[2:], m.TTAG)
	binary.LittleEndian.PutUint32(psh[4:], m.R2TO)
	binary.LittleEndian.PutUint32(psh[8:], m.R2TL)
	return appendFrame(b, TypeR2T, 0, psh[:], nil, o)
}

// Compile-time checks.
var (
	_ Message = (*ICReq)(nil)
	_ Message = (*ICResp)(nil)
	_ Message = (*TermReq)(nil)
	_ Message = (*CapsuleCmd)(nil)
	_ Message = (*CapsuleResp)(nil)
	_ Message = (*H2CData)(nil)
	_ Message = (*C2HData)(nil)
	_ Message = (*R2T)(nil)
	_ framer  = (*CapsuleCmd)(nil)
	_ framer  = (*H2CData)(nil)
	_ framer  = (*C2HData)(nil)
)
