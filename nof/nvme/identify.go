package nvme

import (
	"encoding/binary"
	"fmt"
)

// IdentifyLen is the size of every Identify data structure.
const IdentifyLen = 4096

// Controller types (Identify Controller CNTRLTYPE).
const (
	CtrlTypeIO        uint8 = 1
	CtrlTypeDiscovery uint8 = 2
)

// IdentifyController holds the Identify Controller fields kvtier sets or
// reads; everything else is zero.
type IdentifyController struct {
	VID, SSVID uint16
	Serial     string
	Model      string
	Firmware   string
	RAB        uint8
	CMIC       uint8
	MDTS       uint8
	CNTLID     uint16
	Version    uint32
	OAES       uint32
	CTRATT     uint32
	CtrlType   uint8
	ACL, AERL  uint8
	FRMW       uint8
	LPA        uint8
	ELPE       uint8
	KAS        uint16
	SQES, CQES uint8
	MAXCMD     uint16
	NN         uint32
	ONCS       uint16
	VWC        uint8
	SGLS       uint32
	SubNQN     string
	IOCCSZ     uint32
	IORCSZ     uint32
	ICDOFF     uint16
	FCATT      uint8
	MSDBD      uint8
}

// Marshal returns the 4096-byte structure.
func (c *IdentifyController) Marshal() []byte {
	b := make([]byte, IdentifyLen)
	le := binary.LittleEndian
	le.PutUint16(b[0:], c.VID)
	le.PutUint16(b[2:], c.SSVID)
	spaced(b[4:24], c.Serial)
	spaced(b[24:64], c.Model)
	spaced(b[64:72], c.Firmware)
	b[72] = c.RAB
	b[76] = c.CMIC
	b[77] = c.MDTS
	le.PutUint16(b[78:], c.CNTLID)
	le.PutUint32(b[80:], c.Version)
	le.PutUint32(b[92:], c.OAES)
	le.PutUint32(b[96:], c.CTRATT)
	b[111] = c.CtrlType
	b[258] = c.ACL
	b[259] = c.AERL
	b[260] = c.FRMW
	b[261] = c.LPA
	b[262] = c.ELPE
	le.PutUint16(b[320:], c.KAS)
	b[512] = c.SQES
	b[513] = c.CQES
	le.PutUint16(b[514:], c.MAXCMD)
	le.PutUint32(b[516:], c.NN)
	le.PutUint16(b[520:], c.ONCS)
	b[525] = c.VWC
	le.PutUint32(b[536:], c.SGLS)
	copy(b[768:1023], c.SubNQN)
	le.PutUint32(b[1792:], c.IOCCSZ)
	le.PutUint32(b[1796:], c.IORCSZ)
	le.PutUint16(b[1800:], c.ICDOFF)
	b[1802] = c.FCATT
	b[1803] = c.MSDBD
	return b
}

// ParseIdentifyController decodes the fields of IdentifyController.
func ParseIdentifyController(b []byte) (IdentifyController, error) {
	if len(b) < IdentifyLen {
		return IdentifyController{}, fmt.Errorf("nvme: identify controller data is %d bytes", len(b))
	}
	le := binary.LittleEndian
	return IdentifyController{
		VID: le.Uint16(b[0:]), SSVID: le.Uint16(b[2:]),
		Serial: trimSpaced(b[4:24]), Model: trimSpaced(b[24:64]), Firmware: trimSpaced(b[64:72]),
		RAB: b[72], CMIC: b[76], MDTS: b[77], CNTLID: le.Uint16(b[78:]), Version: le.Uint32(b[80:]),
		OAES: le.Uint32(b[92:]), CTRATT: le.Uint32(b[96:]), CtrlType: b[111],
		ACL: b[258], AERL: b[259], FRMW: b[260], LPA: b[261], ELPE: b[262], KAS: le.Uint16(b[320:]),
		SQES: b[512], CQES: b[513], MAXCMD: le.Uint16(b[514:]), NN: le.Uint32(b[516:]), ONCS: le.Uint16(b[520:]),
		VWC: b[525], SGLS: le.Uint32(b[536:]), SubNQN: cstr(b[768:1024]),
		IOCCSZ: le.Uint32(b[1792:]), IORCSZ: le.Uint32(b[1796:]), ICDOFF: le.Uint16(b[1800:]), FCATT: b[1802], MSDBD: b[1803],
	}, nil
}

// IdentifyNamespace holds the Identify Namespace fields kvtier uses.
type IdentifyNamespace struct {
	NSZE, NCAP, NUSE uint64
	NSFEAT           uint8
	NLBAF            uint8
	FLBAS            uint8
	NMIC             uint8
	NGUID            [16]byte
	EUI64            [8]byte
	LBADS            uint8 // log2 of the block size (LBA format 0)
}

// BlockSize returns 1<<LBADS.
func (n *IdentifyNamespace) BlockSize() int { return 1 << n.LBADS }

// Marshal returns the 4096-byte structure.
func (n *IdentifyNamespace) Marshal() []byte {
	b := make([]byte, IdentifyLen)
	le := binary.LittleEndian
	le.PutUint64(b[0:], n.NSZE)
	le.PutUint64(b[8:], n.NCAP)
	le.PutUint64(b[16:], n.NUSE)
	b[24] = n.NSFEAT
	b[25] = n.NLBAF
	b[26] = n.FLBAS
	b[30] = n.NMIC
	copy(b[104:120], n.NGUID[:])
	copy(b[120:128], n.EUI64[:])
	le.PutUint32(b[128:], uint32(n.LBADS)<<16)
	return b
}

