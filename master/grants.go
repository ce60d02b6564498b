package master

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvtier/kvtier/internal/grant"
)

// Data-plane grants (internal/grant): the master holds one secret per
// storage node, signs every replica location it hands out with it, and
// hands the node its keys in heartbeat answers.
//
// Key life: a node's first key is made when it mounts or first beats (and
// anew when a new incarnation of the name appears: a restarted node has
// lost its keys, and the old ones must not outlive the process they were
// given to). The master signs with a key from the moment it exists: the
// node enforces grants only once it holds a key, and every grant signed
// since the key was made then verifies. Rotation (GrantKeyRotation) makes
// a next key and hands it over beside the current one; the master signs
// with it only once the node's beat reports holding it, then keeps the old
// one as previous (still accepted by the node) until the next rotation.

// DefaultGrantKeyRotation is how often a node's grant secret is replaced.
const DefaultGrantKeyRotation = time.Hour

// nodeKeys is one node's grant secrets.
type nodeKeys struct {
	signer grant.Keyring // the current key only: what the master signs with

	mu          sync.Mutex
	incarnation string     // guarded by mu: the start the keys were made for
	cur         grant.Key  // guarded by mu
	next, prev  *grant.Key // guarded by mu: handed out, not yet used / retired, still accepted
	made        time.Time  // guarded by mu: when cur was made
	// refusals (guarded by mu) is the node's last reported count of
	// requests its data port refused for their grant, by reason.
	refusals map[string]uint64
}

// grantKeyTable maps node (client) IDs to their keys. Reads (signing, on
// every PutStart and GetReplicaList) take no lock.
type grantKeyTable struct {
	byNode sync.Map // node id → *nodeKeys
	mu     sync.Mutex
}

func newGrantKey() grant.Key {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return grant.NewKey(binary.BigEndian.Uint32(b[:]) | 1) // random: a restarted master does not reuse IDs
}

// grantKeysFor returns node's keys, making them (or new ones, for a new
// incarnation) as needed.
func (m *Master) grantKeysFor(node, incarnation string) *nodeKeys {
	t := &m.grantKeys
	if v, ok := t.byNode.Load(node); ok {
		k := v.(*nodeKeys)
		k.mu.Lock()
		same := incarnation == "" || k.incarnation == "" || k.incarnation == incarnation
		if k.incarnation == "" {
			k.incarnation = incarnation
		}
		if !same { // a restart: fresh keys, the old start's are forgotten
			k.incarnation = incarnation
			k.cur, k.next, k.prev, k.made = newGrantKey(), nil, nil, m.now()
			k.signer.Set(k.cur)
		}
		k.mu.Unlock()
		return k
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.byNode.Load(node); ok {
		return v.(*nodeKeys)
	}
	k := &nodeKeys{incarnation: incarnation, cur: newGrantKey(), made: m.now()}
	k.signer.Set(k.cur)
	t.byNode.Store(node, k)
	return k
}

// GrantKeysForBeat is the grant part of a heartbeat from incarnation of
// node that holds the keys held: it promotes a handed-out next key the node
// now holds, starts a rotation when the current key is GrantKeyRotation
// old, and returns every key the node must accept (current, next,
// previous), or nil when the node reports holding exactly those (it keeps
// its set). A beat from a node that is not storage (storage false: no
// segment, no SSD tier) makes no keys.
//
// refusals is the node's count of requests refused for their grant; an
// increase is published as an event naming the reasons.
func (m *Master) GrantKeysForBeat(node, incarnation string, storage bool, held []uint32, refusals map[string]uint64) []grant.Key {
	if m.cfg.DisableGrants {
		return nil
	}
	if !storage {
		// A pure caller serves nothing: no keys (nor an entry per
		// short-lived client) unless it mounted a segment before.
		if _, ok := m.grantKeys.byNode.Load(node); !ok {
			return nil
		}
	}
	k := m.grantKeysFor(node, incarnation)
	now := m.now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if refusals != nil {
		var grew []string
		for _, r := range grant.Reasons {
			n, was := refusals[r.String()], k.refusals[r.String()]
			if n > was {
				grew = append(grew, fmt.Sprintf("%s +%d", r, n-was))
			}
		}
		k.refusals = maps.Clone(refusals)
		if len(grew) > 0 {
			m.publish(Event{Kind: "grant", Node: node, Message: "data port refused requests for their grant: " + strings.Join(grew, ", ")})
		}
	}
	if k.next != nil {
		for _, id := range held {
			if id == k.next.ID {
				old := k.cur
				k.prev, k.cur, k.next, k.made = &old, *k.next, nil, now
				k.signer.Set(k.cur)
				break
			}
		}
	}
	if k.next == nil && now.Sub(k.made) >= m.cfg.GrantKeyRotation {
		n := newGrantKey()
		k.next = &n
	}
	out := []grant.Key{k.cur}
	if k.next != nil {
		out = append(out, *k.next)
	}
	if k.prev != nil {
		out = append(out, *k.prev)
	}
	if sameIDs(out, held) {
		return nil // the node holds exactly these: secrets cross the wire only when they change
	}
	return out
}

// sameIDs reports whether keys and ids name the same set of key IDs.
func sameIDs(keys []grant.Key, ids []uint32) bool {
	if len(keys) != len(ids) {
		return false
	}
	for _, k := range keys {
		if !slices.Contains(ids, k.ID) {
			return false
		}
	}
	return true
}

// GrantRefusals returns node's last reported grant refusals by reason
// (nil: none reported).
func (m *Master) GrantRefusals(node string) map[string]uint64 {
	v, ok := m.grantKeys.byNode.Load(node)
	if !ok {
		return nil
	}
	k := v.(*nodeKeys)
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.refusals)
}

// EnsureGrantKeys makes node's keys at mount, so the replicas of its new
// segment are signed from the first put.
func (m *Master) EnsureGrantKeys(node, incarnation string) {
	if !m.cfg.DisableGrants {
		m.grantKeysFor(node, incarnation)
	}
}

// SignGrant returns the grant for op on replica r for the client session,
// valid until expiry; nil for a replica no transfer engine serves (NOF) or
// a node without keys. A MEMORY replica's grant is placed in its owner's
// DRAM record stream (this master's outbox, r.FreeSeq), so the free
// record of the replica revokes it at the owner (dramdir.go
// queueFreeLocked); a node that takes no records ignores the mark.
//
// Without grants (DisableGrants) a MEMORY replica still gets an unsigned
// grant (grant.Unsigned) carrying that mark: it opens nothing, but lets
// the owner refuse it once the replica is freed, so a client's cached read
// lease does not read a removed object back.
func (m *Master) SignGrant(r Replica, session grant.Session, op grant.Op, expiry time.Time) []byte {
	if r.Type == NOF || r.Length == 0 {
		return nil
	}
	if m.cfg.DisableGrants {
		if r.Type != Memory || m.dram.id == 0 {
			return nil
		}
		return grant.Unsigned(r.Bucket, r.Offset, r.Length, op, session, expiry, grant.Mark{Outbox: m.dram.id, Seq: r.FreeSeq})
	}
	v, ok := m.grantKeys.byNode.Load(r.Node)
	if !ok {
		return nil
	}
	var at grant.Mark
	if r.Type == Memory {
		at = grant.Mark{Outbox: m.dram.id, Seq: r.FreeSeq}
	}
	return v.(*nodeKeys).signer.Sign(r.Segment, r.Bucket, r.Offset, r.Length, op, session, expiry, at)
}
