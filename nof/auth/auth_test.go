package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/big"
	"strings"
	"testing"
)

func mkSecret(key []byte, hh string) string {
	raw := binary.LittleEndian.AppendUint32(append([]byte(nil), key...), crc32.ChecksumIEEE(key))
	return "DHHC-1:" + hh + ":" + base64.StdEncoding.EncodeToString(raw) + ":"
}

func TestParseSecret(t *testing.T) {
	key := bytes.Repeat([]byte{0x5a}, 32)
	for _, n := range []int{32, 48, 64} {
		for _, hh := range []string{"00", "01", "02", "03"} {
			s := mkSecret(bytes.Repeat([]byte{7}, n), hh)
			sec, err := ParseSecret(s)
			if err != nil {
				t.Fatalf("%s: %v", s, err)
			}
			if len(sec.Key) != n || sec.String() != s {
				t.Fatalf("round trip %s -> %s", s, sec.String())
			}
		}
	}
	good := mkSecret(key, "01")
	bad := map[string]string{
		"no prefix":  strings.TrimPrefix(good, "DHHC-1:"),
		"transform":  mkSecret(key, "04"),
		"length":     mkSecret(key[:31], "00"),
		"base64":     "DHHC-1:00:!!!!:",
		"no colon":   strings.TrimSuffix(good, ":"),
		"crc":        "DHHC-1:00:" + base64.StdEncoding.EncodeToString(append(append([]byte(nil), key...), 1, 2, 3, 4)) + ":",
		"empty":      "",
		"extra part": good + "x:",
	}
	for name, s := range bad {
		if _, err := ParseSecret(s); err == nil {
			t.Errorf("%s: %q accepted", name, s)
		}
	}
}

// The transformation, computed here from the specification's formula
// HMAC-H(key, NQN || "NVMe-over-Fabrics") with each hash.
func TestTransformedKey(t *testing.T) {
	key := make([]byte, 48)
	for i := range key {
		key[i] = byte(i)
	}
	nqn := "nqn.2014-08.org.nvmexpress:uuid:0c468c4d-a385-47e0-8299-6e95051277db"
	for hh, h := range map[uint8]func() []byte{
		0: func() []byte { return key },
		1: func() []byte {
			m := hmac.New(sha256.New, key)
			m.Write([]byte(nqn + "NVMe-over-Fabrics"))
			return m.Sum(nil)
		},
		2: func() []byte {
			m := hmac.New(sha512.New384, key)
			m.Write([]byte(nqn + "NVMe-over-Fabrics"))
			return m.Sum(nil)
		},
		3: func() []byte {
			m := hmac.New(sha512.New, key)
			m.Write([]byte(nqn + "NVMe-over-Fabrics"))
			return m.Sum(nil)
		},
	} {
		s := &Secret{Key: key, Transform: hh}
		if got := s.TransformedKey(nqn); !bytes.Equal(got, h()) {
			t.Errorf("transform %d: %x, want %x", hh, got, h())
		}
	}
}

// The responses, with their inputs laid out byte by byte as the
// specification lists them.
func TestResponsesKAT(t *testing.T) {
	key := bytes.Repeat([]byte{0x11}, 32)
	c := bytes.Repeat([]byte{0x22}, 32)
	host, sub := "nqn.2024-01.io.kvtier:host1", "nqn.2024-01.io.kvtier:sub1"
	in := append(append([]byte(nil), c...), 0x78, 0x56, 0x34, 0x12, 0xCD, 0xAB, 0x00)
	in = append(in, "HostHost"+host+"\x00"+sub...)
	m := hmac.New(sha256.New, key)
	m.Write(in)
	if got := HostResponse(key, c, 0x12345678, 0xABCD, 0, host, sub); !bytes.Equal(got, m.Sum(nil)) {
		t.Fatalf("host response %x, want %x", got, m.Sum(nil))
	}
	in = append(append([]byte(nil), c...), 0x78, 0x56, 0x34, 0x12, 0xCD, 0xAB, 0x00)
	in = append(in, "Controller"+sub+"\x00"+host...)
	m = hmac.New(sha256.New, key)
	m.Write(in)
	if got := ControllerResponse(key, c, 0x12345678, 0xABCD, sub, host); !bytes.Equal(got, m.Sum(nil)) {
		t.Fatalf("controller response %x, want %x", got, m.Sum(nil))
	}
	skey := []byte("session key")
	hk := sha256.Sum256(skey)
	m = hmac.New(sha256.New, hk[:])
	m.Write(c)
	if got := AugmentedChallenge(c, skey); !bytes.Equal(got, m.Sum(nil)) {
		t.Fatalf("augmented challenge %x", got)
	}
	if got := AugmentedChallenge(c, nil); !bytes.Equal(got, c) {
		t.Fatal("augmented challenge with the NULL group is not the challenge")
	}
}

