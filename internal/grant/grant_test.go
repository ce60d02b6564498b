package grant

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	k1, k2, k3 := NewKey(1), NewKey(2), NewKey(3)
	var r Keyring
	if r.Enforced() {
		t.Fatal("empty keyring enforced")
	}
	s := SessionOf("client-a")
	tok := Sign(k1, "box/mem0", 0, 4096, 8192, Write, s, now.Add(time.Second))
	if len(tok) != Size {
		t.Fatalf("token %d bytes", len(tok))
	}
	if err := r.Verify(tok, "box/mem0", 0, 4096, 8192, Write, now); ReasonOf(err) != UnknownKey {
		t.Fatalf("no keys: %v", err)
	}
	r.Set(k1)
	ok := func(seg string, off, n uint64, op Op) {
		t.Helper()
		if err := r.Verify(tok, seg, 0, off, n, op, now); err != nil {
			t.Fatalf("want accepted: %v", err)
		}
	}
	bad := func(want Reason, tk []byte, seg string, bucket, off, n uint64, op Op, at time.Time) {
		t.Helper()
		err := r.Verify(tk, seg, bucket, off, n, op, at)
		if ReasonOf(err) != want {
			t.Fatalf("want %v, got %v", want, err)
		}
	}
	ok("box/mem0", 4096, 8192, Write)
	ok("box/mem0", 4096+100, 1000, Write) // a slice of the extent
	ok("box/mem0", 8192, 4096, Write)
	bad(OutOfExtent, tok, "box/mem0", 0, 4095, 2, Write, now)
	bad(OutOfExtent, tok, "box/mem0", 0, 12288, 1, Write, now)
	bad(OutOfExtent, tok, "box/mem0", 0, 4096, 8193, Write, now)
	bad(OutOfExtent, tok, "box/mem0", 0, ^uint64(0), 2, Write, now)
	bad(OutOfExtent, tok, "box/mem0", 7, 4096, 1, Write, now)
	bad(WrongOp, tok, "box/mem0", 0, 4096, 1, Read, now)
	bad(Expired, tok, "box/mem0", 0, 4096, 1, Write, now.Add(time.Second))
	bad(Forged, tok, "box/mem1", 0, 4096, 1, Write, now)
	bad(Missing, nil, "box/mem0", 0, 4096, 1, Write, now)
	bad(Malformed, tok[:Size-1], "box/mem0", 0, 4096, 1, Write, now)
	for i := 0; i < Size; i++ { // any flipped bit is a forgery or malformed
		f := bytes.Clone(tok)
		f[i] ^= 0x10
		if err := r.Verify(f, "box/mem0", 0, 4096, 8192, Write, now); err == nil {
			t.Fatalf("flipped byte %d accepted", i)
		}
	}
	// Another key signs a forgery with a known key id: refused.
	other := Key{ID: 1, Secret: k3.Secret}
	bad(Forged, Sign(other, "box/mem0", 0, 4096, 8192, Write, s, now.Add(time.Second)), "box/mem0", 0, 4096, 1, Write, now)

	// Rotation: current and previous verify, older ones do not.
	r.Set(k2, k1)
	ok("box/mem0", 4096, 8192, Write)
	tok2 := Sign(k2, "box/mem0", 0, 0, 10, Read, s, now.Add(time.Second))
	if err := r.Verify(tok2, "box/mem0", 0, 0, 10, Read, now); err != nil {
		t.Fatal(err)
	}
	r.Set(k3, k2)
	bad(UnknownKey, tok, "box/mem0", 0, 4096, 1, Write, now)
	if err := r.Verify(tok2, "box/mem0", 0, 0, 10, Read, now); err != nil {
		t.Fatal(err)
	}
	// Bucket is covered.
	tb := Sign(k3, "box/ssd", 7, 0, 100, Read, s, now.Add(time.Second))
	if err := r.Verify(tb, "box/ssd", 7, 0, 100, Read, now); err != nil {
		t.Fatal(err)
	}
	bad(OutOfExtent, tb, "box/ssd", 8, 0, 100, Read, now)
	got := r.Sign("x", 0, 0, 1, Read, s, now.Add(time.Second), Mark{Outbox: 0xAB, Seq: 42})
	g, err := r.VerifyGrant(got, "x", 0, 0, 1, Read, now)
	if err != nil || g.Outbox != 0xAB || g.Seq != 42 {
		t.Fatalf("keyring sign with a mark: %+v %v", g, err)
	}
	// The mark is covered by the MAC: a grant moved to a later record is forged.
	g.Seq = 43
	bad(Forged, g.Encode(nil), "x", 0, 0, 1, Read, now)
}

func TestSessionOf(t *testing.T) {
	if SessionOf("a") == SessionOf("b") || SessionOf("a") != SessionOf("a") {
		t.Fatal("SessionOf not a function of the client id")
	}
}

func TestConcurrentVerifyAndRotate(t *testing.T) {
	now := time.Now()
	var r Keyring
	k1 := NewKey(1)
	r.Set(k1)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				tok := r.Sign("s", 0, 0, 64, Read, Session{}, now.Add(time.Hour), Mark{})
				if err := r.Verify(tok, "s", 0, 0, 64, Read, now); err != nil && ReasonOf(err) != UnknownKey {
					t.Error(err)
					return
				}
			}
		}()
	}
	prev := k1
	for id := uint32(2); id < 50; id++ {
		k := NewKey(id)
		r.Set(k, prev)
		prev = k
	}
	wg.Wait()
}

func FuzzDecodeVerify(f *testing.F) {
	k := NewKey(9)
	now := time.Unix(1_800_000_000, 0)
	f.Add(Sign(k, "seg", 0, 0, 100, Read, Session{1}, now.Add(time.Minute)), "seg", uint64(0), uint64(10), uint64(10))
	f.Add([]byte{1, 2, 0, 0}, "", uint64(0), uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, tok []byte, seg string, bucket, off, n uint64) {
		var r Keyring
		r.Set(k)
		g, err := Decode(tok)
		if err == nil {
			if enc := g.Encode(nil); !bytes.Equal(enc, tok) {
				t.Fatalf("round trip: %x != %x", enc, tok)
			}
		}
		if err := r.Verify(tok, seg, bucket, off, n, Read, now); err == nil {
			// Accepted only if it is the real signature of what it claims.
			want := Sign(k, seg, g.Bucket, g.Offset, g.Length, g.Op, g.Session, time.Unix(0, g.Expiry))
			if !bytes.Equal(want, tok) || off < g.Offset || off+n > g.Offset+g.Length {
				t.Fatalf("accepted a bad grant %x", tok)
			}
		} else if ReasonOf(err) == 0 {
			t.Fatalf("refusal without a reason: %v", err)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	k := NewKey(1)
	var r Keyring
	r.Set(k)
	now := time.Now()
	tok := Sign(k, "box/mem0", 0, 0, 1<<20, Read, Session{}, now.Add(time.Hour))
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Verify(tok, "box/mem0", 0, 0, 1<<20, Read, now); err != nil {
			b.Fatal(err)
		}
	}
}
