package tests

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/kverr"
)

// testPKI is a CA and certificates signed by it, written as PEM files.
type testPKI struct {
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

func newTestPKI(t testing.TB, dir, name string) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &testPKI{dir: dir, ca: ca, caKey: key, serial: 1}
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	return p
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// issue writes name.pem and name-key.pem: a server certificate for
// 127.0.0.1 (server) or a client certificate with CN cn and URI SANs.
func (p *testPKI) issue(t testing.TB, name, cn string, server bool, uris ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	for _, u := range uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(p.dir, name+".pem"), "CERTIFICATE", der)
	writePEM(t, filepath.Join(p.dir, name+"-key.pem"), "EC PRIVATE KEY", kd)
	c, err := tls.LoadX509KeyPair(filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTLSStandalone: a standalone with a certificate from a CA made here
// serves put/get to clients that trust the CA (CLI and SDK, gRPC, fast path
// and REST), refuses clients that do not or that speak plain TCP, maps a
// client certificate to its role (mTLS), and picks up a new certificate on
// SIGHUP.
func TestTLSStandalone(t *testing.T) {
	dir := writeCreds(t)
	pki := newTestPKI(t, dir, "ca")
	pki.issue(t, "server", "kvtier", true)
	clientA := pki.issue(t, "client-a", "someone", false, "kvtier:client:A")
	other := newTestPKI(t, dir, "other-ca")
	p := start(t, "standalone", "standalone", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--dram", "64MiB", "--ssd-dir", "",
		"--credentials", filepath.Join(dir, "creds"), "--tls-cert", filepath.Join(dir, "server.pem"), "--tls-key", filepath.Join(dir, "server-key.pem"),
		"--tls-client-ca", filepath.Join(dir, "ca.pem"))
	grpcAddr, httpAddr := p.addrs["grpc"], p.addrs["http"]
	in := filepath.Join(dir, "value")
	if err := os.WriteFile(in, []byte("over tls"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokA := filepath.Join(dir, "a.tok")
	if _, stderr, code := runKvtierCode(t, nil, "put", "k", in, "--master", grpcAddr, "--token-file", tokA, "--tls-ca", filepath.Join(dir, "ca.pem")); code != 0 {
		t.Fatalf("put over TLS: %d %s", code, stderr)
	}
	out, stderr, code := runKvtierCode(t, nil, "get", "k", "--master", grpcAddr, "--token-file", tokA, "--tls-ca", filepath.Join(dir, "ca.pem"))
	if code != 0 || out != "over tls" {
		t.Fatalf("get over TLS: %d %q %s", code, out, stderr)
	}
	for name, args := range map[string][]string{
		"plain TCP":    {},
		"another CA":   {"--tls-ca", filepath.Join(dir, "other-ca.pem")},
		"no such file": {"--tls-ca", filepath.Join(dir, "missing.pem")},
	} {
		args = append([]string{"get", "k", "--master", grpcAddr, "--token-file", tokA, "--timeout", "3s"}, args...)
		if out, stderr, code := runKvtierCode(t, nil, args...); code == 0 || out != "" {
			t.Errorf("%s: exit %d %q %s", name, code, out, stderr)
		}
	}
	// SDK: a client certificate instead of a token (mTLS), fast path on.
	pool := x509.NewCertPool()
	pool.AddCert(pki.ca)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{MasterAddr: grpcAddr, OneShot: true, TLS: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientA}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if v, err := c.Get(ctx, "k"); err != nil || string(v) != "over tls" {
		t.Fatalf("mTLS get (tenant A from the certificate): %q %v", v, err)
	}
	if err := c.Remove(ctx, "k", true); kverr.CodeOf(err) != kverr.PermissionDenied {
		t.Fatalf("mTLS client forced removal: %v", err)
	}
	// REST over TLS.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest("GET", "https://"+httpAddr+"/api/v1/objects/k/data?tenant=A", nil)
	req.Header.Set("Authorization", "Bearer "+tokCliA)
	resp, err := hc.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("REST over TLS: %v %v", resp, err)
	}
	resp.Body.Close()
	if resp, err := http.Get("http://" + httpAddr + "/api/v1/health"); err == nil && resp.StatusCode == 200 {
		t.Fatal("plain HTTP answered on the TLS REST port")
	}
	// The admin verbs talk https with --tls-ca.
	if out, stderr, code := runKvtierCode(t, nil, "status", "--http", httpAddr, "--tls-ca", filepath.Join(dir, "ca.pem"), "--token-file", filepath.Join(dir, "admin.tok")); code != 0 {
		t.Fatalf("kvtier status over TLS: %d %s %s", code, out, stderr)
	}
	// SIGHUP: a new certificate from another CA is served to new connections.
	other.issue(t, "server2", "kvtier", true)
	if err := os.Rename(filepath.Join(dir, "server2.pem"), filepath.Join(dir, "server.pem")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "server2-key.pem"), filepath.Join(dir, "server-key.pem")); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, 10*time.Second, "the new certificate after SIGHUP", func() bool {
		_, _, code := runKvtierCode(t, nil, "exist", "k", "--master", grpcAddr, "--token-file", tokA, "--tls-ca", filepath.Join(dir, "other-ca.pem"), "--timeout", "3s")
		return code == 0
	})
}
