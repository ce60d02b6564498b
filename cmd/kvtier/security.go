package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/master"
)

// securityFlags are the master's (and standalone's) credentials and TLS
// settings (README "Security").
type securityFlags struct {
	credentials string
	insecure    bool
	tlsCert     string
	tlsKey      string
	tlsClientCA string
}

func (f *securityFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.credentials, "credentials", "", "credential file: one `ROLE TOKEN [TENANT]` a line (roles admin, appliance, client; # comments); re-read on SIGHUP. Without it the master runs open, on loopback addresses only")
	fs.BoolVar(&f.insecure, "insecure", false, "allow listening on a non-loopback address without --credentials (anyone who reaches the box owns it)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate: serve gRPC, the fast path and REST over TLS (re-read on SIGHUP)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&f.tlsClientCA, "tls-client-ca", "", "PEM CA whose client certificates are accepted (mTLS): a certificate's URI SAN kvtier:ROLE[:TENANT], or else its CN ROLE[:TENANT], gives its role")
}

// security is a running master's credentials and TLS material.
type security struct {
	store *auth.Store     // nil: open
	tls   *auth.ServerTLS // nil: no TLS
}

// isLoopback reports whether a listen address binds loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// setup loads credentials and TLS and applies the loopback rule.
func (f *securityFlags) setup(log *slog.Logger, addrs ...string) (*security, error) {
	sec := &security{}
	if f.credentials != "" {
		st, err := auth.NewStore(f.credentials)
		if err != nil {
			return nil, usagef("--credentials: %v", err)
		}
		if st.Len() == 0 {
			return nil, usagef("--credentials %s: no credential in the file", f.credentials)
		}
		sec.store = st
		log.Info("credentials loaded", "file", f.credentials, "count", st.Len())
	} else {
		for _, a := range addrs {
			if !isLoopback(a) && !f.insecure {
				return nil, usagef("listening on %s without --credentials would let anyone who reaches it own the box: give --credentials FILE, a loopback address, or --insecure", a)
			}
		}
		if f.insecure {
			log.Warn("open mode: no --credentials and --insecure: every caller that reaches the listeners may read, write and manage this box")
		} else {
			log.Warn("open mode: no --credentials; bound to loopback addresses only")
		}
	}
	if f.tlsCert != "" || f.tlsKey != "" || f.tlsClientCA != "" {
		t, err := auth.NewServerTLS(f.tlsCert, f.tlsKey, f.tlsClientCA)
		if err != nil {
			return nil, usagef("%v", err)
		}
		sec.tls = t
	}
	return sec, nil
}

// watchReload re-reads credentials and TLS material on SIGHUP (only when
// either is configured: otherwise SIGHUP keeps its default meaning).
func (sec *security) watchReload(ctx context.Context, log *slog.Logger) {
	if sec.store == nil && sec.tls == nil {
		return
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
			}
			if sec.store != nil {
				n, err := sec.store.Reload()
				if err != nil {
					log.Error("SIGHUP: credentials not reloaded, the previous ones stay", "err", err)
				} else {
					log.Info("SIGHUP: credentials reloaded", "count", n)
				}
			}
			if sec.tls != nil {
				if err := sec.tls.Reload(); err != nil {
					log.Error("SIGHUP: TLS material not reloaded, the previous stays", "err", err)
				} else {
					log.Info("SIGHUP: TLS material reloaded")
				}
			}
		}
	}()
}

// internalToken is the token of this process's own clients ("" when open).
func (sec *security) internalToken() string { return sec.store.InternalToken() }

// selfTLS is the client TLS of this process's own clients (nil without TLS).
func (sec *security) selfTLS() *tls.Config {
	if sec.tls == nil {
		return nil
	}
	return sec.tls.SelfConfig()
}

// interceptors returns the gRPC unary and stream interceptors: metrics,
// then authorization when credentials are configured.
func (sec *security) interceptors(m *master.Master, unary grpc.UnaryServerInterceptor, stream grpc.StreamServerInterceptor) ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	us, ss := []grpc.UnaryServerInterceptor{unary}, []grpc.StreamServerInterceptor{stream}
	if sec.store != nil {
		a := master.NewAuthorizer(m, sec.store)
		us, ss = append(us, a.Unary), append(ss, a.Stream)
	}
	return us, ss
}

// chainUnary composes unary interceptors (the fast path takes one).
func chainUnary(is []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	if len(is) == 1 {
		return is[0]
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		next := h
		for i := len(is) - 1; i >= 0; i-- {
			ic, n := is[i], next
			next = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, n) }
		}
		return next(ctx, req)
	}
}

// fastAccept is the fast path's handshake check: a known token, or a
// verified client certificate that maps to a role.
func (sec *security) fastAccept(token string, c net.Conn) bool {
	if _, ok := sec.store.Lookup(token); ok {
		return true
	}
	if tc := auth.TLSConn(c); tc != nil {
		st := tc.ConnectionState()
		_, ok := auth.PeerPrincipal(auth.WithPeerTLS(context.Background(), &st))
		return ok
	}
	return false
}

// fastConnContext hands a fast-path connection's TLS state to its calls.
func fastConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc := auth.TLSConn(c); tc != nil {
		st := tc.ConnectionState()
		return auth.WithPeerTLS(ctx, &st)
	}
	return ctx
}

// clientSecurityFlags are a client process's token file and CA (client
// verbs, appliance, bench): the token itself never goes on the command line.
type clientSecurityFlags struct {
	tokenFile string
	tlsCA     string
}

func (f *clientSecurityFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.tokenFile, "token-file", "", "file holding this process's credential token (or KVTIER_TOKEN); needed when the master has --credentials")
	cmd.Flags().StringVar(&f.tlsCA, "tls-ca", "", "PEM CA that signed the master's --tls-cert (or KVTIER_TLS_CA): reach the master over TLS")
}

// load returns the token and TLS config to use.
func (f *clientSecurityFlags) load() (string, *tls.Config, error) {
	tok, err := auth.ClientToken(f.tokenFile)
	if err != nil {
		return "", nil, usagef("%v", err)
	}
	tc, err := auth.ClientTLS(f.tlsCA)
	if err != nil {
		return "", nil, usagef("%v", err)
	}
	return tok, tc, nil
}
