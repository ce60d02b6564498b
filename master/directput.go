package master

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// Direct puts (internal/transfer doc.go, "Direct puts"): a client sends
// key, checksum and bytes to an appliance's data port in one frame, and
// the appliance makes the PutStart and PutEnd for it, placed on its own
// segments (PutConfig.OnlyNode). The master still decides placement and
// never carries bytes. What it adds is the put ticket (internal/grant,
// "Put tickets"): PutTicket signs one for a client it authorized as
// PutStart would, and every call an appliance makes for a client carries
// it (put_ticket), checked here again with the node's keys. The object's
// tenant and writer are the ticket's; the writer rules (only it ends or
// revokes the put) hold as for any put.

// PutTicketLife is how long a put ticket lasts by default
// (Config.PutTicketLife); clients renew theirs at half of it, off the
// put's path.
const PutTicketLife = 5 * time.Minute

// tenantOrDefault is the tenant a call naming none means.
func tenantOrDefault(t string) string {
	if t == "" {
		return "default"
	}
	return t
}

// nodeTicketKeys returns the keys node's data port accepts (current, next,
// previous), and whether the master knows the node.
func (m *Master) nodeTicketKeys(node string) ([]grant.Key, bool) {
	v, ok := m.grantKeys.byNode.Load(node)
	if !ok {
		return nil, false
	}
	k := v.(*nodeKeys)
	k.mu.Lock()
	defer k.mu.Unlock()
	out := []grant.Key{k.cur}
	if k.next != nil {
		out = append(out, *k.next)
	}
	if k.prev != nil {
		out = append(out, *k.prev)
	}
	return out, true
}

// SignPutTicket returns node's put ticket for (tenant, client) and its
// expiry. With grants off it returns no ticket (the frames then declare
// their identity, unsigned).
func (m *Master) SignPutTicket(node, tenant, client string) ([]byte, time.Time, error) {
	if m.cfg.DisableGrants {
		return nil, time.Time{}, nil
	}
	if node == "" || client == "" {
		return nil, time.Time{}, kverr.New(kverr.InvalidParams, "", "put ticket: node and client ID are required")
	}
	v, ok := m.grantKeys.byNode.Load(node)
	if !ok {
		return nil, time.Time{}, kverr.New(kverr.SegmentNotFound, "", "put ticket: node %q holds no grant key (not a storage node of this master)", node)
	}
	k := v.(*nodeKeys)
	k.mu.Lock()
	key := k.cur
	k.mu.Unlock()
	exp := m.now().Add(m.cfg.PutTicketLife)
	tok := grant.SignTicket(key, node, tenantOrDefault(tenant), client, exp)
	if tok == nil {
		return nil, time.Time{}, kverr.New(kverr.InvalidParams, "", "put ticket: node, tenant and client ID must be 1..255 bytes")
	}
	return tok, exp, nil
}

// CheckPutTicket verifies tok, carried by a call an appliance makes for a
// client, against the keys of the node it names, and that it names the
// call's tenant and client ID. With credentials, the caller must be the
// node itself (the credential its client ID is bound to). It returns the
// node.
func (m *Master) CheckPutTicket(ctx context.Context, tok []byte, tenant, client string) (string, error) {
	t, err := m.verifyPutTicket(tok)
	if err != nil {
		return "", err
	}
	return m.ticketFor(ctx, t, tenant, client)
}

// verifyPutTicket checks tok's MAC and expiry with the keys of the node it
// names.
func (m *Master) verifyPutTicket(tok []byte) (grant.Ticket, error) {
	t, err := grant.DecodeTicket(tok)
	if err == nil {
		keys, ok := m.nodeTicketKeys(t.Node)
		if !ok {
			return t, kverr.New(kverr.PermissionDenied, "", "put ticket refused: node %q holds no grant key", t.Node)
		}
		t, err = grant.VerifyTicket(keys, tok, t.Node, m.now())
	}
	if err != nil {
		return t, kverr.New(kverr.PermissionDenied, "", "put ticket refused: %v", err)
	}
	return t, nil
}

// ticketStill reports whether a ticket verified before still is: not
// expired, its key still one the node holds.
func (m *Master) ticketStill(t *grant.Ticket) bool {
	if m.now().UnixNano() >= t.Expiry {
		return false
	}
	keys, _ := m.nodeTicketKeys(t.Node)
	for _, k := range keys {
		if k.ID == t.KeyID {
			return true
		}
	}
	return false
}

