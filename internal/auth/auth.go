package auth

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"unicode"
)

// Role is what a credential may do. Roles are ordered: a higher role may
// do everything a lower one may.
type Role int

const (
	RoleNone      Role = iota // no credential
	RoleClient                // put/get/exist/remove within its tenant
	RoleAppliance             // mount, heartbeat, offload, disk registration
	RoleAdmin                 // tier settings, unmount, drain, forced and bulk removal
)

func (r Role) String() string {
	switch r {
	case RoleClient:
		return "client"
	case RoleAppliance:
		return "appliance"
	case RoleAdmin:
		return "admin"
	}
	return "none"
}

// ParseRole parses admin, appliance or client.
func ParseRole(s string) (Role, error) {
	switch s {
	case "admin":
		return RoleAdmin, nil
	case "appliance":
		return RoleAppliance, nil
	case "client":
		return RoleClient, nil
	}
	return RoleNone, fmt.Errorf("unknown role %q (want admin, appliance or client)", s)
}

// MinTokenLen is the shortest token a credential file may hold.
const MinTokenLen = 16

// Principal is an authenticated caller.
type Principal struct {
	Role   Role
	Tenant string // client role only; empty: any tenant
	// ID names the credential without revealing it (a digest prefix);
	// sessions bind client IDs to it.
	ID string
}

// Credentials is a parsed credential set. The zero value holds none.
type Credentials struct {
	byDigest map[[32]byte]Principal
}

// Len is the number of credentials.
func (c *Credentials) Len() int {
	if c == nil {
		return 0
	}
	return len(c.byDigest)
}

func digest(token string) [32]byte { return sha256.Sum256([]byte(token)) }

func principalID(d [32]byte) string { return hex.EncodeToString(d[:6]) }

// Lookup returns the principal of token (see the package doc for why the
// lookup is by digest).
func (c *Credentials) Lookup(token string) (Principal, bool) {
	if c == nil || token == "" {
		return Principal{}, false
	}
	p, ok := c.byDigest[digest(token)]
	return p, ok
}

// Parse reads a credential file: one `ROLE TOKEN [TENANT]` a line, fields
// separated by blanks, `#` starts a comment, blank lines are ignored. A bad
// line is an error naming its number; nothing is returned then.
func Parse(r io.Reader) (*Credentials, error) {
	c := &Credentials{byDigest: map[[32]byte]Principal{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 64<<10)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("line %d: want ROLE TOKEN [TENANT], got %d fields", n, len(f))
		}
		role, err := ParseRole(f[0])
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
		tok := f[1]
		if len(tok) < MinTokenLen {
			return nil, fmt.Errorf("line %d: token of %d characters, want at least %d", n, len(tok), MinTokenLen)
		}
		for _, r := range tok {
			if r > unicode.MaxASCII || !unicode.IsPrint(r) {
				return nil, fmt.Errorf("line %d: token holds a non-printable or non-ASCII character", n)
			}
		}
		p := Principal{Role: role}
		if len(f) == 3 {
			if role != RoleClient {
				return nil, fmt.Errorf("line %d: only a client credential takes a tenant", n)
			}
			p.Tenant = f[2]
		}
		d := digest(tok)
		if _, dup := c.byDigest[d]; dup {
			return nil, fmt.Errorf("line %d: token already given on an earlier line", n)
		}
		p.ID = principalID(d)
		c.byDigest[d] = p
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %v", n+1, err)
	}
	return c, nil
}

// Load parses the credential file at path; errors name the file.
func Load(path string) (*Credentials, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	defer f.Close()
	c, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("credentials %s: %w", path, err)
	}
	return c, nil
}

// Store is the live credential set of a master. A nil *Store means no
// credentials are configured: every call is allowed (the open mode).
type Store struct {
	path     string
	cur      atomic.Pointer[Credentials]
	internal [32]byte // digest of the in-process admin token
	intTok   string
}

// NewStore loads path. It also makes a random admin token for the
// process's own clients (a standalone's appliance, the REST data plane),
// never written anywhere: InternalToken.
func NewStore(path string) (*Store, error) {
	c, err := Load(path)
	if err != nil {
		return nil, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	s := &Store{path: path, intTok: "internal-" + hex.EncodeToString(b[:])}
	s.internal = digest(s.intTok)
	s.cur.Store(c)
	return s, nil
}

// InternalToken is this process's own admin token (see NewStore).
func (s *Store) InternalToken() string {
	if s == nil {
		return ""
	}
	return s.intTok
}

// Reload re-reads the file; on error the previous credentials stay.
func (s *Store) Reload() (int, error) {
	c, err := Load(s.path)
	if err != nil {
		return s.cur.Load().Len(), err
	}
	s.cur.Store(c)
	return c.Len(), nil
}

// Len is the number of credentials from the file.
func (s *Store) Len() int { return s.cur.Load().Len() }

// Lookup returns token's principal.
func (s *Store) Lookup(token string) (Principal, bool) {
	if token == "" {
		return Principal{}, false
	}
	d := digest(token)
	if d == s.internal {
		return Principal{Role: RoleAdmin, ID: "internal"}, true
	}
	p, ok := s.cur.Load().byDigest[d]
	return p, ok
}

type ctxKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext returns the principal an authenticated call carries; false
// when the master runs open (no credentials).
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}

// BearerToken extracts the token of an `authorization: Bearer X` value.
func BearerToken(v string) string {
	const prefix = "bearer "
	if len(v) > len(prefix) && strings.EqualFold(v[:len(prefix)], prefix) {
		return strings.TrimSpace(v[len(prefix):])
	}
	return ""
}

// ReadTokenFile returns the first line of path, trimmed (the token of
// --token-file).
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", fmt.Errorf("%s holds no token", path)
	}
	return tok, nil
}

// ClientToken is the token a client process sends: the content of
// tokenFile when set, else $KVTIER_TOKEN, else none.
func ClientToken(tokenFile string) (string, error) {
	if tokenFile != "" {
		t, err := ReadTokenFile(tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return t, nil
	}
	return strings.TrimSpace(os.Getenv("KVTIER_TOKEN")), nil
}
