package auth

import (
	"encoding/binary"
	"fmt"
)

// Security protocol of Authentication Send/Receive (CDW10 SECP) and the
// SPSP0/SPSP1 values DH-HMAC-CHAP uses.
const (
	SECP  uint8 = 0xE9
	SPSP0 uint8 = 0x01
	SPSP1 uint8 = 0x01
)

// Message ids (auth_id). Negotiate is a common message (auth_type 0), the
// others DH-HMAC-CHAP messages (auth_type 1).
const (
	Negotiate uint8 = 0x00
	Challenge uint8 = 0x01
	Reply     uint8 = 0x02
	Success1  uint8 = 0x03
	Success2  uint8 = 0x04
	Failure2  uint8 = 0xF0 // host to controller
	Failure1  uint8 = 0xF1 // controller to host
)

// Failure reason code explanations (reason code 1, "authentication failed").
const (
	ExplFailed           uint8 = 0x01
	ExplProtocolUnusable uint8 = 0x02
	ExplHashUnusable     uint8 = 0x04
	ExplDHGroupUnusable  uint8 = 0x05
	ExplIncorrectPayload uint8 = 0x06
	ExplIncorrectMessage uint8 = 0x07
)

// MaxMessage bounds what Parse accepts (Negotiate with 255 descriptors).
const MaxMessage = 8 + 255*64

