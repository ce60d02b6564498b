package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/internal/buildinfo"
	"github.com/kvtier/kvtier/master"
	"github.com/kvtier/kvtier/metrics"
	"github.com/kvtier/kvtier/rest"
)

// dataPlane lets the REST API move object bytes the way every other client
// does: through the SDK, one pure-caller client per tenant, connected to this
// master's own gRPC listener.
type dataPlane struct {
	masterAddr string
	metrics    *metrics.Metrics

	mu      sync.Mutex
	clients map[string]*client.Client // guarded by mu: tenant -> client
	token   string                    // the process's own credential (--credentials)
	tls     *tls.Config               // the process's own TLS trust (--tls-cert)
	dataTLS *tls.Config               // appliances' TLS data ports (--data-tls-ca); nil: tls
}

var _ rest.DataPlane = (*dataPlane)(nil)

func (d *dataPlane) client(ctx context.Context, tenant string) (*client.Client, error) {
	if tenant == "" {
		tenant = "default"
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.clients[tenant]; ok {
		return c, nil
	}
	c, err := client.New(ctx, client.Config{MasterAddr: d.masterAddr, Tenant: tenant, ClientID: "rest-" + tenant, HeartbeatInterval: 5 * time.Second,
		Token: d.token, TLS: d.tls, Transfer: client.TransferConfig{ClientTLS: d.dataTLS}})
	if err != nil {
		return nil, err
	}
	d.clients[tenant] = c
	return c, nil
}

func (d *dataPlane) Put(ctx context.Context, key string, value []byte, o rest.PutOptions) error {
	c, err := d.client(ctx, o.Tenant)
	if err != nil {
		return err
	}
	opts := client.PutOptions{Replicas: o.Replicas, SoftPin: o.SoftPin, HardPin: o.HardPin, PreferredSegment: o.PreferredSegment}
	if err := c.Put(ctx, key, value, client.WithOptions(opts)); err != nil {
		return err
	}
	d.metrics.AddTransferBytes("put", len(value))
	return nil
}

func (d *dataPlane) Get(ctx context.Context, tenant, key string) ([]byte, error) {
	c, err := d.client(ctx, tenant)
	if err != nil {
		return nil, err
	}
	v, err := c.Get(ctx, key)
	if err == nil {
		d.metrics.AddTransferBytes("get", len(v))
	}
	return v, err
}

// OpenObject streams GET objects/{key}/data in ranges (rest.ObjectStreamer):
// the REST API then holds one chunk per request, not the whole object.
func (d *dataPlane) OpenObject(ctx context.Context, tenant, key string) (rest.ObjectStream, error) {
	c, err := d.client(ctx, tenant)
	if err != nil {
		return nil, err
	}
	r, err := c.OpenReader(ctx, key)
	if err != nil {
		return nil, err
	}
	return r, nil
}

var _ rest.ObjectStreamer = (*dataPlane)(nil)

func (d *dataPlane) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.clients {
		c.Close()
	}
	d.clients = map[string]*client.Client{}
}

// frontEnd is the master's REST API, metrics and web UI.
type frontEnd struct {
	metrics *metrics.Metrics
	rest    *rest.Server
	dp      *dataPlane
}

func newFrontEnd(ms kvtierpb.MasterServer, f *masterFlags, log *slog.Logger) (*frontEnd, error) {
	m, err := metrics.New(metrics.Config{Source: ms, Build: buildinfo.Get(), ProcessCollectors: true})
	if err != nil {
		return nil, err
	}
	return &frontEnd{metrics: m}, nil
}

// grpcOptions instruments the master's gRPC server and tunes it for many
// small, latency-bound calls:
//   - stream workers: by default every call runs on a fresh goroutine whose
//     stack grows (copies) to the depth of the handler on each call; a pool
//     of workers keeps grown stacks (gRPC still spawns a goroutine when all
//     workers are busy, so long WatchEvents streams cannot starve calls);
//   - fixed flow-control windows (the client's sizes) switch off the
//     server's bandwidth-delay-product estimator, whose PING frames cost the
//     client and the master an extra wake-up per call.
func (fe *frontEnd) grpcOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(64 << 20),
		grpc.NumStreamWorkers(uint32(4 * runtime.GOMAXPROCS(0))),
		grpc.InitialWindowSize(4 << 20),
		grpc.InitialConnWindowSize(16 << 20),
		grpc.UnaryInterceptor(fe.metrics.UnaryServerInterceptor()),
		grpc.StreamInterceptor(fe.metrics.StreamServerInterceptor()),
	}
}

// start builds the REST server once the gRPC address is known.
func (fe *frontEnd) start(ms kvtierpb.MasterServer, mcfg master.Config, grpcAddr string, f *masterFlags, log *slog.Logger) error {
	fe.dp = &dataPlane{masterAddr: grpcAddr, metrics: fe.metrics, clients: map[string]*client.Client{},
		token: f.sec.internalToken(), tls: f.sec.selfTLS()}
	if f.dataTLSCA != "" {
		pool, err := auth.LoadCAPool(f.dataTLSCA)
		if err != nil {
			return usagef("--data-tls-ca: %v", err)
		}
		fe.dp.dataTLS = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	}
	cfg := f.config()
	effective := map[string]any{
		"grpc_addr": grpcAddr, "http_addr": f.httpAddr, "lease_ttl": cfg.LeaseTTL.String(),
		"high_watermark": cfg.HighWatermark, "eviction_ratio": cfg.EvictionRatio, "lease_policy": cfg.LeasePolicy,
		"client_ttl": cfg.ClientTTL.String(), "client_grace": cfg.ClientGrace.String(),
		"put_discard_timeout": cfg.PutDiscardTimeout.String(), "put_release_timeout": cfg.PutReleaseTimeout.String(),
		"max_objects": cfg.MaxObjects, "offload": cfg.OffloadMode, "http_token_set": f.httpToken != "",
	}
	if len(f.settings) > 0 {
		// Every flag of the server command as `kvtier config print` shows
		// it: value (secrets masked) and where it came from.
		vals, srcs := map[string]any{}, map[string]any{}
		for _, st := range f.settings {
			vals[st.Name], srcs[st.Name] = st.Value, st.Source
		}
		effective["settings"], effective["sources"] = vals, srcs
	}
	var creds rest.Authenticator
	if f.sec.store != nil {
		creds = f.sec.store
	}
	s, err := rest.New(rest.Config{Token: f.httpToken, Credentials: creds, Metrics: fe.metrics, Logger: log,
		EffectiveConfig: func() any { return effective }, Doctor: doctorFor(f.doctor),
		MaxReplicas: mcfg.MaxReplicas}, ms, fe.dp) // the master's, defaults applied
	if err != nil {
		return err
	}
	fe.rest = s
	return nil
}