// RFC 7919: p = 2^2048 - 2^1984 + (floor(2^1918 * e) + 560316) * 2^64 - 1.
func TestFFDHE2048Prime(t *testing.T) {
	const guard = 64
	scale := new(big.Int).Lsh(big.NewInt(1), 1918+guard)
	e, fact := new(big.Int), big.NewInt(1)
	for k := int64(0); k < 400; k++ {
		if k > 0 {
			fact.Mul(fact, big.NewInt(k))
		}
		e.Add(e, new(big.Int).Quo(scale, fact))
	}
	e.Rsh(e, guard)
	p := new(big.Int).Lsh(big.NewInt(1), 2048)
	p.Sub(p, new(big.Int).Lsh(big.NewInt(1), 1984))
	p.Add(p, new(big.Int).Lsh(e.Add(e, big.NewInt(560316)), 64))
	p.Sub(p, big.NewInt(1))
	if p.Cmp(Prime(DHFFDHE2048)) != 0 {
		t.Fatalf("ffdhe2048 prime differs from RFC 7919's formula:\n%X", p)
	}
	q := new(big.Int).Rsh(p, 1)
	if !p.ProbablyPrime(4) || !q.ProbablyPrime(4) {
		t.Fatal("ffdhe2048 is not a safe prime")
	}
}

func TestDH(t *testing.T) {
	a, err := NewDH(DHFFDHE2048)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewDH(DHFFDHE2048)
	ka, err1 := a.Shared(b.Pub)
	kb, err2 := b.Shared(a.Pub)
	if err1 != nil || err2 != nil || !bytes.Equal(ka, kb) || len(ka) != 256 {
		t.Fatalf("shared keys differ: %v %v", err1, err2)
	}
	one := make([]byte, 256)
	one[255] = 1
	if _, err := a.Shared(one); err == nil {
		t.Fatal("DH value 1 accepted")
	}
	if _, err := a.Shared(one[:10]); err == nil {
		t.Fatal("short DH value accepted")
	}
	if _, err := NewDH(7); err == nil {
		t.Fatal("unknown group accepted")
	}
}

// run pairs a Host and a Controller in memory.
func run(h *Host, c *Controller) error {
	return h.Run(func(b []byte) error { c.Send(b); return nil }, func() ([]byte, error) {
		b := c.Receive()
		if b == nil {
			return nil, errors.New("controller has nothing to return")
		}
		return b, nil
	})
}

