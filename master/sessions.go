package master

import (
	"sync"
	"time"

	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/kverr"
)

// sessions binds each client ID to the principal (credential) that first
// named it, so that a call naming another principal's client ID is refused
// (see doc.go, "Sessions"). Only used when credentials are configured.
type sessions struct {
	mu      sync.Mutex
	byID    map[string]*session // guarded by mu
	pruneAt int                 // prune when byID grows past this
}

type session struct {
	p        auth.Principal
	lastSeen time.Time
}

// sessionIdle is how long a binding outlives the last call naming it:
// longer than a client is kept (ClientTTL + ClientGrace), so that a
// client's ID cannot be taken over while the master still holds its state.
func (m *Master) sessionIdle() time.Duration {
	d := 2 * (m.cfg.ClientTTL + m.cfg.ClientGrace)
	if d < time.Minute {
		d = time.Minute
	}
	return d
}

// BindSession binds clientID to p on first use and refuses a clientID
// bound to another principal with PERMISSION_DENIED. An admin may also
// name a client ID bound to someone else (without taking it over); the IDs
// an admin uses first are bound to it like any other, so that the
// process's own clients (a standalone's appliance, the REST data plane)
// cannot be impersonated. An empty clientID binds nothing.
func (m *Master) BindSession(clientID string, p auth.Principal) error {
	if clientID == "" {
		return nil
	}
	now := time.Now()
	s := &m.sess
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[string]*session{}
		s.pruneAt = 1024
	}
	if cur := s.byID[clientID]; cur != nil && now.Sub(cur.lastSeen) < m.sessionIdle() {
		if cur.p.ID != p.ID {
			if p.Role == auth.RoleAdmin {
				return nil
			}
			return kverr.New(kverr.PermissionDenied, "", "client ID %q belongs to another credential's session", clientID)
		}
		cur.lastSeen = now
		return nil
	}
	s.byID[clientID] = &session{p: p, lastSeen: now}
	if len(s.byID) > s.pruneAt {
		idle := m.sessionIdle()
		for id, e := range s.byID {
			if now.Sub(e.lastSeen) >= idle {
				delete(s.byID, id)
			}
		}
		s.pruneAt = max(1024, 2*len(s.byID))
	}
	return nil
}

// Session returns the principal bound to clientID: the authenticated
// identity behind the client's calls (false: unbound, or the master runs
// without credentials).
func (m *Master) Session(clientID string) (auth.Principal, bool) {
	s := &m.sess
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.byID[clientID]
	if e == nil || time.Since(e.lastSeen) >= m.sessionIdle() {
		return auth.Principal{}, false
	}
	return e.p, true
}
