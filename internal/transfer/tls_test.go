package transfer

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testTLS makes a CA and a certificate for 127.0.0.1 signed by it: the
// server's config and a client config trusting the CA.
func testTLS(t testing.TB) (server, client *tls.Config) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "appliance"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
}

// tlsPair starts a server engine serving one segment over TLS and returns
// it with its advertised endpoint.
func tlsPair(t testing.TB, size int, srvTLS *tls.Config) (*Engine, []byte, string) {
	t.Helper()
	srv, err := New(Config{ServerTLS: srvTLS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	mem := make([]byte, size)
	if err := srv.RegisterSegment("seg", mem); err != nil {
		t.Fatal(err)
	}
	addr, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return srv, mem, TLSEndpoint(addr.String(), srv.Secure())
}

func TestTLSDataPortPutGet(t *testing.T) {
	srvTLS, cliTLS := testTLS(t)
	srv, mem, ep := tlsPair(t, 4<<20, srvTLS)
	if !strings.HasPrefix(ep, TLSScheme) {
		t.Fatalf("endpoint %q does not advertise TLS", ep)
	}
	cli, err := New(Config{ClientTLS: cliTLS, DisableSharedMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	val := make([]byte, 3<<20+17) // several slices
	fillPattern(val, 7)
	if err := cli.Do(ctx, []Request{{Op: Write, Endpoint: ep, Segment: "seg", Offset: 4096, Buf: val}})[0]; err != nil {
		t.Fatalf("write over TLS: %v", err)
	}
	if !bytes.Equal(mem[4096:4096+len(val)], val) {
		t.Fatal("the server's memory does not hold what was written over TLS")
	}
	got := make([]byte, len(val))
	if err := cli.Do(ctx, []Request{{Op: Read, Endpoint: ep, Segment: "seg", Offset: 4096, Buf: got}})[0]; err != nil {
		t.Fatalf("read over TLS: %v", err)
	}
	if !bytes.Equal(got, val) {
		t.Fatal("read over TLS returned other bytes")
	}
	if st := cli.Stats(); st.TCPRequests == 0 || st.LocalRequests != 0 || st.SharedRequests != 0 {
		t.Fatalf("requests did not go over the network: %+v", st)
	}
	if st := srv.Stats(); st.ServedFrames == 0 {
		t.Fatalf("server served no frame: %+v", st)
	}
}

func TestTLSDataPortRefusesUntrusted(t *testing.T) {
	srvTLS, _ := testTLS(t)
	_, otherCA := testTLS(t) // a CA that did not sign the server's certificate
	srv, mem, ep := tlsPair(t, 1<<20, srvTLS)
	copy(mem, "secret")
	ctx := context.Background()
	for name, cfg := range map[string]Config{
		"no CA":         {DisableSharedMemory: true},
		"another CA":    {DisableSharedMemory: true, ClientTLS: otherCA},
		"shared memory": {ClientTLS: otherCA},
	} {
		t.Run(name, func(t *testing.T) {
			cli, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			buf := make([]byte, 4096)
			err = cli.Do(ctx, []Request{{Op: Read, Endpoint: ep, Segment: "seg", Buf: buf}})[0]
			if err == nil || !strings.Contains(err.Error(), "TLS") || !strings.Contains(err.Error(), "KVTIER_TLS_CA") {
				t.Fatalf("read with %s: got %v, want a TLS refusal naming KVTIER_TLS_CA", name, err)
			}
			if bytes.Contains(buf, []byte("secret")) {
				t.Fatal("bytes reached an untrusting client")
			}
			if err := cli.Do(ctx, []Request{{Op: Write, Endpoint: ep, Segment: "seg", Buf: []byte("forged")}})[0]; err == nil {
				t.Fatal("write accepted from an untrusting client")
			}
			if string(mem[:6]) != "secret" {
				t.Fatalf("memory changed: %q", mem[:6])
			}
		})
	}
	// A plain client sent to the bare address speaks no TLS: refused too.
	plainAddr := strings.TrimPrefix(ep, TLSScheme)
	cli, err := New(Config{DisableSharedMemory: true, IOTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if err := cli.Do(ctx, []Request{{Op: Write, Endpoint: plainAddr, Segment: "seg", Buf: []byte("forged")}})[0]; err == nil {
		t.Fatal("plain-TCP write accepted by a TLS data port")
	}
	if string(mem[:6]) != "secret" {
		t.Fatalf("memory changed by a plain client: %q", mem[:6])
	}
	if st := srv.Stats(); st.ServedFrames != 0 {
		t.Fatalf("the TLS server served %d frames to untrusting clients", st.ServedFrames)
	}
}

func TestSplitEndpoint(t *testing.T) {
	for ep, want := range map[string]struct {
		addr   string
		secure bool
	}{
		"127.0.0.1:1":       {"127.0.0.1:1", false},
		"tls://127.0.0.1:1": {"127.0.0.1:1", true},
		"tls://[::1]:9":     {"[::1]:9", true},
	} {
		a, s := splitEndpoint(ep)
		if a != want.addr || s != want.secure {
			t.Errorf("splitEndpoint(%q) = %q, %v; want %q, %v", ep, a, s, want.addr, want.secure)
		}
	}
	if !sameHostAddr("tls://127.0.0.1:5") {
		t.Error("a TLS loopback endpoint is not recognised as this host")
	}
}

// BenchmarkTLSvsTCP moves 1 MiB READs and WRITEs to an engine serving TLS
// and, interleaved in the same loop, to one serving plain TCP (both in this
// process, shared memory off); ratio = TLS throughput / TCP throughput.
func BenchmarkTLSvsTCP(b *testing.B) {
	srvTLS, cliTLS := testTLS(b)
	_, _, tlsEP := tlsPair(b, 16<<20, srvTLS)
	_, _, tcpEP := tlsPair(b, 16<<20, nil)
	cli, err := New(Config{ClientTLS: cliTLS, DisableSharedMemory: true})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	for _, op := range []Op{Read, Write} {
		for _, n := range []int{64 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("%s/%s", op, sizeName(n)), func(b *testing.B) {
				buf := make([]byte, n)
				eps := [2]string{tlsEP, tcpEP}
				for range 3 { // warm up: connections, handshakes, page faults
					for _, ep := range eps {
						if err := cli.Do(ctx, []Request{{Op: op, Endpoint: ep, Segment: "seg", Buf: buf}})[0]; err != nil {
							b.Fatal(err)
						}
					}
				}
				b.SetBytes(int64(n))
				b.ResetTimer()
				var d [2]time.Duration
				for i := range b.N {
					for k := range 2 {
						j := (i + k) % 2 // alternate which goes first
						t0 := time.Now()
						if err := cli.Do(ctx, []Request{{Op: op, Endpoint: eps[j], Segment: "seg", Buf: buf}})[0]; err != nil {
							b.Fatal(err)
						}
						d[j] += time.Since(t0)
					}
				}
				b.StopTimer()
				total := float64(n) * float64(b.N)
				b.ReportMetric(total/d[0].Seconds()/1e9, "tls-GB/s")
				b.ReportMetric(total/d[1].Seconds()/1e9, "tcp-GB/s")
				b.ReportMetric(d[1].Seconds()/d[0].Seconds(), "ratio")
			})
		}
	}
}

// TestTLSDataPortSharedMemory: a same-host client that trusts the data
// port's certificate still finds the peer's shared memory (discovered over
// the TLS port) and copies through it; shared memory is unchanged by TLS.
func TestTLSDataPortSharedMemory(t *testing.T) {
	srvTLS, cliTLS := testTLS(t)
	f, mem, err := sharedMemory(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the engines' Close.
	t.Cleanup(func() { unix.Munmap(mem); f.Close() })
	srv := newEngine(t, Config{ServerTLS: srvTLS})
	if err := srv.ShareMemory(mem, f); err != nil {
		t.Fatal(err)
	}
	if err := srv.RegisterSegment("seg", mem); err != nil {
		t.Fatal(err)
	}
	fillPattern(mem, 0)
	addr, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := TLSEndpoint(addr.String(), true)
	cli := newEngine(t, Config{ClientTLS: cliTLS})
	buf := make([]byte, 4096)
	eventually(t, "a read through shared memory", func() error {
		if err := cli.Do(context.Background(), []Request{{Op: Read, Endpoint: ep, Segment: "seg", Offset: 8192, Buf: buf}})[0]; err != nil {
			t.Fatal(err)
		}
		if cli.Stats().SharedRequests == 0 {
			return fmt.Errorf("not mapped yet: %+v", cli.Stats())
		}
		return nil
	})
	want := make([]byte, len(buf))
	fillPattern(want, 8192)
	if !bytes.Equal(buf, want) {
		t.Fatal("shared-memory read returned other bytes")
	}
}