// ticketFor checks that verified ticket t names the call's tenant and
// client, and, with credentials, that the caller is its node.
func (m *Master) ticketFor(ctx context.Context, t grant.Ticket, tenant, client string) (string, error) {
	if t.Tenant != tenantOrDefault(tenant) || t.Client != client {
		return "", kverr.New(kverr.PermissionDenied, "", "put ticket is for client %q of tenant %q, not %q of %q", t.Client, t.Tenant, client, tenantOrDefault(tenant))
	}
	if p, ok := auth.FromContext(ctx); ok {
		if bound, ok := m.Session(t.Node); !ok || bound.ID != p.ID {
			return "", kverr.New(kverr.PermissionDenied, "", "put ticket of node %q presented by another credential", t.Node)
		}
	}
	return t.Node, nil
}

// hasPutTicket reports whether req carries a put ticket (the authorizer
// then leaves the client ID unbound: the handler checks the ticket).
func hasPutTicket(req any) bool {
	q, ok := req.(interface{ GetPutTicket() []byte })
	return ok && len(q.GetPutTicket()) > 0
}

// ticketSlots is the size of grpcServer's memo of verified tickets: a
// direct put presents its client's ticket to PutStart and PutEnd, and an
// HMAC with its allocations per call (~2 µs) is a tenth of a standalone's
// master work per put; one slot per hash of the ticket, a miss verifies.
const ticketSlots = 64

type ticketMemo struct {
	tok string
	t   grant.Ticket
}

// checkTicket is Master.CheckPutTicket with the MAC of recently seen
// tickets remembered (expiry and key are checked on every use).
func (s *grpcServer) checkTicket(ctx context.Context, tok []byte, tenant, client string) (string, error) {
	slot := &s.tickets[maphash.Bytes(sessionSeed, tok)%ticketSlots]
	if e := slot.Load(); e != nil && e.tok == string(tok) && s.m.ticketStill(&e.t) {
		return s.m.ticketFor(ctx, e.t, tenant, client)
	}
	t, err := s.m.verifyPutTicket(tok)
	if err != nil {
		return "", err
	}
	slot.Store(&ticketMemo{tok: string(tok), t: t})
	return s.m.ticketFor(ctx, t, tenant, client)
}

// dropWaits removes node's waits from ws ("" removes none).
func dropWaits(ws []dramWait, node string) []dramWait {
	if node == "" {
		return ws
	}
	out := ws[:0]
	for _, w := range ws {
		if w.node != node {
			out = append(out, w)
		}
	}
	return out
}

// putEndExcept is PutEnd waiting for no acknowledgement of node (a direct
// put's holder: it answers its client only once it applied the commit
// record itself, the same guarantee without a round trip back here).
func (m *Master) putEndExcept(ctx context.Context, client, tenant, key, node string, sum endChecksum) error {
	ws, err := m.putEnd(client, tenant, key, sum)
	if err == nil {
		m.awaitCommits(ctx, dropWaits(ws, node))
	}
	return err
}

// commitMark returns the outbox and seq of the commit record an in-flight
// (or landing: a staged put) put of client queued at its PutStart (0, 0:
// none, or no such put).
func (m *Master) commitMark(client, tenant, key string) (outbox, seq uint64) {
	_, k, err := m.checkKey(tenant, key)
	if err != nil {
		return 0, 0
	}
	sh := m.shardOf(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if o := sh.objs[k]; o != nil && (!o.complete || o.flags&flagLanding != 0) && o.writer == client && o.lastRead > 0 {
		return m.dram.id, uint64(o.lastRead)
	}
	return 0, 0
}

// lastFreeSeq is a direct put's dram_free_seq: the latest FreeSeq of its
// MEMORY replicas (read when they were placed, after the allocation), at
// or after the free record of every earlier occupant of their extents.
// The node writes the put's bytes once it applied the records up to it,
// so no frame under a stale write grant for the extent still runs.
func lastFreeSeq(reps []Replica) uint64 {
	var seq uint64
	for i := range reps {
		if reps[i].Type == Memory {
			seq = max(seq, reps[i].FreeSeq)
		}
	}
	return seq
}
