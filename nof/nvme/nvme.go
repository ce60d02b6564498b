package nvme

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
)

// DiscoveryNQN is the well-known NQN of the discovery subsystem.
const DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"

// Admin opcodes.
const (
	AdminGetLogPage   uint8 = 0x02
	AdminIdentify     uint8 = 0x06
	AdminAbort        uint8 = 0x08
	AdminSetFeatures  uint8 = 0x09
	AdminGetFeatures  uint8 = 0x0A
	AdminAsyncEvent   uint8 = 0x0C
	AdminKeepAlive    uint8 = 0x18
	OpcodeFabrics     uint8 = 0x7F
	FabricsPropSet    uint8 = 0x00
	FabricsConnect    uint8 = 0x01
	FabricsPropGet    uint8 = 0x04
	FabricsAuthSend   uint8 = 0x05
	FabricsAuthRecv   uint8 = 0x06
	FabricsDisconnect uint8 = 0x08
)

// NVM command set opcodes.
const (
	CmdFlush       uint8 = 0x00
	CmdWrite       uint8 = 0x01
	CmdRead        uint8 = 0x02
	CmdWriteZeroes uint8 = 0x08
	CmdDSM         uint8 = 0x09
)

// Feature identifiers.
const (
	FeatArbitration   uint8 = 0x01
	FeatPowerMgmt     uint8 = 0x02
	FeatTempThreshold uint8 = 0x04
	FeatErrorRecovery uint8 = 0x05
	FeatVolatileWC    uint8 = 0x06
	FeatNumQueues     uint8 = 0x07
	FeatIRQCoalescing uint8 = 0x08
	FeatAsyncEvent    uint8 = 0x0B
	FeatKeepAlive     uint8 = 0x0F
)

// Log page identifiers.
const (
	LogError     uint8 = 0x01
	LogSMART     uint8 = 0x02
	LogFirmware  uint8 = 0x03
	LogEffects   uint8 = 0x05
	LogDiscovery uint8 = 0x70
)

// Property offsets.
const (
	PropCAP  uint32 = 0x00
	PropVS   uint32 = 0x08
	PropCC   uint32 = 0x14
	PropCSTS uint32 = 0x1C
)

// Status code types.
const (
	SCTGeneric  uint8 = 0
	SCTSpecific uint8 = 1
)

// Generic status codes (SCT 0).
const (
	SCSuccess           uint8 = 0x00
	SCInvalidOpcode     uint8 = 0x01
	SCInvalidField      uint8 = 0x02
	SCDataTransferError uint8 = 0x04
	SCInternal          uint8 = 0x06
	SCAbortRequested    uint8 = 0x07
	SCAbortSQDeleted    uint8 = 0x08
	SCInvalidNamespace  uint8 = 0x0B
	SCSequenceError     uint8 = 0x0C
	SCSGLLengthInvalid  uint8 = 0x0F
	SCTransientTranspt  uint8 = 0x22
	SCLBAOutOfRange     uint8 = 0x80
)

// Command specific status codes (SCT 1).
const (
	SCInvalidQueueID      uint8 = 0x01
	SCAERLExceeded        uint8 = 0x05
	SCInvalidLogPage      uint8 = 0x09
	SCConnectIncompatible uint8 = 0x80
	SCConnectBusy         uint8 = 0x81
	SCConnectInvalidParam uint8 = 0x82
	SCConnectInvalidHost  uint8 = 0x84
	SCAuthRequired        uint8 = 0x91
)

// ConnectATR is the Connect response DW0 bit saying the host must
// authenticate the queue (AUTHREQ.ATR) before other commands are served.
const ConnectATR uint32 = 1 << 17

// StatusError is a non-success NVMe completion status.
type StatusError struct {
	SCT, SC uint8
	DNR     bool
	DW0     uint32 // command specific result (e.g. Connect IPO/IATTR)
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("nvme: status SCT 0x%x SC 0x%02x (%s)", e.SCT, e.SC, statusName(e.SCT, e.SC))
}

func statusName(sct, sc uint8) string {
	if sct == SCTGeneric {
		switch sc {
		case SCInvalidOpcode:
			return "invalid opcode"
		case SCInvalidField:
			return "invalid field"
		case SCDataTransferError:
			return "data transfer error"
		case SCInternal:
			return "internal error"
		case SCAbortSQDeleted:
			return "aborted: SQ deleted"
		case SCInvalidNamespace:
			return "invalid namespace or format"
		case SCSequenceError:
			return "command sequence error"
		case SCTransientTranspt:
			return "transient transport error"
		case SCLBAOutOfRange:
			return "LBA out of range"
		}
	}
	if sct == SCTSpecific {
		switch sc {
		case SCConnectIncompatible:
			return "connect: incompatible format"
		case SCConnectBusy:
			return "connect: controller busy"
		case SCConnectInvalidParam:
			return "connect: invalid parameter"
		case SCConnectInvalidHost:
			return "connect: host not allowed"
		case SCInvalidLogPage:
			return "invalid log page"
		case SCAuthRequired:
			return "authentication required"
		}
	}
	return "unknown"
}

// Status packs the error into the CQE status field.
func (e *StatusError) Status() uint16 {
	s := uint16(e.SC)<<1 | uint16(e.SCT&7)<<9
	if e.DNR {
		s |= 1 << 15
	}
	return s
}

// StatusFrom decodes a CQE status field; nil on success.
func StatusFrom(status uint16, dw0 uint32) error {
	if status&0xFFFE == 0 {
		return nil
	}
	return &StatusError{SCT: uint8(status>>9) & 7, SC: uint8(status >> 1), DNR: status&(1<<15) != 0, DW0: dw0}
}

// Errf returns a generic-status error with DNR set.
func Errf(sct, sc uint8) *StatusError { return &StatusError{SCT: sct, SC: sc, DNR: true} }

// ConnectData is the 1024-byte Fabrics Connect data.
type ConnectData struct {
	HostID  [16]byte
	CNTLID  uint16
	SubNQN  string
	HostNQN string
}

// ConnectDataLen is the size of Connect data.
const ConnectDataLen = 1024

// Marshal returns the 1024-byte encoding.
func (c *ConnectData) Marshal() []byte {
	b := make([]byte, ConnectDataLen)
	copy(b[0:16], c.HostID[:])
	binary.LittleEndian.PutUint16(b[16:], c.CNTLID)
	copy(b[256:511], c.SubNQN)
	copy(b[512:767], c.HostNQN)
	return b
}

// ParseConnectData decodes Connect data; b must be 1024 bytes.
func ParseConnectData(b []byte) (ConnectData, error) {
	if len(b) != ConnectDataLen {
		return ConnectData{}, fmt.Errorf("nvme: connect data is %d bytes, want 1024", len(b))
	}
	var c ConnectData
	copy(c.HostID[:], b[0:16])
	c.CNTLID = binary.LittleEndian.Uint16(b[16:])
	c.SubNQN = cstr(b[256:512])
	c.HostNQN = cstr(b[512:768])
	return c, nil
}

func cstr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// spaced writes s space padded; an empty s leaves dst zero (as SPDK's
// discovery controller reports its SN and MN).
func spaced(dst []byte, s string) {
	if s == "" {
		return
	}
	for i := range dst {
		dst[i] = ' '
	}
	copy(dst, s)
}

func trimSpaced(b []byte) string { return strings.TrimRight(cstr(b), " ") }
