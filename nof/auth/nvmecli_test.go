package auth

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// Vectors printed by nvme-cli 2.3 (`nvme gen-dhchap-key --secret=<hex>
// --key-length=N --hmac=H --nqn=NQN`). With --hmac H > 0 nvme-cli prints
// the secret already transformed, HMAC-H(secret, NQN || "NVMe-over-Fabrics"),
// under hh H: the same transformation as TransformedKey, computed by
// another implementation (libnvme over OpenSSL).
var nvmeCLIVectors = []struct {
	secret []byte
	hmac   uint8
	nqn    string
	out    string
}{
	{seq(32), 0, "", "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"},
	{seq(32), 1, "nqn.test:h", "DHHC-1:01:xB3c2meZ87aZXLiAQJdYrWTVG+g2ZX2ljaDociaKTrRbHNgY:"},
	{seq(48), 2, "nqn.2014-08.org.nvmexpress:uuid:0c468c4d-a385-47e0-8299-6e95051277db",
		"DHHC-1:02:N2EjLz87Rs+1WiptadhL5c+gjUPHK50YzM6vvFtXPUvAmEEXhBNxqpXyPx14MlVjvR4I2w==:"},
	{seq(64), 3, "nqn.2014-08.org.nvmexpress:uuid:0c468c4d-a385-47e0-8299-6e95051277db",
		"DHHC-1:03:mbLuLV4oZBAfzEEg/OgD3lPQ6jfi2WTSDidBfdVjmdJMeJk+ZMOV16KklTyIbMPjFRuffNAj0ntrJ2Fo5erbTBFHTOo=:"},
}

func TestNVMeCLIVectors(t *testing.T) {
	for _, v := range nvmeCLIVectors {
		s, err := ParseSecret(v.out)
		if err != nil {
			t.Fatalf("%s: %v", v.out, err)
		}
		if s.String() != v.out || s.Transform != v.hmac {
			t.Fatalf("%s: round trip %s", v.out, s.String())
		}
		want := v.secret
		if v.hmac != 0 {
			want = (&Secret{Key: v.secret, Transform: v.hmac}).TransformedKey(v.nqn)
		}
		if !bytes.Equal(s.Key, want) {
			t.Fatalf("%s: nvme-cli key %x, our transformation %x", v.out, s.Key, want)
		}
	}
}

// With nvme-cli installed: its random keys parse, and it accepts ours.
func TestNVMeCLIInterop(t *testing.T) {
	bin, err := exec.LookPath("nvme")
	if err != nil {
		t.Skipf("nvme-cli not installed (%v): interop with its DHHC-1 keys not checked (the recorded vectors still are)", err)
	}
	// nvme-cli pairs a transform with a key of its digest's length; the
	// kernel no longer insists, and neither does ParseSecret.
	for _, n := range []string{"32", "48", "64"} {
		for _, h := range []string{"0", map[string]string{"32": "1", "48": "2", "64": "3"}[n]} {
			out, err := exec.Command(bin, "gen-dhchap-key", "--key-length="+n, "--hmac="+h, "--nqn=nqn.2026-11.io.kvtier:h").Output()
			if err != nil {
				t.Fatalf("nvme gen-dhchap-key: %v", err)
			}
			k := strings.TrimSpace(string(out))
			s, err := ParseSecret(k)
			if err != nil || s.String() != k {
				t.Fatalf("nvme-cli key %s: %v", k, err)
			}
			mine := (&Secret{Key: random(len(s.Key)), Transform: s.Transform}).String()
			if out, err := exec.Command(bin, "check-dhchap-key", "--key="+mine).CombinedOutput(); err != nil || !strings.Contains(string(out), "valid") {
				t.Fatalf("nvme check-dhchap-key refuses our %s: %v %s", mine, err, out)
			}
		}
	}
}