func TestExchange(t *testing.T) {
	hs, _ := ParseSecret(mkSecret(bytes.Repeat([]byte{1}, 32), "01"))
	cs, _ := ParseSecret(mkSecret(bytes.Repeat([]byte{2}, 48), "02"))
	other, _ := ParseSecret(mkSecret(bytes.Repeat([]byte{3}, 32), "00"))
	host, sub := "nqn.2024-01.io.kvtier:h", "nqn.2024-01.io.kvtier:s"
	for _, g := range []uint8{DHNull, DHFFDHE2048} {
		for _, bidi := range []bool{false, true} {
			c := &Controller{HostSecret: hs, CtrlSecret: cs, HostNQN: host, SubNQN: sub}
			h := &Host{HostSecret: hs, HostNQN: host, SubNQN: sub, Groups: []uint8{g}, TID: 9}
			if bidi {
				h.CtrlSecret = cs
			}
			if err := run(h, c); err != nil || !c.Authenticated() {
				t.Fatalf("group %d bidi %v: %v (authenticated %v, %v)", g, bidi, err, c.Authenticated(), c.Err())
			}
			// wrong host secret: the controller refuses
			c = &Controller{HostSecret: hs, CtrlSecret: cs, HostNQN: host, SubNQN: sub}
			h.HostSecret = other
			var fe *FailureError
			if err := run(h, c); !errors.As(err, &fe) || c.Authenticated() || c.Err() == nil {
				t.Fatalf("group %d bidi %v: wrong secret: %v, authenticated %v", g, bidi, err, c.Authenticated())
			}
		}
		// wrong controller secret: the host refuses, the controller is not authenticated
		c := &Controller{HostSecret: hs, CtrlSecret: other, HostNQN: host, SubNQN: sub}
		h := &Host{HostSecret: hs, CtrlSecret: cs, HostNQN: host, SubNQN: sub, Groups: []uint8{g}}
		if err := run(h, c); err == nil || c.Authenticated() {
			t.Fatalf("group %d: wrong controller secret accepted (%v)", g, err)
		}
		// the controller's NQN differs from the one the host answered for
		c = &Controller{HostSecret: hs, HostNQN: host, SubNQN: sub + "x"}
		h = &Host{HostSecret: hs, HostNQN: host, SubNQN: sub, Groups: []uint8{g}}
		if err := run(h, c); err == nil || c.Authenticated() {
			t.Fatalf("group %d: response for another subsystem accepted", g)
		}
	}
	// no common group
	c := &Controller{HostSecret: hs, HostNQN: host, SubNQN: sub, Groups: []uint8{DHFFDHE2048}}
	h := &Host{HostSecret: hs, HostNQN: host, SubNQN: sub, Groups: []uint8{DHNull}}
	var fe *FailureError
	if err := run(h, c); !errors.As(err, &fe) || c.Authenticated() {
		t.Fatalf("no common group: %v", err)
	}
	// a Reply before Negotiate
	c = &Controller{HostSecret: hs, HostNQN: host, SubNQN: sub}
	c.Send((&Message{ID: Reply, R: make([]byte, 32)}).Marshal())
	if m, err := Parse(c.Receive()); err != nil || m.ID != Failure1 || m.Explanation != ExplIncorrectMessage || c.Authenticated() {
		t.Fatalf("reply out of turn: %+v %v", m, err)
	}
}

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []*Message{
		{ID: Negotiate, TID: 3, Hashes: []uint8{1, 2}, Groups: []uint8{0, 1}},
		{ID: Challenge, TID: 3, Hash: 1, Group: 1, Seq: 77, C: bytes.Repeat([]byte{1}, 32), DHValue: bytes.Repeat([]byte{2}, 256)},
		{ID: Reply, TID: 3, Seq: 5, CValid: true, R: bytes.Repeat([]byte{3}, 32), C: bytes.Repeat([]byte{4}, 32), DHValue: []byte{9, 9}},
		{ID: Success1, TID: 3, RValid: true, R: bytes.Repeat([]byte{5}, 32)},
		{ID: Success2, TID: 3},
		{ID: Failure1, TID: 3, Reason: 1, Explanation: ExplFailed},
	} {
		b := m.Marshal()
		got, err := Parse(b)
		if err != nil {
			t.Fatalf("%#x: %v", m.ID, err)
		}
		if !bytes.Equal(got.Marshal(), b) {
			t.Fatalf("%#x: round trip differs", m.ID)
		}
	}
	// Layout spot checks (offsets of the Linux/SPDK structures).
	b := (&Message{ID: Challenge, TID: 0x0102, Hash: 1, Group: 1, Seq: 0x0A0B0C0D, C: make([]byte, 32), DHValue: make([]byte, 256)}).Marshal()
	if len(b) != 16+32+256 || b[0] != 1 || b[1] != 1 || b[4] != 2 || b[6] != 32 || b[8] != 1 || b[9] != 1 ||
		binary.LittleEndian.Uint16(b[10:]) != 256 || binary.LittleEndian.Uint32(b[12:]) != 0x0A0B0C0D {
		t.Fatalf("challenge layout % x", b[:16])
	}
	b = (&Message{ID: Negotiate, Hashes: []uint8{1}, Groups: []uint8{0, 1}}).Marshal()
	if len(b) != 72 || b[7] != 1 || b[8] != 1 || b[10] != 1 || b[11] != 2 || b[12] != 1 || b[42] != 0 || b[43] != 1 {
		t.Fatalf("negotiate layout % x", b)
	}
}

func FuzzParse(f *testing.F) {
	f.Add((&Message{ID: Negotiate, Hashes: []uint8{1}, Groups: []uint8{0, 1}}).Marshal())
	f.Add((&Message{ID: Reply, R: make([]byte, 32), DHValue: make([]byte, 256)}).Marshal())
	f.Add((&Message{ID: Success1, RValid: true, R: make([]byte, 32)}).Marshal())
	f.Add([]byte{1, 0xF1, 0, 0, 0, 0, 1, 1})
	f.Add([]byte{0, 0xF1, 0, 0, 0, 0, 1, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		// What parses re-encodes and parses the same.
		if m.ID == Reply && !m.CValid {
			m.C = nil
		}
		b2 := m.Marshal()
		m2, err := Parse(b2)
		if err != nil {
			t.Fatalf("re-encoded message does not parse: %v", err)
		}
		if !bytes.Equal(m2.Marshal(), b2) {
			t.Fatal("re-encoding is not stable")
		}
		// A controller fed anything never authenticates without a valid reply.
		s, _ := ParseSecret(mkSecret(make([]byte, 32), "00"))
		c := &Controller{HostSecret: s, HostNQN: "h", SubNQN: "s"}
		c.Send(b)
		c.Receive()
		c.Send(b)
		c.Receive()
		if c.Authenticated() {
			t.Fatal("authenticated by arbitrary input")
		}
	})
}

