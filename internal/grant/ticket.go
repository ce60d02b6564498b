package grant

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"time"
)

// Put is the op of a put ticket: a direct put through a node's data port,
// placed by the node itself (see doc.go, "Put tickets"). Grants never carry
// it.
const Put Op = 3

// Ticket is the decoded content of a put ticket.
type Ticket struct {
	KeyID  uint32 // 0: unsigned (the master runs without grants)
	Expiry int64  // unix nanoseconds; 0 with KeyID 0
	Node   string // the node whose data port may take puts with it
	Tenant string
	Client string // the client ID the puts are made for (their writer)
}

const (
	ticketVersion = 1
	ticketHeader  = 20
	ticketDomain  = "kvtier-ticket-v1"
	// MaxTicketSize is the longest encoded ticket (three 255-byte names).
	MaxTicketSize = ticketHeader + 3*255 + 32
)

// Signed reports whether the ticket carries a MAC.
func (t *Ticket) Signed() bool { return t.KeyID != 0 }

func (t *Ticket) body() ([]byte, bool) {
	if len(t.Node) < 1 || len(t.Node) > 255 || len(t.Tenant) < 1 || len(t.Tenant) > 255 || len(t.Client) < 1 || len(t.Client) > 255 {
		return nil, false
	}
	b := make([]byte, ticketHeader, ticketHeader+len(t.Node)+len(t.Tenant)+len(t.Client)+32)
	b[0] = ticketVersion
	b[1] = byte(Put)
	binary.BigEndian.PutUint32(b[4:], t.KeyID)
	binary.BigEndian.PutUint64(b[8:], uint64(t.Expiry))
	b[16], b[17], b[18] = byte(len(t.Node)), byte(len(t.Tenant)), byte(len(t.Client))
	b = append(b, t.Node...)
	b = append(b, t.Tenant...)
	b = append(b, t.Client...)
	return b, true
}

func ticketMAC(secret *[32]byte, body []byte, out []byte) []byte {
	h := hmac.New(sha256.New, secret[:])
	h.Write([]byte(ticketDomain))
	h.Write(body)
	return h.Sum(out)
}

// SignTicket returns the put ticket of node for (tenant, client) until
// expiry, keyed by k; nil when a name is empty or longer than 255 bytes.
func SignTicket(k Key, node, tenant, client string, expiry time.Time) []byte {
	t := Ticket{KeyID: k.ID, Expiry: expiry.UnixNano(), Node: node, Tenant: tenant, Client: client}
	b, ok := t.body()
	if !ok || k.ID == 0 {
		return nil
	}
	return ticketMAC(&k.Secret, b, b)
}

// UnsignedTicket is the identity a client declares to a node whose
// master runs without grants: key ID 0, no expiry, a zero MAC. A node
// holding grant keys refuses it (unknown_key).
func UnsignedTicket(node, tenant, client string) []byte {
	t := Ticket{Node: node, Tenant: tenant, Client: client}
	b, ok := t.body()
	if !ok {
		return nil
	}
	return append(b, make([]byte, 32)...)
}

// DecodeTicket parses a ticket; it checks the layout, not the MAC.
func DecodeTicket(tok []byte) (Ticket, error) {
	var t Ticket
	if len(tok) == 0 {
		return t, refuse(Missing, "no put ticket")
	}
	if len(tok) < ticketHeader+3+32 || len(tok) > MaxTicketSize {
		return t, refuse(Malformed, "put ticket is %d bytes", len(tok))
	}
	if tok[0] != ticketVersion {
		return t, refuse(Malformed, "put ticket version %d, want %d", tok[0], ticketVersion)
	}
	if Op(tok[1]) != Put {
		return t, refuse(WrongOp, "ticket op %d is not put", tok[1])
	}
	if tok[2] != 0 || tok[3] != 0 || tok[19] != 0 {
		return t, refuse(Malformed, "put ticket reserved bytes not zero")
	}
	n, tn, c := int(tok[16]), int(tok[17]), int(tok[18])
	if n == 0 || tn == 0 || c == 0 || ticketHeader+n+tn+c+32 != len(tok) {
		return t, refuse(Malformed, "put ticket names %d+%d+%d do not fit its %d bytes", n, tn, c, len(tok))
	}
	t.KeyID = binary.BigEndian.Uint32(tok[4:])
	t.Expiry = int64(binary.BigEndian.Uint64(tok[8:]))
	p := tok[ticketHeader:]
	t.Node, t.Tenant, t.Client = string(p[:n]), string(p[n:n+tn]), string(p[n+tn:n+tn+c])
	return t, nil
}

// VerifyTicket checks a signed put ticket for node at now against keys
// (the node's current, next and previous secrets): layout, MAC in
// constant time (before any field is trusted), node, expiry. An unsigned
// ticket is refused (unknown_key): whoever holds keys enforces tickets.
func VerifyTicket(keys []Key, tok []byte, node string, now time.Time) (Ticket, error) {
	t, err := DecodeTicket(tok)
	if err != nil {
		return t, err
	}
	if t.KeyID == 0 {
		return t, refuse(UnknownKey, "unsigned put ticket: this node enforces data-plane grants")
	}
	var k *Key
	for i := range keys {
		if keys[i].ID == t.KeyID {
			k = &keys[i]
			break
		}
	}
	if k == nil {
		return t, refuse(UnknownKey, "put ticket key %d is not one this node holds", t.KeyID)
	}
	body := tok[:len(tok)-32]
	var want [32]byte
	if !hmac.Equal(ticketMAC(&k.Secret, body, want[:0]), tok[len(tok)-32:]) {
		return t, refuse(Forged, "put ticket signature does not match")
	}
	if t.Node != node {
		return t, refuse(Forged, "put ticket is for node %q, not %q", t.Node, node)
	}
	if now.UnixNano() >= t.Expiry {
		return t, refuse(Expired, "put ticket expired %v ago", now.Sub(time.Unix(0, t.Expiry)).Round(time.Millisecond))
	}
	return t, nil
}

// VerifyTicket is the package's VerifyTicket against the keys r holds.
func (r *Keyring) VerifyTicket(tok []byte, node string, now time.Time) (Ticket, error) {
	ps := r.keys.Load()
	if ps == nil {
		return Ticket{}, refuse(UnknownKey, "this node holds no grant key")
	}
	keys := make([]Key, len(*ps))
	for i, p := range *ps {
		keys[i] = p.key
	}
	return VerifyTicket(keys, tok, node, now)
}

// Holds reports whether the ring holds key id (a ticket verified before
// stays good while its key does).
func (r *Keyring) Holds(id uint32) bool {
	ps := r.keys.Load()
	if ps == nil {
		return false
	}
	for _, p := range *ps {
		if p.key.ID == id {
			return true
		}
	}
	return false
}
