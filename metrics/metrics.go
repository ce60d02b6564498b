package metrics

import (
	"context"
	"errors"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/buildinfo"
	"github.com/kvtier/kvtier/kverr"
)

// Source is what the scrape-time collector asks for cluster figures. A
// kvtierpb.MasterServer satisfies it.
type Source interface {
	Stats(context.Context, *kvtierpb.Empty) (*kvtierpb.StatsResponse, error)
	ListSegments(context.Context, *kvtierpb.Empty) (*kvtierpb.ListSegmentsResponse, error)
	ListClients(context.Context, *kvtierpb.Empty) (*kvtierpb.ListClientsResponse, error)
}

var _ Source = (kvtierpb.MasterServer)(nil)

// Config configures a Metrics. The zero value is valid: no cluster source
// (only request and transfer metrics) and a 2 s scrape timeout.
type Config struct {
	// Source, when set, is queried at every scrape for tier, eviction,
	// offload and SSD figures.
	Source Source
	// ScrapeTimeout bounds the Source calls of one scrape; 0 means 2 s.
	ScrapeTimeout time.Duration
	// Build is exported as kvtier_build_info; the zero value exports
	// buildinfo.Get().
	Build buildinfo.Info
	// ProcessCollectors adds the Go runtime (go_*) and process (process_*)
	// collectors of this process. Off by default so that tests building
	// several Metrics in one process see only kvtier's series.
	ProcessCollectors bool
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	if c.ScrapeTimeout < 0 {
		return kverr.New(kverr.InvalidParams, "", "metrics: negative scrape timeout %v", c.ScrapeTimeout)
	}
	return nil
}

// Metrics is one private registry with kvtier's metrics. Safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	httpRequests *prometheus.CounterVec   // op, result
	httpLatency  *prometheus.HistogramVec // op
	rpcRequests  *prometheus.CounterVec   // op, result
	rpcLatency   *prometheus.HistogramVec // op
	transfer     *prometheus.CounterVec   // op
	cluster      *clusterCollector        // nil without a Source
}

// latencyBuckets spans 50 µs to ~3 s: control-plane RPCs are sub-millisecond,
// REST data uploads can take seconds.
var latencyBuckets = prometheus.ExponentialBuckets(50e-6, 2.5, 13)

// New returns a Metrics with its own registry.
func New(cfg Config) (*Metrics, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ScrapeTimeout == 0 {
		cfg.ScrapeTimeout = 2 * time.Second
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvtier_http_requests_total",
			Help: "REST and UI requests by route (op) and HTTP status (result).",
		}, []string{"op", "result"}),
		httpLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvtier_http_request_duration_seconds",
			Help:    "REST request latency by route.",
			Buckets: latencyBuckets,
		}, []string{"op"}),
		rpcRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvtier_rpc_requests_total",
			Help: "Master gRPC calls by method (op) and kvtier error code (result).",
		}, []string{"op", "result"}),
		rpcLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "kvtier_rpc_duration_seconds",
			Help:    "Master gRPC call latency by method.",
			Buckets: latencyBuckets,
		}, []string{"op"}),
		transfer: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kvtier_transfer_bytes_total",
			Help: "Object bytes moved by the data plane, by operation (put, get, offload...).",
		}, []string{"op"}),
	}
	if cfg.Build.GoVersion == "" {
		cfg.Build = buildinfo.Get()
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kvtier_build_info",
		Help: "Always 1; the labels name the running build (version, commit, Go version, build tags).",
		ConstLabels: prometheus.Labels{"version": cfg.Build.Version, "commit": cfg.Build.Commit,
			"go_version": cfg.Build.GoVersion, "tags": strings.Join(cfg.Build.BuildTags, ",")},
	})
	build.Set(1)
	cs := []prometheus.Collector{m.httpRequests, m.httpLatency, m.rpcRequests, m.rpcLatency, m.transfer, build}
	if cfg.Source != nil {
		m.cluster = newClusterCollector(cfg.Source, cfg.ScrapeTimeout)
		cs = append(cs, m.cluster)
	}
	if cfg.ProcessCollectors {
		cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return nil, kverr.New(kverr.InternalError, "", "metrics: register: %v", err)
		}
	}
	// Pre-create the transfer series so dashboards show 0 rather than "no data".
	for _, op := range []string{"put", "get"} {
		m.transfer.WithLabelValues(op)
	}
	return m, nil
}

// Track observes the appliances' SSD counters every interval until ctx
// ends, so a restart between two scrapes loses at most one interval of
// counts (see applianceCounters). Without a Source it returns at once.
func (m *Metrics) Track(ctx context.Context, interval time.Duration) {
	if m.cluster == nil || interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, m.cluster.timeout)
		if cl, err := m.cluster.src.ListClients(cctx, &kvtierpb.Empty{}); err == nil {
			m.cluster.ssdTot.observe(cl.GetClients(), time.Now())
		}
		cancel()
	}
}

// Registry returns the private registry (for tests and extra collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// AddTransferBytes counts n object bytes moved by op ("put", "get",
// "offload", ...). Negative n is ignored.
func (m *Metrics) AddTransferBytes(op string, n int) {
	if n <= 0 {
		return
	}
	m.transfer.WithLabelValues(op).Add(float64(n))
}

// ObserveHTTP records one REST request: op is the route template (never the
// concrete path, which holds keys), status the HTTP status.
func (m *Metrics) ObserveHTTP(op string, status int, d time.Duration) {
	m.httpRequests.WithLabelValues(op, strconv.Itoa(status)).Inc()
	m.httpLatency.WithLabelValues(op).Observe(d.Seconds())
}

// EchoMiddleware counts and times every request by method and route template.
// Requests that match no route are counted under op "unmatched".
func (m *Metrics) EchoMiddleware() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			status := c.Response().Status
			if err != nil {
				var he *echo.HTTPError
				switch {
				case errors.As(err, &he):
					status = he.Code
				case kverr.CodeOf(kverr.FromGRPC(err)) != kverr.InternalError:
					status = kverr.CodeOf(kverr.FromGRPC(err)).HTTP()
				default:
					status = http.StatusInternalServerError
				}
			}
			route := c.Path()
			if route == "" || status == http.StatusNotFound && route == "/*" {
				route = "unmatched"
			}
			m.ObserveHTTP(c.Request().Method+" "+route, status, time.Since(start))
			return err
		}
	}
}

// rpcResult names the outcome of an RPC by kvtier error code.
func rpcResult(err error) string {
	if err == nil {
		return kverr.OK.String()
	}
	return kverr.CodeOf(kverr.FromGRPC(err)).String()
}

// UnaryServerInterceptor counts and times every unary call of a gRPC server.
func (m *Metrics) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		op := path.Base(info.FullMethod)
		m.rpcRequests.WithLabelValues(op, rpcResult(err)).Inc()
		m.rpcLatency.WithLabelValues(op).Observe(time.Since(start).Seconds())
		return resp, err
	}
}

// StreamServerInterceptor counts streaming calls (WatchEvents) when they end.
func (m *Metrics) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		err := handler(srv, ss)
		op := path.Base(info.FullMethod)
		m.rpcRequests.WithLabelValues(op, rpcResult(err)).Inc()
		m.rpcLatency.WithLabelValues(op).Observe(time.Since(start).Seconds())
		return err
	}
}
