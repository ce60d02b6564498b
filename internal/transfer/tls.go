package transfer

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"time"

	"github.com/kvtier/kvtier/kverr"
)

// TLSScheme prefixes an Endpoint whose data port speaks TLS: an engine with
// Config.ServerTLS is advertised as "tls://host:port" (TLSEndpoint), and a
// peer dialing such an endpoint runs a TLS handshake before the first frame.
// A plain "host:port" stays plain TCP, so engines that never heard of TLS
// keep working against plain peers, and refuse (with a dial error) a TLS one.
const TLSScheme = "tls://"

// TLSEndpoint returns the endpoint to advertise for a data listener at addr:
// TLSScheme+addr when secure, else addr.
func TLSEndpoint(addr string, secure bool) string {
	if secure {
		return TLSScheme + addr
	}
	return addr
}

// splitEndpoint returns the host:port of an endpoint and whether it needs TLS.
func splitEndpoint(ep string) (addr string, secure bool) {
	if a, ok := strings.CutPrefix(ep, TLSScheme); ok {
		return a, true
	}
	return ep, false
}

// dialData connects to the data port at endpoint ep: plain TCP, or TLS for a
// TLSScheme endpoint, the handshake done (bounded by ctx) before it returns
// so that an untrusted certificate fails here with a message that says so.
func (e *Engine) dialData(ctx context.Context, ep string) (net.Conn, error) {
	addr, secure := splitEndpoint(ep)
	d := net.Dialer{Timeout: e.cfg.DialTimeout, KeepAlive: 15 * time.Second}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	e.tuneConn(nc)
	if !secure {
		return nc, nil
	}
	var cfg *tls.Config
	if e.cfg.ClientTLS != nil {
		cfg = e.cfg.ClientTLS.Clone()
	} else {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12} // the system's roots
	}
	// The certificate must name the host the endpoint names, whatever
	// name the configuration was made for (the master's).
	cfg.ServerName, _, _ = net.SplitHostPort(addr)
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, kverr.New(kverr.TransferFail, "", "transfer: TLS handshake with data port %s: %v (trust its CA: --tls-ca or KVTIER_TLS_CA; the master's REST data plane: --data-tls-ca)", addr, err)
	}
	return tc, nil
}

// serverConn wraps an accepted connection in TLS when the engine serves TLS
// (the handshake runs on the serving goroutine's first read, under its
// idle deadline, so a silent peer cannot hold the accept loop).
func (e *Engine) serverConn(nc net.Conn) net.Conn {
	if e.cfg.ServerTLS == nil {
		return nc
	}
	return tls.Server(nc, e.cfg.ServerTLS)
}

// Secure reports whether this engine's data listeners speak TLS.
func (e *Engine) Secure() bool { return e.cfg.ServerTLS != nil }