// The controller side checked byte for byte against the formulas written
// out here (NULL group, hh 01 secrets): the host secret transformed with
// the host NQN, the controller secret with the subsystem NQN.
func TestControllerKAT(t *testing.T) {
	hk, ck := bytes.Repeat([]byte{0xA1}, 32), bytes.Repeat([]byte{0xB2}, 32)
	host, sub := "nqn.2014-08.org.nvmexpress:uuid:1", "nqn.2024-01.io.kvtier:sub"
	hmacSHA := func(key []byte, parts ...string) []byte {
		m := hmac.New(sha256.New, key)
		for _, p := range parts {
			m.Write([]byte(p))
		}
		return m.Sum(nil)
	}
	khost := hmacSHA(hk, host, "NVMe-over-Fabrics")
	kctrl := hmacSHA(ck, sub, "NVMe-over-Fabrics")
	c := &Controller{HostSecret: &Secret{Key: hk, Transform: 1}, CtrlSecret: &Secret{Key: ck, Transform: 1}, HostNQN: host, SubNQN: sub}
	neg := []byte{0, 0, 0, 0, 0x34, 0x12, 0, 1, 1, 0, 1, 1, 1}
	neg = append(neg, make([]byte, 72-len(neg))...)
	neg[8+4+30] = 0 // group list: NULL (dhlen 1)
	c.Send(neg)
	ch, err := Parse(c.Receive())
	if err != nil || ch.ID != Challenge || ch.TID != 0x1234 || ch.Hash != 1 || ch.Group != 0 || len(ch.C) != 32 || len(ch.DHValue) != 0 {
		t.Fatalf("challenge %+v %v", ch, err)
	}
	le32 := func(v uint32) string { return string(binary.LittleEndian.AppendUint32(nil, v)) }
	r1 := hmacSHA(khost, string(ch.C), le32(ch.Seq), "\x34\x12", "\x00", "HostHost", host, "\x00", sub)
	c2 := bytes.Repeat([]byte{0x5C}, 32)
	reply := make([]byte, 16)
	reply[0], reply[1], reply[4], reply[5], reply[6], reply[8] = 1, 2, 0x34, 0x12, 32, 1
	binary.LittleEndian.PutUint32(reply[12:], 0xCAFEF00D)
	reply = append(append(reply, r1...), c2...)
	c.Send(reply)
	s1, err := Parse(c.Receive())
	if err != nil || s1.ID != Success1 || !s1.RValid {
		t.Fatalf("success1 %+v %v (%v)", s1, err, c.Err())
	}
	r2 := hmacSHA(kctrl, string(c2), le32(0xCAFEF00D), "\x34\x12", "\x00", "Controller", sub, "\x00", host)
	if !bytes.Equal(s1.R, r2) {
		t.Fatalf("controller response %x, want %x", s1.R, r2)
	}
	if c.Authenticated() {
		t.Fatal("authenticated before Success2")
	}
	c.Send([]byte{1, 4, 0, 0, 0x34, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	if !c.Authenticated() {
		t.Fatalf("not authenticated after Success2: %v", c.Err())
	}
}

// TestFailureIsCommonMessage: Failure1/Failure2 travel as common messages
// (auth type 0), as SPDK's target sends them (lib/nvmf/auth.c
// nvmf_auth_send_failure_message) and expects them; until 2026-12 kvtier
// sent type 1 and refused SPDK's Failure1 as malformed ("message 0xf1 has
// auth type 0"), found against a real nvmf_tgt. Type 1 is still accepted.
func TestFailureIsCommonMessage(t *testing.T) {
	for _, id := range []uint8{Failure1, Failure2} {
		b := (&Message{ID: id, TID: 7, Reason: 1, Explanation: ExplFailed}).Marshal()
		if b[0] != 0 || b[1] != id {
			t.Fatalf("%#x encoded with auth type %d", id, b[0])
		}
		for _, typ := range []uint8{0, 1} {
			b[0] = typ
			m, err := Parse(b)
			if err != nil || m.ID != id || m.TID != 7 || m.Explanation != ExplFailed {
				t.Fatalf("%#x with auth type %d: %+v %v", id, typ, m, err)
			}
		}
		b[0] = 2
		if _, err := Parse(b); err == nil {
			t.Fatalf("%#x with auth type 2 accepted", id)
		}
	}
}
