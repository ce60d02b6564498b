package fastrpc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/master"
)

// TestHandshakeToken: a server with SetAuthenticate serves only
// connections whose hello carries a token it accepts, refuses the others
// before any call (the client then uses its gRPC fallback), and hands the
// token to the interceptor as `authorization` metadata.
func TestHandshakeToken(t *testing.T) {
	m, err := master.New(master.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ms := master.NewGRPCServer(m)
	var mu sync.Mutex
	var seen []string // authorization metadata of calls on the fast path
	fastCalls := 0
	icpt := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		seen = append(seen, md.Get("authorization")...)
		mu.Unlock()
		return h(ctx, req)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fast := NewServer(&kvtierpb.Master_ServiceDesc, ms, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		mu.Lock()
		fastCalls++
		mu.Unlock()
		return icpt(ctx, req, info, h)
	})
	fast.SetAuthenticate(func(tok string, _ net.Conn) bool { return tok == "good-token-0123456789" })
	gs := grpc.NewServer()
	kvtierpb.RegisterMasterServer(gs, ms)
	go func() { _ = gs.Serve(fast.Split(lis)) }()
	t.Cleanup(func() { gs.Stop(); _ = fast.Close() })
	addr := lis.Addr().String()

	dial := func(tok string) (*Conn, kvtierpb.MasterClient) {
		gc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { gc.Close() })
		fc, err := Dial(ClientConfig{Addrs: []string{addr}, Fallback: gc, Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fc.Close() })
		return fc, kvtierpb.NewMasterClient(fc)
	}
	ctx := context.Background()
	for _, tok := range []string{"", "wrong-token-0123456789"} {
		fc, mc := dial(tok)
		if _, err := mc.Stats(ctx, &kvtierpb.Empty{}); err != nil {
			t.Fatalf("token %q: call through the fallback: %v", tok, err)
		}
		if fastUsed(fc) {
			t.Fatalf("token %q: the fast path accepted the connection", tok)
		}
	}
	mu.Lock()
	if fastCalls != 0 {
		t.Fatalf("%d calls ran on refused fast-path connections", fastCalls)
	}
	mu.Unlock()
	fc, mc := dial("good-token-0123456789")
	if _, err := mc.Stats(ctx, &kvtierpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if !fastUsed(fc) {
		t.Fatal("the right token was refused by the fast path")
	}
	mu.Lock()
	defer mu.Unlock()
	if fastCalls != 1 || len(seen) != 1 || seen[0] != "Bearer good-token-0123456789" {
		t.Fatalf("fast calls %d, authorization metadata %q", fastCalls, seen)
	}
}

// TestFastPathOverTLS: with TLS terminated on the listener (as the master
// does under --tls-cert), a client with a TLS config uses the fast path,
// and its calls see the connection's TLS state through SetConnContext.
func TestFastPathOverTLS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "m"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	m, err := master.New(master.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ms := master.NewGRPCServer(m)
	var tlsCalls atomic.Int64
	type key0 struct{}
	fast := NewServer(&kvtierpb.Master_ServiceDesc, ms, func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if ctx.Value(key0{}) != nil {
			tlsCalls.Add(1)
		}
		return h(ctx, req)
	})
	fast.SetConnContext(func(ctx context.Context, c net.Conn) context.Context {
		if u, ok := c.(interface{ NetConn() net.Conn }); ok {
			if _, ok := u.NetConn().(*tls.Conn); ok {
				return context.WithValue(ctx, key0{}, true)
			}
		}
		if _, ok := c.(*tls.Conn); ok {
			return context.WithValue(ctx, key0{}, true)
		}
		return ctx
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl := tls.NewListener(lis, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, NextProtos: []string{"h2"}})
	gs := grpc.NewServer()
	kvtierpb.RegisterMasterServer(gs, ms)
	go func() { _ = gs.Serve(fast.Split(tl)) }()
	t.Cleanup(func() { gs.Stop(); _ = fast.Close() })
	addr := lis.Addr().String()
	cfg := &tls.Config{RootCAs: pool}
	gc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	fc, err := Dial(ClientConfig{Addrs: []string{addr}, Fallback: gc, TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	if _, err := kvtierpb.NewMasterClient(fc).Stats(context.Background(), &kvtierpb.Empty{}); err != nil {
		t.Fatal(err)
	}
	if !fastUsed(fc) || tlsCalls.Load() != 1 {
		t.Fatalf("fast path over TLS: used %v, calls seeing TLS %d", fastUsed(fc), tlsCalls.Load())
	}
	// gRPC streams (fallback) work over the same TLS listener.
	st, err := kvtierpb.NewMasterClient(fc).WatchEvents(context.Background(), &kvtierpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.CloseSend()
}

// TestHandshakeBadToken: a hello whose token is longer than maxTokenLen,
// cut short, or carries an unknown flag is closed without an answer.
func TestHandshakeBadToken(t *testing.T) {
	m, err := master.New(master.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fast := NewServer(&kvtierpb.Master_ServiceDesc, master.NewGRPCServer(m), nil)
	fast.SetAuthenticate(func(tok string, _ net.Conn) bool { return tok == "good-token-0123456789" })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl := fast.Split(lis)
	t.Cleanup(func() { gl.Close(); _ = fast.Close() })
	withTok := func(n int, body string, flag byte) []byte {
		h := append([]byte(nil), hello[:]...)
		h[5] = flag
		h = append(h, byte(n>>8), byte(n))
		return append(h, body...)
	}
	for name, b := range map[string][]byte{
		"too long":     withTok(maxTokenLen+1, strings.Repeat("x", maxTokenLen+1), helloToken),
		"cut short":    withTok(30, "short", helloToken),
		"unknown flag": withTok(5, "abcde", 2),
		"wrong token":  withTok(5, "abcde", helloToken),
	} {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(b)
		if name == "cut short" {
			_ = c.(*net.TCPConn).CloseWrite()
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var buf [8]byte
		if n, err := c.Read(buf[:]); err == nil || n > 0 {
			t.Errorf("%s: answered %x", name, buf[:n])
		}
		c.Close()
	}
}
