package auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	tokA = "admin-token-0123456789"
	tokP = "appliance-token-0123456789"
	tokC = "client-token-0123456789"
)

func TestParse(t *testing.T) {
	c, err := Parse(strings.NewReader("# kvtier credentials\n\nadmin " + tokA + "\n  appliance\t" + tokP + "  # box 1\nclient " + tokC + " tenantA\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 3 {
		t.Fatalf("%d credentials", c.Len())
	}
	for tok, want := range map[string]Principal{tokA: {Role: RoleAdmin}, tokP: {Role: RoleAppliance}, tokC: {Role: RoleClient, Tenant: "tenantA"}} {
		p, ok := c.Lookup(tok)
		if !ok || p.Role != want.Role || p.Tenant != want.Tenant || p.ID == "" || strings.Contains(tok, p.ID) {
			t.Fatalf("%s: %+v %v", tok, p, ok)
		}
	}
	for _, bad := range []string{"", tokA[:len(tokA)-1], tokA + "x", "admin"} {
		if _, ok := c.Lookup(bad); ok {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func TestParseErrorsNameTheLine(t *testing.T) {
	for in, want := range map[string]string{
		"admin " + tokA + "\nroot " + tokC:     "line 2: unknown role",
		"# c\nadmin short":                     "line 2: token of 5 characters",
		"admin":                                "line 1: want ROLE TOKEN [TENANT]",
		"client " + tokC + " a b":              "line 1: want ROLE TOKEN [TENANT]",
		"admin " + tokA + " tenant":            "line 1: only a client credential takes a tenant",
		"admin " + tokA + "\n\nclient " + tokA: "line 3: token already given",
		"client " + strings.Repeat("\x01", 20): "line 1: token holds a non-printable",
		"client " + strings.Repeat("é", 20):    "line 1: token holds a non-printable",
	} {
		_, err := Parse(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

func TestStoreReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "creds")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("admin " + tokA + "\n")
	s, err := NewStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := s.Lookup(s.InternalToken()); !ok || p.Role != RoleAdmin {
		t.Fatal("internal token not admin")
	}
	write("client " + tokC + "\n")
	if n, err := s.Reload(); err != nil || n != 1 {
		t.Fatal(n, err)
	}
	if _, ok := s.Lookup(tokA); ok {
		t.Fatal("revoked token still accepted after reload")
	}
	write("nonsense line\n")
	if _, err := s.Reload(); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad reload: %v", err)
	}
	if _, ok := s.Lookup(tokC); !ok {
		t.Fatal("a bad file dropped the previous credentials")
	}
}

func TestMethodsRoles(t *testing.T) {
	for m, r := range Methods {
		if r < RoleClient || r > RoleAdmin || !strings.HasPrefix(m, "/kvtier.v1.Master/") {
			t.Fatalf("%s: %v", m, r)
		}
	}
	if Methods["/kvtier.v1.Master/UpdateTiers"] != RoleAdmin || Methods["/kvtier.v1.Master/MountSegment"] != RoleAppliance {
		t.Fatal("table")
	}
}

func TestBearerToken(t *testing.T) {
	for in, want := range map[string]string{"Bearer abc": "abc", "bearer  abc ": "abc", "Basic abc": "", "Bearer": "", "": ""} {
		if got := BearerToken(in); got != want {
			t.Errorf("%q: %q", in, got)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("admin " + tokA + "\nclient " + tokC + " t # c\n")
	f.Add("appliance " + tokP)
	f.Add("#\n\n client x y z")
	f.Fuzz(func(t *testing.T, in string) {
		c, err := Parse(strings.NewReader(in))
		if err != nil {
			if c != nil || !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error %v with %v", err, c)
			}
			return
		}
		for _, line := range strings.Split(in, "\n") {
			if i := strings.IndexByte(line, '#'); i >= 0 {
				line = line[:i]
			}
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			p, ok := c.Lookup(f[1])
			if !ok || p.Role.String() != f[0] {
				t.Fatalf("line %q: %+v %v", line, p, ok)
			}
		}
	})
}