// Message is one authentication message. Which fields apply depends on ID:
//
//	Negotiate: TID, SCC, Hashes, Groups (one DH-HMAC-CHAP descriptor)
//	Challenge: TID, Hash, Group, Seq, C (challenge), DHValue
//	Reply:     TID, R (response), CValid, Seq, C (host's challenge), DHValue
//	Success1:  TID, RValid, R (controller's response)
//	Success2:  TID
//	Failure1/2: TID, Reason, Explanation
type Message struct {
	ID          uint8
	TID         uint16
	SCC         uint8
	Hashes      []uint8
	Groups      []uint8
	Hash        uint8
	Group       uint8
	Seq         uint32
	C, R        []byte
	DHValue     []byte
	CValid      bool
	RValid      bool
	Reason      uint8
	Explanation uint8
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// Marshal encodes m. Lengths must fit their fields (hl one byte, dhvlen two
// bytes, at most 30 ids of each kind); Marshal panics otherwise, since only
// our own code builds messages.
func (m *Message) Marshal() []byte {
	var b []byte
	hdr := func(typ uint8, n int) {
		b = make([]byte, n)
		b[0], b[1] = typ, m.ID
		binary.LittleEndian.PutUint16(b[4:], m.TID)
	}
	switch m.ID {
	case Negotiate:
		if len(m.Hashes) > 30 || len(m.Groups) > 30 {
			panic("auth: more than 30 ids")
		}
		hdr(0, 8+64)
		b[6], b[7] = m.SCC, 1
		d := b[8:]
		d[0], d[2], d[3] = 1, uint8(len(m.Hashes)), uint8(len(m.Groups))
		copy(d[4:], m.Hashes)
		copy(d[4+30:], m.Groups)
	case Challenge:
		hdr(1, 16)
		b[6], b[8], b[9] = uint8(len(m.C)), m.Hash, m.Group
		binary.LittleEndian.PutUint16(b[10:], uint16(len(m.DHValue)))
		binary.LittleEndian.PutUint32(b[12:], m.Seq)
		b = append(append(b, m.C...), m.DHValue...)
	case Reply:
		if len(m.C) != 0 && len(m.C) != len(m.R) {
			panic("auth: reply challenge and response lengths differ")
		}
		hdr(1, 16)
		b[6], b[8] = uint8(len(m.R)), b2u(m.CValid)
		binary.LittleEndian.PutUint16(b[10:], uint16(len(m.DHValue)))
		binary.LittleEndian.PutUint32(b[12:], m.Seq)
		c := m.C
		if len(c) == 0 {
			c = make([]byte, len(m.R)) // the field is there, zero, when CVALID is clear
		}
		b = append(append(append(b, m.R...), c...), m.DHValue...)
	case Success1:
		hdr(1, 16)
		b[6], b[8] = uint8(len(m.R)), b2u(m.RValid)
		b = append(b, m.R...)
	case Success2:
		hdr(1, 16)
	case Failure1, Failure2:
		// Common messages (auth type 0), as the specification, SPDK
		// (lib/nvmf/auth.c) and Linux send them.
		hdr(0, 8)
		b[6], b[7] = m.Reason, m.Explanation
	default:
		panic(fmt.Sprintf("auth: unknown message id %#x", m.ID))
	}
	return b
}

// Parse decodes one message; trailing bytes beyond the message (an
// allocation longer than the message) are ignored.
func Parse(b []byte) (*Message, error) {
	if len(b) > MaxMessage {
		b = b[:MaxMessage]
	}
	if len(b) < 8 {
		return nil, fmt.Errorf("nvme auth: message is %d bytes, shorter than its header", len(b))
	}
	m := &Message{ID: b[1], TID: binary.LittleEndian.Uint16(b[4:])}
	want := uint8(1)
	if m.ID == Negotiate || m.ID == Failure1 || m.ID == Failure2 {
		want = 0
	}
	// Failures are common messages (type 0); kvtier before 2026-12 sent
	// them as type 1, which is still accepted.
	if b[0] != want && !(b[0] == 1 && (m.ID == Failure1 || m.ID == Failure2)) {
		return nil, fmt.Errorf("nvme auth: message %#x has auth type %d, want %d", m.ID, b[0], want)
	}
	need16 := func() error {
		if len(b) < 16 {
			return fmt.Errorf("nvme auth: message %#x is %d bytes, want at least 16", m.ID, len(b))
		}
		return nil
	}
	switch m.ID {
	case Negotiate:
		m.SCC = b[6]
		napd := int(b[7])
		if napd == 0 || len(b) < 8+64*napd {
			return nil, fmt.Errorf("nvme auth: negotiate with %d descriptors in %d bytes", napd, len(b))
		}
		for i := range napd {
			d := b[8+64*i : 8+64*(i+1)]
			if d[0] != 1 {
				continue // not DH-HMAC-CHAP
			}
			if d[2] > 30 || d[3] > 30 {
				return nil, fmt.Errorf("nvme auth: negotiate descriptor lists %d hashes and %d groups (max 30)", d[2], d[3])
			}
			m.Hashes = append([]uint8(nil), d[4:4+d[2]]...)
			m.Groups = append([]uint8(nil), d[34:34+d[3]]...)
			return m, nil
		}
		return nil, fmt.Errorf("nvme auth: negotiate offers no DH-HMAC-CHAP descriptor")
	case Challenge, Reply:
		if err := need16(); err != nil {
			return nil, err
		}
		hl, dhl := int(b[6]), int(binary.LittleEndian.Uint16(b[10:]))
		m.Seq = binary.LittleEndian.Uint32(b[12:])
		if hl == 0 {
			return nil, fmt.Errorf("nvme auth: message %#x with hash length 0", m.ID)
		}
		n := 16 + hl + dhl
		if m.ID == Reply {
			n += hl
		}
		if len(b) < n {
			return nil, fmt.Errorf("nvme auth: message %#x is %d bytes, want %d", m.ID, len(b), n)
		}
		p := b[16:]
		if m.ID == Challenge {
			m.Hash, m.Group = b[8], b[9]
			m.C = append([]byte(nil), p[:hl]...)
		} else {
			m.CValid = b[8]&1 != 0
			m.R = append([]byte(nil), p[:hl]...)
			p = p[hl:]
			if m.CValid {
				m.C = append([]byte(nil), p[:hl]...)
			}
		}
		m.DHValue = append([]byte(nil), p[hl:hl+dhl]...)
	case Success1:
		if err := need16(); err != nil {
			return nil, err
		}
		m.RValid = b[8]&1 != 0
		if m.RValid {
			hl := int(b[6])
			if len(b) < 16+hl {
				return nil, fmt.Errorf("nvme auth: success1 is %d bytes, want %d", len(b), 16+hl)
			}
			m.R = append([]byte(nil), b[16:16+hl]...)
		}
	case Success2:
		if err := need16(); err != nil {
			return nil, err
		}
	case Failure1, Failure2:
		m.Reason, m.Explanation = b[6], b[7]
	default:
		return nil, fmt.Errorf("nvme auth: unknown message id %#x", m.ID)
	}
	return m, nil
}

// FailureError is a Failure1/Failure2 message or a refusal to be sent as one.
type FailureError struct {
	Explanation uint8
	Msg         string
}

func (e *FailureError) Error() string {
	return fmt.Sprintf("nvme auth: authentication failed (%s): %s", ExplanationName(e.Explanation), e.Msg)
}

// ExplanationName names a failure reason code explanation.
func ExplanationName(x uint8) string {
	switch x {
	case ExplFailed:
		return "failed"
	case ExplProtocolUnusable:
		return "protocol not usable"
	case ExplHashUnusable:
		return "hash function not usable"
	case ExplDHGroupUnusable:
		return "DH group not usable"
	case ExplIncorrectPayload:
		return "incorrect payload"
	case ExplIncorrectMessage:
		return "incorrect protocol message"
	}
	return fmt.Sprintf("explanation %#x", x)
}
