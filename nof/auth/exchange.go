package auth

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
)

func random(n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return b
}

func seqnum() uint32 {
	for {
		if s := binary.LittleEndian.Uint32(random(4)); s != 0 {
			return s
		}
	}
}

// DefaultGroups is the DH group preference of both sides: ffdhe2048 first,
// then NULL (no DH: the responses alone, without forward secrecy).
var DefaultGroups = []uint8{DHFFDHE2048, DHNull}

// Controller runs the controller side of one queue's DH-HMAC-CHAP
// transaction: Send takes what the host sent with Authentication Send,
// Receive gives what Authentication Receive returns. Not safe for
// concurrent use (a queue's commands are handled in order).
type Controller struct {
	HostSecret *Secret // the host's secret (required)
	CtrlSecret *Secret // the controller's secret; nil: no bidirectional authentication
	HostNQN    string
	SubNQN     string
	Groups     []uint8 // groups accepted, in preference order [DefaultGroups]

	step    uint8 // next message expected from the host
	out     *Message
	tid     uint16
	group   uint8
	s1      uint32
	c1      []byte
	dh      *DH
	authed  bool
	failure error
}

// Authenticated reports whether the transaction succeeded.
func (c *Controller) Authenticated() bool { return c.authed }

// Err is why the transaction failed (nil while it goes on or succeeded).
func (c *Controller) Err() error { return c.failure }

func (c *Controller) fail(expl uint8, format string, a ...any) {
	c.failure = &FailureError{Explanation: expl, Msg: fmt.Sprintf(format, a...)}
	c.out = &Message{ID: Failure1, TID: c.tid, Reason: 1, Explanation: expl}
	c.step = 0xFF
	c.authed = false
}

// Send handles one host message. Protocol errors do not fail the command:
// they turn the next Receive into a Failure1, as the specification has it.
func (c *Controller) Send(b []byte) {
	m, err := Parse(b)
	if err != nil {
		c.fail(ExplIncorrectPayload, "%v", err)
		return
	}
	if m.ID == Failure2 {
		c.failure = &FailureError{Explanation: m.Explanation, Msg: "host sent Failure2"}
		c.step, c.out, c.authed = 0xFF, nil, false
		return
	}
	if m.ID == Negotiate {
		// A new transaction (also re-authentication of an authenticated queue).
		c.step, c.authed, c.failure = Negotiate, false, nil
	}
	if m.ID != c.step {
		c.fail(ExplIncorrectMessage, "message %#x when %#x was expected", m.ID, c.step)
		return
	}
	if m.ID != Negotiate && m.TID != c.tid {
		c.fail(ExplIncorrectPayload, "transaction id %d, want %d", m.TID, c.tid)
		return
	}
	switch m.ID {
	case Negotiate:
		c.tid = m.TID
		if m.SCC != 0 {
			c.fail(ExplProtocolUnusable, "secure channel concatenation %d not supported", m.SCC)
			return
		}
		if !slices.Contains(m.Hashes, HashSHA256) {
			c.fail(ExplHashUnusable, "host offers hashes %v, SHA-256 (1) needed", m.Hashes)
			return
		}
		groups := c.Groups
		if groups == nil {
			groups = DefaultGroups
		}
		found := false
		for _, g := range groups {
			if slices.Contains(m.Groups, g) {
				c.group, found = g, true
				break
			}
		}
		if !found {
			c.fail(ExplDHGroupUnusable, "host offers DH groups %v, none of %v", m.Groups, groups)
			return
		}
		c.s1, c.c1, c.dh = seqnum(), random(HashLen), nil
		ch := &Message{ID: Challenge, TID: c.tid, Hash: HashSHA256, Group: c.group, Seq: c.s1, C: c.c1}
		if c.group != DHNull {
			dh, err := NewDH(c.group)
			if err != nil {
				c.fail(ExplDHGroupUnusable, "%v", err)
				return
			}
			c.dh, ch.DHValue = dh, dh.Pub
		}
		c.out, c.step = ch, Reply
	case Reply:
		if len(m.R) != HashLen {
			c.fail(ExplIncorrectPayload, "response is %d bytes, want %d", len(m.R), HashLen)
			return
		}
		var skey []byte
		if c.dh != nil {
			if skey, err = c.dh.Shared(m.DHValue); err != nil {
				c.fail(ExplIncorrectPayload, "%v", err)
				return
			}
		} else if len(m.DHValue) != 0 {
			c.fail(ExplIncorrectPayload, "DH value with the NULL group")
			return
		}
		want := HostResponse(c.HostSecret.TransformedKey(c.HostNQN), AugmentedChallenge(c.c1, skey), c.s1, c.tid, 0, c.HostNQN, c.SubNQN)
		if !Equal(want, m.R) {
			c.fail(ExplFailed, "host response does not match the host secret")
			return
		}
		s1 := &Message{ID: Success1, TID: c.tid, R: make([]byte, HashLen)}
		c.step = 0xFE // done after Success1 is read
		if m.CValid {
			if c.CtrlSecret == nil {
				c.fail(ExplFailed, "host asks for bidirectional authentication; no controller secret configured")
				return
			}
			s1.RValid = true
			s1.R = ControllerResponse(c.CtrlSecret.TransformedKey(c.SubNQN), AugmentedChallenge(m.C, skey), m.Seq, c.tid, c.SubNQN, c.HostNQN)
			c.step = Success2
		}
		c.out = s1
	case Success2:
		c.authed, c.step = true, 0xFF
	}
}

