package auth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// FromCertificate maps a verified client certificate (mTLS) to a
// principal: a URI SAN `kvtier:ROLE` or `kvtier:client:TENANT` wins, else
// the subject CN read the same way without the scheme (`admin`,
// `appliance`, `client`, `client:TENANT`). Anything else maps to nothing
// (the call then needs a token).
func FromCertificate(c *x509.Certificate) (Principal, bool) {
	parse := func(s string) (Principal, bool) {
		roleS, tenant, _ := strings.Cut(s, ":")
		r, err := ParseRole(roleS)
		if err != nil || (tenant != "" && r != RoleClient) {
			return Principal{}, false
		}
		d := sha256.Sum256(c.Raw)
		return Principal{Role: r, Tenant: tenant, ID: "cert-" + hex.EncodeToString(d[:6])}, true
	}
	for _, u := range c.URIs {
		if u.Scheme == "kvtier" {
			return parse(u.Opaque)
		}
	}
	return parse(c.Subject.CommonName)
}

// PeerPrincipal returns the principal of a verified client certificate the
// call's peer presented (gRPC peer info, or a fast-path connection's, see
// WithPeerTLS).
func PeerPrincipal(ctx context.Context) (Principal, bool) {
	if st, ok := ctx.Value(tlsKey{}).(*tls.ConnectionState); ok {
		return stateprincipal(st)
	}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			return stateprincipal(&ti.State)
		}
	}
	return Principal{}, false
}

func stateprincipal(st *tls.ConnectionState) (Principal, bool) {
	if len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return Principal{}, false
	}
	return FromCertificate(st.VerifiedChains[0][0])
}

type tlsKey struct{}

// WithPeerTLS returns ctx carrying a connection's TLS state (the fast
// path's connections).
func WithPeerTLS(ctx context.Context, st *tls.ConnectionState) context.Context {
	return context.WithValue(ctx, tlsKey{}, st)
}

// TLSConn returns the *tls.Conn under c (through wrappers that expose
// NetConn), or nil.
func TLSConn(c net.Conn) *tls.Conn {
	for c != nil {
		if tc, ok := c.(*tls.Conn); ok {
			return tc
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
	return nil
}

// ServerTLS is a server's certificate, key and optional client CA,
// re-read by Reload (SIGHUP) and picked up by new connections.
type ServerTLS struct {
	certFile, keyFile, caFile string
	cert                      atomic.Pointer[tls.Certificate]
	pool                      atomic.Pointer[x509.CertPool]
}

// NewServerTLS loads the files (caFile may be empty: no client
// certificates are asked for).
func NewServerTLS(certFile, keyFile, caFile string) (*ServerTLS, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	s := &ServerTLS{certFile: certFile, keyFile: keyFile, caFile: caFile}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload re-reads the files; on error the previous material stays.
func (s *ServerTLS) Reload() error {
	cert, err := tls.LoadX509KeyPair(s.certFile, s.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	var pool *x509.CertPool
	if s.caFile != "" {
		if pool, err = LoadCAPool(s.caFile); err != nil {
			return fmt.Errorf("--tls-client-ca: %w", err)
		}
	}
	s.cert.Store(&cert)
	if pool != nil {
		s.pool.Store(pool)
	}
	return nil
}

// Leaf is the DER of the current certificate.
func (s *ServerTLS) Leaf() []byte { return s.cert.Load().Certificate[0] }

// Config is the server-side tls.Config (nextProtos: the ALPN protocols).
// With a client CA, a client certificate is verified when given (calls
// without one need a token).
func (s *ServerTLS) Config(nextProtos ...string) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.cert.Load(), nil }}
		if p := s.pool.Load(); p != nil {
			c.ClientCAs, c.ClientAuth = p, tls.VerifyClientCertIfGiven
		}
		return c, nil
	}
	return base
}

// SelfConfig is the client tls.Config of this process's own clients (a
// standalone's appliance, the REST data plane): it trusts exactly the
// server's current certificate.
func (s *ServerTLS) SelfConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) > 0 && string(raw[0]) == string(s.Leaf()) {
				return nil
			}
			return errors.New("not this process's certificate")
		}}
}

// LoadCAPool reads PEM certificates from path.
func LoadCAPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// ClientTLS is the tls.Config a client process uses to reach a master:
// nil when caFile is empty and $KVTIER_TLS_CA unset (no TLS).
func ClientTLS(caFile string) (*tls.Config, error) {
	if caFile == "" {
		caFile = os.Getenv("KVTIER_TLS_CA")
	}
	if caFile == "" {
		return nil, nil
	}
	pool, err := LoadCAPool(caFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

// GRPCServerCreds is a gRPC TransportCredentials for a listener that
// already terminates TLS (tls.NewListener under fastrpc's Split): it does
// no handshake of its own, only reports the connection's TLS state so that
// peer certificates reach the interceptors.
type GRPCServerCreds struct{}

func (GRPCServerCreds) ClientHandshake(ctx context.Context, _ string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("server-side credentials only")
}

func (GRPCServerCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc := TLSConn(c)
	if tc == nil {
		return c, nil, nil
	}
	if err := tc.Handshake(); err != nil {
		return nil, nil, err
	}
	return c, credentials.TLSInfo{State: tc.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (GRPCServerCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}

func (GRPCServerCreds) Clone() credentials.TransportCredentials { return GRPCServerCreds{} }

func (GRPCServerCreds) OverrideServerName(string) error { return nil }
