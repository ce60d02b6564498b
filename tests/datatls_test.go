package tests

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/transfer"
)

// TestDataPortTLS: an appliance started with --data-tls-cert serves its data
// port over TLS and the master hands its endpoint out as tls://host:port.
// With --shm=false every byte crosses TCP: a client trusting the CA that
// signed the data certificate puts and gets; a client trusting only the
// master's CA is refused at the data port (the put fails and nothing is
// stored), and so is an SDK client with no CA for the data port. The
// master's REST data plane reads it with --data-tls-ca.
func TestDataPortTLS(t *testing.T) {
	dir := t.TempDir()
	masterPKI := newTestPKI(t, dir, "ca")
	masterPKI.issue(t, "master", "kvtier", true)
	dataPKI := newTestPKI(t, dir, "data-ca")
	dataPKI.issue(t, "data", "appliance", true)
	both := filepath.Join(dir, "both.pem")
	a, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	b, _ := os.ReadFile(filepath.Join(dir, "data-ca.pem"))
	if err := os.WriteFile(both, append(a, b...), 0o600); err != nil {
		t.Fatal(err)
	}
	m := start(t, "master", "master", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--tls-cert", filepath.Join(dir, "master.pem"), "--tls-key", filepath.Join(dir, "master-key.pem"),
		"--data-tls-ca", filepath.Join(dir, "data-ca.pem"))
	grpcAddr := m.addrs["grpc"]
	start(t, "box", "appliance", "--master", grpcAddr, "--tls-ca", filepath.Join(dir, "ca.pem"), "--name", "box",
		"--dram", "64MiB", "--data-addr", "127.0.0.1:0", "--ssd-dir", "", "--shm=false",
		"--data-tls-cert", filepath.Join(dir, "data.pem"), "--data-tls-key", filepath.Join(dir, "data-key.pem"))

	val := strings.Repeat("bytes over a TLS data port ", 50000) // ~1.3 MiB: several slices
	in := filepath.Join(dir, "value")
	if err := os.WriteFile(in, []byte(val), 0o600); err != nil {
		t.Fatal(err)
	}
	var code int
	var stderr string
	eventually(t, 10*time.Second, "a put through the TLS data port", func() bool {
		_, stderr, code = runKvtierCode(t, nil, "put", "k", in, "--master", grpcAddr, "--tls-ca", both)
		return code == 0
	})
	out, stderr, code := runKvtierCode(t, nil, "get", "k", "--master", grpcAddr, "--tls-ca", both)
	if code != 0 || out != val {
		t.Fatalf("get through the TLS data port: exit %d, %d bytes (want %d): %s", code, len(out), len(val), stderr)
	}

	// The endpoint the master hands out says TLS.
	pool := x509.NewCertPool()
	pool.AddCert(masterPKI.ca)
	// The master's REST data plane reads through the TLS data port with
	// --data-tls-ca.
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get("https://" + m.addrs["http"] + "/api/v1/objects/k/data")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != val {
		t.Fatalf("REST data through the TLS data port: %d, %d bytes: %.200s", resp.StatusCode, len(body), body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{MasterAddr: grpcAddr, OneShot: true, TLS: &tls.Config{RootCAs: pool},
		Transfer: client.TransferConfig{DisableSharedMemory: true, DialTimeout: 3 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rl, err := c.Query(ctx, "k")
	if err != nil || len(rl.Replicas) == 0 {
		t.Fatalf("query: %v %v", rl, err)
	}
	for _, r := range rl.Replicas {
		if ep := r.GetEndpoint(); !strings.HasPrefix(ep, transfer.TLSScheme) {
			t.Fatalf("replica endpoint %q does not advertise TLS", ep)
		}
	}
	// This SDK client trusts the master's CA only: the data port refuses it.
	if v, err := c.Get(ctx, "k"); err == nil || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("get without the data port's CA: %d bytes, %v; want a TLS refusal", len(v), err)
	}

	// The CLI with the master's CA only: refused, and the put stored nothing.
	if _, stderr, code := runKvtierCode(t, nil, "put", "k2", in, "--master", grpcAddr, "--tls-ca", filepath.Join(dir, "ca.pem"), "--timeout", "5s"); code == 0 || !strings.Contains(stderr, "TLS") {
		t.Fatalf("put without the data port's CA: exit %d: %s", code, stderr)
	}
	if out, _, code := runKvtierCode(t, nil, "get", "k2", "--master", grpcAddr, "--tls-ca", both, "--timeout", "5s"); code == 0 {
		t.Fatalf("the refused put stored %d bytes", len(out))
	}
	// Bad flags: a clear refusal, nothing started.
	for _, args := range [][]string{
		{"appliance", "--master", grpcAddr, "--tls-ca", both, "--data-tls-cert", filepath.Join(dir, "data.pem"), "--data-addr", "127.0.0.1:0"},
		{"appliance", "--master", grpcAddr, "--tls-ca", both, "--data-tls-cert", filepath.Join(dir, "missing.pem"), "--data-tls-key", filepath.Join(dir, "data-key.pem"), "--data-addr", "127.0.0.1:0"},
		{"master", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--data-tls-ca", filepath.Join(dir, "missing.pem")},
	} {
		_, stderr, code := runKvtierCode(t, nil, args...)
		if code == 0 || !strings.Contains(stderr, "--data-tls-") {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
	// And the first object is intact.
	if out, stderr, code := runKvtierCode(t, nil, "get", "k", "--master", grpcAddr, "--tls-ca", both); code != 0 || out != val {
		t.Fatalf("get after the refusals: exit %d: %s", code, stderr)
	}
}
