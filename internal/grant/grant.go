package grant

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"
	"time"
)

// Size is the length of an encoded grant.
const Size = 104

const (
	version  = 2
	macStart = 72
	domain   = "kvtier-grant-v2"
)

// Op is what a grant allows.
type Op uint8

// The ops a grant may allow (the transfer engine's READ and WRITE).
const (
	Read  Op = 1
	Write Op = 2
)

func (o Op) String() string {
	switch o {
	case Read:
		return "read"
	case Write:
		return "write"
	case Put:
		return "put"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Session identifies the client a grant was signed for.
type Session [16]byte

// SessionOf maps a client ID to the value grants carry: the session of a
// master that runs open (no credentials, so no authenticated principal).
func SessionOf(clientID string) Session {
	h := sha256.Sum256([]byte("kvtier-session\x00" + clientID))
	var s Session
	copy(s[:], h[:])
	return s
}

// SessionOfPrincipal maps an authenticated principal's ID (auth.Principal.ID,
// a digest prefix of its credential) to the value grants carry: the session
// of a master with credentials. Its domain differs from SessionOf's, so a
// client ID can never name a principal's session.
func SessionOfPrincipal(principalID string) Session {
	h := sha256.Sum256([]byte("kvtier-principal\x00" + principalID))
	var s Session
	copy(s[:], h[:])
	return s
}

// Key is one appliance secret.
type Key struct {
	ID     uint32
	Secret [32]byte
}

// NewKey returns a key with a fresh random secret.
func NewKey(id uint32) Key {
	k := Key{ID: id}
	if _, err := rand.Read(k.Secret[:]); err != nil {
		panic("grant: crypto/rand: " + err.Error()) // never fails on Linux ≥ 3.17
	}
	return k
}

// Grant is the decoded content of a token.
type Grant struct {
	Op      Op
	KeyID   uint32
	Bucket  uint64
	Offset  uint64
	Length  uint64
	Expiry  int64 // unix nanoseconds
	Session Session
	// Outbox and Seq place the grant in its master's stream of DRAM
	// directory records to this node (see Revocations): the master's
	// outbox ID and the seq of the last free record queued for the
	// extent's segment when the grant was signed. Outbox 0: not placed
	// (an extent source, or a master that keeps no records), never
	// revoked early.
	Outbox, Seq uint64
	MAC         [32]byte
}

// Reason says why a grant was refused.
type Reason uint8

// Refusal reasons, one metric label each.
const (
	Missing Reason = iota + 1
	Malformed
	UnknownKey
	Forged
	Expired
	WrongOp
	OutOfExtent
	Revoked
)

// Reasons lists every reason, for counters.
var Reasons = []Reason{Missing, Malformed, UnknownKey, Forged, Expired, WrongOp, OutOfExtent, Revoked}

func (r Reason) String() string {
	switch r {
	case Missing:
		return "missing"
	case Malformed:
		return "malformed"
	case UnknownKey:
		return "unknown_key"
	case Forged:
		return "forged"
	case Expired:
		return "expired"
	case WrongOp:
		return "wrong_op"
	case OutOfExtent:
		return "out_of_extent"
	case Revoked:
		return "revoked"
	}
	return "unknown"
}

// Refusal is the error Verify returns.
type Refusal struct {
	Reason Reason
	Detail string
}

func (e *Refusal) Error() string { return "grant refused (" + e.Reason.String() + "): " + e.Detail }

// ReasonOf returns the reason of a *Refusal in err's chain, or 0.
func ReasonOf(err error) Reason {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Reason
	}
	return 0
}

func refuse(r Reason, f string, a ...any) error {
	return &Refusal{Reason: r, Detail: fmt.Sprintf(f, a...)}
}

// Encode appends the token of g to dst.
func (g *Grant) Encode(dst []byte) []byte {
	var b [Size]byte
	g.header(&b)
	copy(b[macStart:], g.MAC[:])
	return append(dst, b[:]...)
}

func (g *Grant) header(b *[Size]byte) {
	b[0] = version
	b[1] = byte(g.Op)
	binary.BigEndian.PutUint32(b[4:], g.KeyID)
	binary.BigEndian.PutUint64(b[8:], g.Bucket)
	binary.BigEndian.PutUint64(b[16:], g.Offset)
	binary.BigEndian.PutUint64(b[24:], g.Length)
	binary.BigEndian.PutUint64(b[32:], uint64(g.Expiry))
	copy(b[40:56], g.Session[:])
	binary.BigEndian.PutUint64(b[56:], g.Outbox)
	binary.BigEndian.PutUint64(b[64:], g.Seq)
}

// Decode parses a token; it checks the layout, not the MAC.
func Decode(tok []byte) (Grant, error) {
	var g Grant
	if len(tok) == 0 {
		return g, refuse(Missing, "no grant")
	}
	if len(tok) != Size {
		return g, refuse(Malformed, "grant is %d bytes, want %d", len(tok), Size)
	}
	if tok[0] != version {
		return g, refuse(Malformed, "grant version %d, want %d", tok[0], version)
	}
	g.Op = Op(tok[1])
	if g.Op != Read && g.Op != Write {
		return g, refuse(Malformed, "grant op %d", tok[1])
	}
	if tok[2] != 0 || tok[3] != 0 {
		return g, refuse(Malformed, "grant reserved bytes not zero")
	}
	g.KeyID = binary.BigEndian.Uint32(tok[4:])
	g.Bucket = binary.BigEndian.Uint64(tok[8:])
	g.Offset = binary.BigEndian.Uint64(tok[16:])
	g.Length = binary.BigEndian.Uint64(tok[24:])
	g.Expiry = int64(binary.BigEndian.Uint64(tok[32:]))
	copy(g.Session[:], tok[40:56])
	g.Outbox = binary.BigEndian.Uint64(tok[56:])
	g.Seq = binary.BigEndian.Uint64(tok[64:])
	copy(g.MAC[:], tok[macStart:])
	if g.Length == 0 || g.Offset+g.Length < g.Offset {
		return g, refuse(Malformed, "grant extent offset %d length %d", g.Offset, g.Length)
	}
	return g, nil
}

// macPool recycles HMAC states (with a scratch buffer) per key: one
// hmac.New per request would allocate on the data path.
type macPool struct {
	key  Key
	pool sync.Pool
}

type macState struct {
	h   hash.Hash
	buf [len(domain) + macStart + 1 + 255]byte
}

func newMacPool(k Key) *macPool {
	p := &macPool{key: k}
	p.pool.New = func() any {
		st := &macState{h: hmac.New(sha256.New, p.key.Secret[:])}
		copy(st.buf[:], domain)
		return st
	}
	return p
}

// sum computes g's MAC for segment (names past 255 bytes are cut, as no
// wire name is longer) into out.
func (p *macPool) sum(g *Grant, segment string, out *[32]byte) {
	st := p.pool.Get().(*macState)
	st.h.Reset()
	var b [Size]byte
	g.header(&b)
	n := copy(st.buf[len(domain):], b[:macStart])
	i := len(domain) + n
	l := min(len(segment), 255)
	st.buf[i] = byte(l)
	i++
	i += copy(st.buf[i:], segment[:l])
	st.h.Write(st.buf[:i])
	st.h.Sum(out[:0])
	p.pool.Put(st)
}

// Sign returns the token of a grant for op on segment's extent
// [offset, offset+length) (of bucket, for an extent source) for session
// until expiry, keyed by k, placed in no record stream (Mark{}).
func Sign(k Key, segment string, bucket, offset, length uint64, op Op, s Session, expiry time.Time) []byte {
	return newMacPool(k).sign(segment, bucket, offset, length, op, s, expiry, Mark{})
}

// Unsigned returns the token of an unsigned grant (key ID 0, a zero MAC)
// for op on the extent, placed at at: what a master without grants hands
// out for a MEMORY replica, so that the node can still revoke it early
// (Revocations) when the master frees the extent. It proves nothing: a
// node holding keys refuses it (unknown_key), one without keys serves
// every request anyway and only checks its revocation.
func Unsigned(bucket, offset, length uint64, op Op, s Session, expiry time.Time, at Mark) []byte {
	g := Grant{Op: op, Bucket: bucket, Offset: offset, Length: length, Expiry: expiry.UnixNano(), Session: s,
		Outbox: at.Outbox, Seq: at.Seq}
	return g.Encode(make([]byte, 0, Size))
}

// Mark places a grant in its master's stream of DRAM directory records to
// the node (Grant.Outbox, Grant.Seq).
type Mark struct{ Outbox, Seq uint64 }

func (p *macPool) sign(segment string, bucket, offset, length uint64, op Op, s Session, expiry time.Time, at Mark) []byte {
	g := Grant{Op: op, KeyID: p.key.ID, Bucket: bucket, Offset: offset, Length: length, Expiry: expiry.UnixNano(), Session: s,
		Outbox: at.Outbox, Seq: at.Seq}
	p.sum(&g, segment, &g.MAC)
	return g.Encode(make([]byte, 0, Size))
}