// ParseIdentifyNamespace decodes the fields of IdentifyNamespace.
func ParseIdentifyNamespace(b []byte) (IdentifyNamespace, error) {
	if len(b) < IdentifyLen {
		return IdentifyNamespace{}, fmt.Errorf("nvme: identify namespace data is %d bytes", len(b))
	}
	le := binary.LittleEndian
	n := IdentifyNamespace{NSZE: le.Uint64(b[0:]), NCAP: le.Uint64(b[8:]), NUSE: le.Uint64(b[16:]),
		NSFEAT: b[24], NLBAF: b[25], FLBAS: b[26], NMIC: b[30]}
	copy(n.NGUID[:], b[104:120])
	copy(n.EUI64[:], b[120:128])
	fmtIdx := int(n.FLBAS & 0xF)
	n.LBADS = uint8(le.Uint32(b[128+4*fmtIdx:]) >> 16)
	return n, nil
}

// ActiveNSList encodes the CNS 2 list: NSIDs greater than after, ascending.
func ActiveNSList(nsids []uint32, after uint32) []byte {
	b := make([]byte, IdentifyLen)
	k := 0
	for _, id := range nsids {
		if id > after && k < IdentifyLen/4 {
			binary.LittleEndian.PutUint32(b[4*k:], id)
			k++
		}
	}
	return b
}

// ParseActiveNSList decodes a CNS 2 list.
func ParseActiveNSList(b []byte) []uint32 {
	var out []uint32
	for i := 0; i+4 <= len(b); i += 4 {
		id := binary.LittleEndian.Uint32(b[i:])
		if id == 0 {
			break
		}
		out = append(out, id)
	}
	return out
}

// NSDescriptors encodes the CNS 3 list with an NGUID and a UUID descriptor.
func NSDescriptors(nguid [16]byte, uuid [16]byte) []byte {
	b := make([]byte, IdentifyLen)
	b[0], b[1] = 2, 16 // NIDT NGUID
	copy(b[4:20], nguid[:])
	b[20], b[21] = 3, 16 // NIDT UUID
	copy(b[24:40], uuid[:])
	return b
}

// DiscoveryEntry is one discovery log page entry.
type DiscoveryEntry struct {
	TrType  uint8 // 3 = TCP
	AdrFam  uint8 // 1 = IPv4, 2 = IPv6
	SubType uint8 // 2 = NVM subsystem, 3 = current discovery subsystem
	TReq    uint8
	PortID  uint16
	CNTLID  uint16
	ASQSZ   uint16
	TrSvcID string
	SubNQN  string
	TrAddr  string
}

// DiscoveryHeaderLen / DiscoveryEntryLen are the discovery log sizes.
const (
	DiscoveryHeaderLen = 1024
	DiscoveryEntryLen  = 1024
)

// DiscoveryLog encodes a discovery log page.
func DiscoveryLog(genctr uint64, entries []DiscoveryEntry) []byte {
	b := make([]byte, DiscoveryHeaderLen+DiscoveryEntryLen*len(entries))
	le := binary.LittleEndian
	le.PutUint64(b[0:], genctr)
	le.PutUint64(b[8:], uint64(len(entries)))
	for i, e := range entries {
		d := b[DiscoveryHeaderLen+i*DiscoveryEntryLen:]
		d[0], d[1], d[2], d[3] = e.TrType, e.AdrFam, e.SubType, e.TReq
		le.PutUint16(d[4:], e.PortID)
		le.PutUint16(d[6:], e.CNTLID)
		le.PutUint16(d[8:], e.ASQSZ)
		spaced(d[32:64], e.TrSvcID)
		copy(d[256:511], e.SubNQN)
		spaced(d[512:768], e.TrAddr)
	}
	return b
}

// ParseDiscoveryLog decodes a discovery log page (as many whole entries as
// b holds) and returns GENCTR, NUMREC and the entries.
func ParseDiscoveryLog(b []byte) (genctr, numrec uint64, entries []DiscoveryEntry, err error) {
	if len(b) < DiscoveryHeaderLen {
		return 0, 0, nil, fmt.Errorf("nvme: discovery log is %d bytes", len(b))
	}
	le := binary.LittleEndian
	genctr, numrec = le.Uint64(b[0:]), le.Uint64(b[8:])
	for i := 0; uint64(i) < numrec; i++ {
		off := DiscoveryHeaderLen + i*DiscoveryEntryLen
		if off+DiscoveryEntryLen > len(b) {
			break
		}
		d := b[off:]
		entries = append(entries, DiscoveryEntry{TrType: d[0], AdrFam: d[1], SubType: d[2], TReq: d[3],
			PortID: le.Uint16(d[4:]), CNTLID: le.Uint16(d[6:]), ASQSZ: le.Uint16(d[8:]),
			TrSvcID: trimSpaced(d[32:64]), SubNQN: cstr(d[256:512]), TrAddr: trimSpaced(d[512:768])})
	}
	return genctr, numrec, entries, nil
}
