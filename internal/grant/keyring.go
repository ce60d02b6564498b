package grant

import (
	"crypto/hmac"
	"sync/atomic"
	"time"
)

// Keyring holds the keys a verifier (an appliance) accepts, or the key a
// signer uses: the first key signs; every key verifies, so a grant signed
// just before a rotation (previous key) or just after one (next key, handed
// to the verifier before the signer uses it) still verifies. It is safe for
// concurrent use; Set replaces the set atomically.
type Keyring struct {
	keys atomic.Pointer[[]*macPool]
}

// MaxKeys is the most keys a ring holds (current, next, previous).
const MaxKeys = 3

// Set installs keys (at most MaxKeys; the first signs). No keys clears the
// ring.
func (r *Keyring) Set(keys ...Key) {
	if len(keys) == 0 {
		r.keys.Store(nil)
		return
	}
	ps := make([]*macPool, 0, min(len(keys), MaxKeys))
	for _, k := range keys[:min(len(keys), MaxKeys)] {
		ps = append(ps, newMacPool(k))
	}
	r.keys.Store(&ps)
}

// Enforced reports whether the ring holds a key: an engine with keys
// refuses requests without a grant.
func (r *Keyring) Enforced() bool { return r != nil && r.keys.Load() != nil }

// IDs returns the IDs of the keys held, the signing key first.
func (r *Keyring) IDs() []uint32 {
	ps := r.keys.Load()
	if ps == nil {
		return nil
	}
	out := make([]uint32, len(*ps))
	for i, p := range *ps {
		out[i] = p.key.ID
	}
	return out
}

// Sign signs with the first key, placed at at in the node's record stream
// (Mark{}: nowhere); nil when the ring has none.
func (r *Keyring) Sign(segment string, bucket, offset, length uint64, op Op, s Session, expiry time.Time, at Mark) []byte {
	ps := r.keys.Load()
	if ps == nil {
		return nil
	}
	return (*ps)[0].sign(segment, bucket, offset, length, op, s, expiry, at)
}

// Verify checks that tok allows op on [offset, offset+length) of segment
// (bucket for an extent source) at now. The MAC is compared in constant
// time, before any other field is trusted.
func (r *Keyring) Verify(tok []byte, segment string, bucket, offset, length uint64, op Op, now time.Time) error {
	_, err := r.VerifyGrant(tok, segment, bucket, offset, length, op, now)
	return err
}

// VerifyGrant is Verify returning the decoded grant (for Revocations.Check).
func (r *Keyring) VerifyGrant(tok []byte, segment string, bucket, offset, length uint64, op Op, now time.Time) (Grant, error) {
	g, err := Decode(tok)
	if err != nil {
		return g, err
	}
	ps := r.keys.Load()
	if ps == nil {
		return g, refuse(UnknownKey, "this node holds no grant key")
	}
	var p *macPool
	for _, x := range *ps {
		if x.key.ID == g.KeyID {
			p = x
			break
		}
	}
	if p == nil {
		return g, refuse(UnknownKey, "grant key %d is not one this node holds", g.KeyID)
	}
	var want [32]byte
	p.sum(&g, segment, &want)
	if !hmac.Equal(want[:], g.MAC[:]) {
		return g, refuse(Forged, "grant signature does not match segment %q extent %d+%d", segment, g.Offset, g.Length)
	}
	if now.UnixNano() >= g.Expiry {
		return g, refuse(Expired, "grant expired %v ago", now.Sub(time.Unix(0, g.Expiry)).Round(time.Millisecond))
	}
	if g.Op != op {
		return g, refuse(WrongOp, "%s grant used to %s", g.Op, op)
	}
	end := offset + length
	if length == 0 || end < offset || g.Bucket != bucket || offset < g.Offset || end > g.Offset+g.Length {
		return g, refuse(OutOfExtent, "range %d+%d (bucket %d) outside granted extent %d+%d (bucket %d)",
			offset, length, bucket, g.Offset, g.Length, g.Bucket)
	}
	return g, nil
}