// Receive returns the controller's next message: a Failure1 when none is
// due (the host asked out of turn).
func (c *Controller) Receive() []byte {
	m := c.out
	if m == nil {
		c.fail(ExplIncorrectMessage, "authentication receive with no message due")
		m = c.out
	}
	c.out = nil
	if m.ID == Success1 && c.step == 0xFE {
		c.authed, c.step = true, 0xFF // unidirectional: done
	}
	return m.Marshal()
}

// Host runs the host side of one transaction over send (Authentication
// Send) and recv (Authentication Receive). With CtrlSecret set it also
// authenticates the controller (bidirectional).
type Host struct {
	HostSecret *Secret
	CtrlSecret *Secret
	HostNQN    string
	SubNQN     string
	Groups     []uint8 // groups offered [DefaultGroups]
	TID        uint16
}

// Run performs the transaction; nil means the controller accepted us (and,
// bidirectionally, we accepted it).
func (h *Host) Run(send func([]byte) error, recv func() ([]byte, error)) error {
	groups := h.Groups
	if groups == nil {
		groups = DefaultGroups
	}
	if err := send((&Message{ID: Negotiate, TID: h.TID, Hashes: []uint8{HashSHA256}, Groups: groups}).Marshal()); err != nil {
		return err
	}
	ch, err := h.recv(recv, Challenge)
	if err != nil {
		return err
	}
	failure := func(expl uint8, format string, a ...any) error {
		send((&Message{ID: Failure2, TID: h.TID, Reason: 1, Explanation: expl}).Marshal())
		return &FailureError{Explanation: expl, Msg: fmt.Sprintf(format, a...)}
	}
	if ch.Hash != HashSHA256 || len(ch.C) != HashLen {
		return failure(ExplHashUnusable, "controller chose hash %d with a %d-byte challenge", ch.Hash, len(ch.C))
	}
	if !slices.Contains(groups, ch.Group) {
		return failure(ExplDHGroupUnusable, "controller chose DH group %d, not offered", ch.Group)
	}
	rep := &Message{ID: Reply, TID: h.TID}
	var skey []byte
	if ch.Group != DHNull {
		dh, err := NewDH(ch.Group)
		if err != nil {
			return failure(ExplDHGroupUnusable, "%v", err)
		}
		if skey, err = dh.Shared(ch.DHValue); err != nil {
			return failure(ExplIncorrectPayload, "%v", err)
		}
		rep.DHValue = dh.Pub
	}
	rep.R = HostResponse(h.HostSecret.TransformedKey(h.HostNQN), AugmentedChallenge(ch.C, skey), ch.Seq, h.TID, 0, h.HostNQN, h.SubNQN)
	if h.CtrlSecret != nil {
		rep.CValid, rep.Seq, rep.C = true, seqnum(), random(HashLen)
	}
	if err := send(rep.Marshal()); err != nil {
		return err
	}
	s1, err := h.recv(recv, Success1)
	if err != nil {
		return err
	}
	if h.CtrlSecret == nil {
		return nil
	}
	want := ControllerResponse(h.CtrlSecret.TransformedKey(h.SubNQN), AugmentedChallenge(rep.C, skey), rep.Seq, h.TID, h.SubNQN, h.HostNQN)
	if !s1.RValid || !Equal(want, s1.R) {
		return failure(ExplFailed, "controller response does not match the controller secret")
	}
	return send((&Message{ID: Success2, TID: h.TID}).Marshal())
}

func (h *Host) recv(recv func() ([]byte, error), want uint8) (*Message, error) {
	b, err := recv()
	if err != nil {
		return nil, err
	}
	m, err := Parse(b)
	if err != nil {
		return nil, err
	}
	if m.ID == Failure1 {
		return nil, &FailureError{Explanation: m.Explanation, Msg: "controller sent Failure1"}
	}
	if m.ID != want || m.TID != h.TID {
		return nil, fmt.Errorf("nvme auth: got message %#x (transaction %d), want %#x (transaction %d)", m.ID, m.TID, want, h.TID)
	}
	return m, nil
}
