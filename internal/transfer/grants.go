package transfer

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/internal/grant"
	"github.com/kvtier/kvtier/kverr"
)

// grantCheck is the serving side's data-plane grant state: the keys it
// accepts and what it refused. With no keys (the master gave this node no
// secret) grants are not enforced and frames without one are served, as
// before grants existed.
type grantCheck struct {
	keys     grant.Keyring
	rev      atomic.Pointer[grant.Revocations] // what Revocations made (read on the data path)
	refusals [grant.Revoked + 1]atomic.Uint64  // by grant.Reason
}

// RevocationWait bounds how long a request waits for the DRAM directory
// records its grant names (grant.Revocations.Check) before it is refused.
const RevocationWait = 2 * time.Second

// Revocations returns this engine's table of grants revoked early (made
// on first use). The node that keeps a DRAM directory feeds it from the
// master's records; one that never does (Follow never called) checks
// nothing there.
func (e *Engine) Revocations() *grant.Revocations {
	if r := e.grants.rev.Load(); r != nil {
		return r
	}
	r := grant.NewRevocations(0)
	// Segments' free tables mirror it (shmfrees.go): set before
	// the table is reachable, so no change goes unpublished.
	r.Publish(&e.shm.frees)
	if e.grants.rev.CompareAndSwap(nil, r) {
		return r
	}
	return e.grants.rev.Load()
}

// holdFrame counts a frame in flight for the revocation table's Drain
// (grant.Revocations.Enter), before its grant is checked; releaseFrame
// with the value returned when it has moved its bytes. -1: no table.
func (e *Engine) holdFrame() int {
	r := e.grants.rev.Load()
	if r == nil {
		return -1
	}
	return int(r.Enter())
}

func (e *Engine) releaseFrame(h *int) {
	if *h >= 0 {
		e.grants.rev.Load().Exit(uint32(*h))
	}
}

// SetGrantKeys installs the data-plane grant keys this engine accepts (the
// first signs, none clears them; see internal/grant). From the first key on,
// every request served over TCP must carry a valid grant for its segment,
// extent and op: frames without one are refused with PERMISSION_DENIED.
// The in-process local path is not checked (the caller is this process),
// nor shared memory, which maps whole segments and is offered only to
// peers running as this engine's user or root: it trusts the host.
//
// A set that shares no key with the one held (the master made this node
// new keys: a new master, or one that had declared the node gone) clears
// the revocation table: every grant it could void fails on its key now.
func (e *Engine) SetGrantKeys(keys ...grant.Key) {
	old := e.grants.keys.IDs()
	e.grants.keys.Set(keys...)
	e.shm.frees.setKeys(e.grants.keys.IDs())
	rev := e.grants.rev.Load()
	if rev == nil || len(old) == 0 {
		return
	}
	for _, k := range keys {
		if slices.Contains(old, k.ID) {
			return
		}
	}
	rev.Clear()
}

// Admits reports whether this engine's data port would still serve a
// READ of segment with grant tok as far as its keys and revocations tell
// (not its MAC nor its range: tok came from the master): the key is one
// held, and no free of its extent was applied after it was signed. It
// never waits. For readers of this engine's segments in its own process
// (client.View reads objects in place and passes no data port), which
// call it after using the bytes: a forced removal leaves bytes whose
// checksum still matches. Without keys every grant, and a missing one,
// is admitted.
func (e *Engine) Admits(segment string, tok []byte) bool {
	enforced := e.grants.keys.Enforced()
	g, err := grant.Decode(tok)
	switch {
	case !enforced && err != nil:
		return true // open: nothing to check
	case enforced && (err != nil || !e.grants.keys.Holds(g.KeyID)):
		return false
	}
	if rev := e.grants.rev.Load(); rev != nil && rev.Voids(&g, segment) {
		return false
	}
	return true
}

// GrantsEnforced reports whether this engine holds grant keys (and so
// refuses requests without a valid grant).
func (e *Engine) GrantsEnforced() bool { return e.grants.keys.Enforced() }

// GrantKeyIDs returns the IDs of the grant keys held.
func (e *Engine) GrantKeyIDs() []uint32 { return e.grants.keys.IDs() }

func (g *grantCheck) refusalCounts() map[string]uint64 {
	out := make(map[string]uint64, len(grant.Reasons))
	for _, r := range grant.Reasons {
		out[r.String()] = g.refusals[r].Load()
	}
	return out
}

// checkGrant verifies tok (nil: the frame carried none) for op on
// [off, off+n) of name (bucket for an extent source). It returns nil when
// grants are not enforced or tok allows the request, else a
// PERMISSION_DENIED error naming the reason, counted and reported.
//
// hold is the frame's holdFrame: a frame that waits for records exits
// the count while it waits (grant.Revocations.Check).
func (e *Engine) checkGrant(hold *int, tok []byte, name []byte, bucket, off, n uint64, op Op) error {
	if len(tok) > 0 && tok[0] == 0 { // a batch frame's placeholder for a request without a grant
		tok = nil
	}
	gop := grant.Read
	if op == Write {
		gop = grant.Write
	}
	seg := string(name)
	var g grant.Grant
	var err error
	if e.grants.keys.Enforced() {
		g, err = e.grants.keys.VerifyGrant(tok, seg, bucket, off, n, gop, time.Now())
	} else {
		// Open: every request is served, but an unsigned grant's mark
		// (grant.Unsigned, from a master without grants) is still
		// checked against the revocations, so a freed replica is not
		// read back through a cached lease.
		if len(tok) == 0 {
			return nil
		}
		if g, err = grant.Decode(tok); err != nil || g.KeyID != 0 {
			return nil
		}
	}
	if err == nil {
		rev := e.grants.rev.Load()
		if rev == nil || g.Outbox == 0 {
			return nil
		}
		var held *uint32
		var ep uint32
		if hold != nil && *hold >= 0 {
			ep = uint32(*hold)
			held = &ep
		}
		err = rev.Check(&g, seg, RevocationWait, held)
		if held != nil {
			*hold = int(ep)
		}
		if err == nil {
			return nil
		}
	}
	r := grant.ReasonOf(err)
	if int(r) < len(e.grants.refusals) {
		e.grants.refusals[r].Add(1)
	}
	ke := kverr.New(kverr.PermissionDenied, "", "%s of segment %q %d+%d: %v", op, name, off, n, err)
	if f := e.cfg.OnGrantRefused; f != nil {
		f(r.String(), ke.Msg)
	}
	return ke
}
