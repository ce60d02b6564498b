package pdu

import "encoding/binary"

// SGL descriptor type bytes used on NVMe/TCP.
const (
	// SGLInCapsule is a data block descriptor with the offset subtype: data
	// travels in the capsule at Addr.
	SGLInCapsule uint8 = 0x01
	// SGLTransport is a transport data block (subtype transport specific):
	// data moves by C2HData, or R2T + H2CData.
	SGLTransport uint8 = 0x5A
)

// SGL is the 16-byte SGL descriptor in the SQE's DPTR field.
type SGL struct {
	Addr uint64
	Len  uint32
	Rsvd [3]byte
	Type uint8
}

// Command is the 64-byte submission queue entry (SQE). Every byte of the
// SQE has a field, so Marshal(Unmarshal(b)) == b.
type Command struct {
	Opcode uint8
	Flags  uint8 // FUSE bits 1:0, PSDT bits 7:6 (0x40 = SGL, required on fabrics)
	CID    uint16
	NSID   uint32
	CDW2   uint32
	CDW3   uint32
	MPTR   uint64
	SGL    SGL
	CDW10  uint32
	CDW11  uint32
	CDW12  uint32
	CDW13  uint32
	CDW14  uint32
	CDW15  uint32
}

// Marshal writes the SQE into b[:64].
func (c *Command) Marshal(b []byte) {
	_ = b[63]
	b[0] = c.Opcode
	b[1] = c.Flags
	le := binary.LittleEndian
	le.PutUint16(b[2:], c.CID)
	le.PutUint32(b[4:], c.NSID)
	le.PutUint32(b[8:], c.CDW2)
	le.PutUint32(b[12:], c.CDW3)
	le.PutUint64(b[16:], c.MPTR)
	le.PutUint64(b[24:], c.SGL.Addr)
	le.PutUint32(b[32:], c.SGL.Len)
	copy(b[36:39], c.SGL.Rsvd[:])
	b[39] = c.SGL.Type
	le.PutUint32(b[40:], c.CDW10)
	le.PutUint32(b[44:], c.CDW11)
	le.PutUint32(b[48:], c.CDW12)
	le.PutUint32(b[52:], c.CDW13)
	le.PutUint32(b[56:], c.CDW14)
	le.PutUint32(b[60:], c.CDW15)
}

// Unmarshal reads the SQE from b[:64].
func (c *Command) Unmarshal(b []byte) {
	_ = b[63]
	le := binary.LittleEndian
	c.Opcode = b[0]
	c.Flags = b[1]
	c.CID = le.Uint16(b[2:])
	c.NSID = le.Uint32(b[4:])
	c.CDW2 = le.Uint32(b[8:])
	c.CDW3 = le.Uint32(b[12:])
	c.MPTR = le.Uint64(b[16:])
	c.SGL.Addr = le.Uint64(b[24:])
	c.SGL.Len = le.Uint32(b[32:])
	copy(c.SGL.Rsvd[:], b[36:39])
	c.SGL.Type = b[39]
	c.CDW10 = le.Uint32(b[40:])
	c.CDW11 = le.Uint32(b[44:])
	c.CDW12 = le.Uint32(b[48:])
	c.CDW13 = le.Uint32(b[52:])
	c.CDW14 = le.Uint32(b[56:])
	c.CDW15 = le.Uint32(b[60:])
}

// FabricsType is the FCTYPE of a Fabrics command (opcode 0x7F): SQE byte 4,
// the low byte of NSID.
func (c *Command) FabricsType() uint8 { return uint8(c.NSID) }

// Completion is the 16-byte completion queue entry (CQE).
type Completion struct {
	DW0    uint32
	DW1    uint32
	SQHD   uint16
	SQID   uint16
	CID    uint16
	Status uint16 // bit0 phase, 8:1 SC, 11:9 SCT, 13:12 CRD, 14 More, 15 DNR
}

// Marshal writes the CQE into b[:16].
func (c *Completion) Marshal(b []byte) {
	_ = b[15]
	le := binary.LittleEndian
	le.PutUint32(b[0:], c.DW0)
	le.PutUint32(b[4:], c.DW1)
	le.PutUint16(b[8:], c.SQHD)
	le.PutUint16(b[10:], c.SQID)
	le.PutUint16(b[12:], c.CID)
	le.PutUint16(b[14:], c.Status)
}

// Unmarshal reads the CQE from b[:16].
func (c *Completion) Unmarshal(b []byte) {
	_ = b[15]
	le := binary.LittleEndian
	c.DW0 = le.Uint32(b[0:])
	c.DW1 = le.Uint32(b[4:])
	c.SQHD = le.Uint16(b[8:])
	c.SQID = le.Uint16(b[10:])
	c.CID = le.Uint16(b[12:])
	c.Status = le.Uint16(b[14:])
}

// SCT returns the status code type.
func (c Completion) SCT() uint8 { return uint8(c.Status>>9) & 0x7 }

// SC returns the status code.
func (c Completion) SC() uint8 { return uint8(c.Status >> 1) }

// OK reports whether the status is successful completion.
func (c Completion) OK() bool { return c.Status&0xFFFE == 0 }

// MakeStatus builds the status field (phase 0) from SCT, SC and DNR.
func MakeStatus(sct, sc uint8, dnr bool) uint16 {
	s := uint16(sc)<<1 | uint16(sct&7)<<9
	if dnr {
		s |= 1 << 15
	}
	return s
}
