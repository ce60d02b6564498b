package grant

import (
	"crypto/hmac"
	"sync/atomic"
	"time"
)

// Keyring holds the keys a verifier (an appliance) accepts, or the key a
// signer uses: the current one and the previous one, so a grant signed just
// before a rotation still verifies. It is safe for concurrent use; Set
// replaces both keys atomically.
type Keyring struct {
	keys atomic.Pointer[ring]
}

type ring struct {
	cur, prev *macPool // prev may be nil
}

// Set installs cur as the current key and prev (if non-nil) as the
// previous one.
func (r *Keyring) Set(cur Key, prev *Key) {
	n := &ring{cur: newMacPool(cur)}
	if prev != nil && prev.ID != cur.ID {
		n.prev = newMacPool(*prev)
	}
	r.keys.Store(n)
}

// Enforced reports whether a key was ever installed: an engine with keys
// refuses requests without a grant.
func (r *Keyring) Enforced() bool { return r != nil && r.keys.Load() != nil }

// Current returns the current key's ID (0, false when none).
func (r *Keyring) Current() (uint32, bool) {
	k := r.keys.Load()
	if k == nil {
		return 0, false
	}
	return k.cur.key.ID, true
}

// Sign signs with the current key; nil when the ring has none.
func (r *Keyring) Sign(segment string, bucket, offset, length uint64, op Op, s Session, expiry time.Time) []byte {
	k := r.keys.Load()
	if k == nil {
		return nil
	}
	return k.cur.sign(segment, bucket, offset, length, op, s, expiry)
}

// Verify checks that tok allows op on [offset, offset+length) of segment
// (bucket for an extent source) at now. The MAC is compared in constant
// time, before any other field is trusted.
func (r *Keyring) Verify(tok []byte, segment string, bucket, offset, length uint64, op Op, now time.Time) error {
	g, err := Decode(tok)
	if err != nil {
		return err
	}
	k := r.keys.Load()
	if k == nil {
		return refuse(UnknownKey, "this node holds no grant key")
	}
	p := k.cur
	if g.KeyID != p.key.ID {
		if k.prev == nil || g.KeyID != k.prev.key.ID {
			return refuse(UnknownKey, "grant key %d is not current (%d)", g.KeyID, p.key.ID)
		}
		p = k.prev
	}
	var want [32]byte
	p.sum(&g, segment, &want)
	if !hmac.Equal(want[:], g.MAC[:]) {
		return refuse(Forged, "grant signature does not match segment %q extent %d+%d", segment, g.Offset, g.Length)
	}
	if now.UnixNano() >= g.Expiry {
		return refuse(Expired, "grant expired %v ago", now.Sub(time.Unix(0, g.Expiry)).Round(time.Millisecond))
	}
	if g.Op != op {
		return refuse(WrongOp, "%s grant used to %s", g.Op, op)
	}
	end := offset + length
	if length == 0 || end < offset || g.Bucket != bucket || offset < g.Offset || end > g.Offset+g.Length {
		return refuse(OutOfExtent, "range %d+%d (bucket %d) outside granted extent %d+%d (bucket %d)",
			offset, length, bucket, g.Offset, g.Length, g.Bucket)
	}
	return nil
}
