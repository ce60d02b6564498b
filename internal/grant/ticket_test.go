package grant

import (
	"bytes"
	"testing"
	"time"
)

func TestTicket(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	k1, k2 := NewKey(1), NewKey(2)
	tok := SignTicket(k1, "box", "tenant-a", "client-1", now.Add(time.Minute))
	if tok == nil {
		t.Fatal("no ticket")
	}
	var r Keyring
	if _, err := r.VerifyTicket(tok, "box", now); ReasonOf(err) != UnknownKey {
		t.Fatalf("no keys: %v", err)
	}
	r.Set(k2, k1) // k1 as previous still verifies
	tk, err := r.VerifyTicket(tok, "box", now)
	if err != nil {
		t.Fatal(err)
	}
	if tk.Tenant != "tenant-a" || tk.Client != "client-1" || tk.Node != "box" || !tk.Signed() {
		t.Fatalf("decoded %+v", tk)
	}
	bad := func(want Reason, tok []byte, node string, at time.Time) {
		t.Helper()
		if _, err := r.VerifyTicket(tok, node, at); ReasonOf(err) != want {
			t.Fatalf("want %v, got %v", want, err)
		}
	}
	bad(Expired, tok, "box", now.Add(time.Minute))
	bad(Forged, tok, "other-box", now)
	for i := range len(tok) {
		forged := bytes.Clone(tok)
		forged[i] ^= 0x40
		if _, err := r.VerifyTicket(forged, "box", now); err == nil {
			t.Fatalf("byte %d flipped: accepted", i)
		}
	}
	// A client that changes its tenant breaks the MAC.
	evil := bytes.Replace(bytes.Clone(tok), []byte("tenant-a"), []byte("tenant-b"), 1)
	bad(Forged, evil, "box", now)
	bad(UnknownKey, SignTicket(NewKey(9), "box", "t", "c", now.Add(time.Minute)), "box", now)
	bad(UnknownKey, UnsignedTicket("box", "t", "c"), "box", now)
	bad(Missing, nil, "box", now)
	bad(Malformed, tok[:30], "box", now)
	g := Sign(k1, "box/mem0", 0, 0, 10, Write, SessionOf("c"), now.Add(time.Minute))
	bad(Malformed, g, "box", now) // a grant is not a ticket
	u, err := DecodeTicket(UnsignedTicket("box", "t", "c"))
	if err != nil || u.Signed() || u.Client != "c" || u.Tenant != "t" {
		t.Fatalf("unsigned: %+v %v", u, err)
	}
	if SignTicket(k1, "", "t", "c", now) != nil || UnsignedTicket("n", string(make([]byte, 256)), "c") != nil {
		t.Fatal("bad names signed")
	}
}

func FuzzDecodeTicket(f *testing.F) {
	k := NewKey(1)
	f.Add(SignTicket(k, "box", "t", "c", time.Unix(2e9, 0)))
	f.Add(UnsignedTicket("n", "t", "c"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, tok []byte) {
		tk, err := DecodeTicket(tok)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes (but the MAC).
		b, ok := tk.body()
		if !ok || !bytes.Equal(b, tok[:len(tok)-32]) {
			t.Fatalf("decoded %+v does not re-encode", tk)
		}
	})
}
