package rest

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/doctor"
	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/internal/clock"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/metrics"
	"github.com/kvtier/kvtier/webui"
)

// PutOptions are the placement options of a PUT through the data plane.
type PutOptions struct {
	Tenant           string
	Replicas         int
	SoftPin          bool
	HardPin          bool
	PreferredSegment string
}

// Authenticator resolves a bearer token to its principal (*auth.Store).
type Authenticator interface {
	Lookup(token string) (auth.Principal, bool)
}

// DataPlane moves object bytes for GET objects/{key}/data and PUT
// objects/{key}. The lead adapts the client SDK to it. Errors should be kverr
// errors (or gRPC status errors, which are translated).
type DataPlane interface {
	Put(ctx context.Context, key string, value []byte, opts PutOptions) error
	Get(ctx context.Context, tenant, key string) ([]byte, error)
}

// Config configures a Server. The zero value means defaults.
type Config struct {
	// Token, when set, guards every mutating request (bearer token). With
	// Credentials it is one more admin token.
	Token string
	// Credentials, when set (the master's --credentials), make every
	// request but /api/v1/health, /api/v1/ready and the UI's files need a
	// bearer token (or a client certificate mapping to a role, see
	// internal/auth), and check its role: see authorizeREST.
	Credentials Authenticator
	// MaxPutBytes bounds a PUT body; 0 means 64 MiB.
	MaxPutBytes int64
	// EffectiveConfig returns what GET /api/v1/config shows; nil shows {}.
	EffectiveConfig func() any
	// Ready, when set, is asked by GET /api/v1/ready after the built-in
	// checks; a non-nil error makes ready answer 503 with its text.
	Ready func(ctx context.Context) error
	// Metrics serves /metrics and counts requests; nil creates one whose
	// cluster collector asks the master.
	Metrics *metrics.Metrics
	// Logger; nil discards.
	Logger *slog.Logger
	// Clock for rates and event timestamps; nil is the real clock.
	Clock clock.Clock
	// KeepAlive is the SSE keep-alive period; 0 means 15 s.
	KeepAlive time.Duration
	// RequestTimeout bounds each control-plane call; 0 means 10 s.
	RequestTimeout time.Duration
	// Doctor runs the host checks for GET system/doctor; nil checks this
	// host with doctor's defaults (no SSD directory).
	Doctor func(ctx context.Context) doctor.Report
	// DataWriteTimeout bounds the write of each chunk of an object's bytes
	// (GET objects/{key}/data); a reader slower than that is cut off.
	// 0 means DefaultDataWriteTimeout.
	DataWriteTimeout time.Duration
	// MaxReplicas is the most replicas a PUT may ask for: the master's
	// (master.Config.MaxReplicas), so a bad count is refused here naming
	// the same bound. 0 means 64, the most a master may be set to.
	MaxReplicas int
}

// DefaultMaxPutBytes is the PUT body limit when Config.MaxPutBytes is 0.
const DefaultMaxPutBytes = 64 << 20

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	switch {
	case c.MaxPutBytes < 0:
		return kverr.New(kverr.InvalidParams, "", "rest: negative MaxPutBytes %d", c.MaxPutBytes)
	case c.KeepAlive < 0:
		return kverr.New(kverr.InvalidParams, "", "rest: negative KeepAlive %v", c.KeepAlive)
	case c.DataWriteTimeout < 0:
		return kverr.New(kverr.InvalidParams, "", "rest: negative DataWriteTimeout %v", c.DataWriteTimeout)
	case c.RequestTimeout < 0:
		return kverr.New(kverr.InvalidParams, "", "rest: negative RequestTimeout %v", c.RequestTimeout)
	case c.MaxReplicas < 0 || c.MaxReplicas > maxReplicas:
		return kverr.New(kverr.InvalidParams, "", "rest: MaxReplicas %d outside 0..%d", c.MaxReplicas, maxReplicas)
	case strings.ContainsAny(c.Token, " \t\r\n"):
		return kverr.New(kverr.InvalidParams, "", "rest: token must not contain white space")
	}
	return nil
}

// Route is one registered endpoint (for the OpenAPI check and docs).
type Route struct {
	Method string
	Path   string // echo form, e.g. /api/v1/objects/:key
}

// Server is the HTTP front end. Safe for concurrent use.
type Server struct {
	cfg  Config
	ms   kvtierpb.MasterServer
	dp   DataPlane
	e    *echo.Echo
	log  *slog.Logger
	clk  clock.Clock
	met  *metrics.Metrics
	root http.Handler

	rates rateTracker
}

// New builds a Server. dp may be nil: the data endpoints then answer
// UNAVAILABLE_IN_CURRENT_STATUS.
func New(cfg Config, ms kvtierpb.MasterServer, dp DataPlane) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if ms == nil {
		return nil, kverr.New(kverr.InvalidParams, "", "rest: nil master")
	}
	if cfg.MaxPutBytes == 0 {
		cfg.MaxPutBytes = DefaultMaxPutBytes
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	if cfg.DataWriteTimeout == 0 {
		cfg.DataWriteTimeout = DefaultDataWriteTimeout
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	s := &Server{cfg: cfg, ms: ms, dp: dp, log: cfg.Logger, clk: cfg.Clock, met: cfg.Metrics}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.clk == nil {
		s.clk = clock.Real{}
	}
	if s.met == nil {
		m, err := metrics.New(metrics.Config{Source: ms})
		if err != nil {
			return nil, err
		}
		s.met = m
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	e.Use(s.met.EchoMiddleware())
	e.Use(s.authMiddleware)
	s.routes(e)
	s.e = e
	ui := webui.Handler()
	mh := s.met.Handler()
	s.root = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead {
			// HEAD wherever GET exists: route as GET; net/http drops the body
			// of an answer to HEAD. The event stream would never end, so HEAD
			// gets its headers only.
			if r.URL.Path == "/api/v1/events" {
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("Cache-Control", "no-cache")
				w.WriteHeader(http.StatusOK)
				return
			}
			r = r.Clone(r.Context())
			r.Method = http.MethodGet
		}
		switch {
		case r.URL.Path == "/metrics":
			if s.cfg.Credentials != nil {
				if _, err := s.restPrincipal(r); err != nil {
					s.writeRefusal(w, r, err)
					return
				}
			}
			mh.ServeHTTP(w, r)
		case strings.HasPrefix(r.URL.Path, "/api/"):
			e.ServeHTTP(w, r)
		case webui.Serves(r.URL.Path):
			ui.ServeHTTP(w, r)
		default:
			// Only / and the UI's own files are the UI: anything else
			// (/healthz, /version, /debug/pprof, Mooncake's
			// /get_all_segments) is a 404 a probe or script can see.
			body := ErrorBody{Code: kverr.InvalidParams.String(), Status: http.StatusNotFound,
				Message: "no such endpoint: " + r.Method + " " + r.URL.EscapedPath() + " (the API is under /api/v1/, see /api/v1/openapi.json; metrics at /metrics; the web UI at /)"}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(body)
			s.met.ObserveHTTP(r.Method+" unmatched", http.StatusNotFound, 0)
		}
	})
	return s, nil
}

// Handler serves /api/v1/..., /metrics and the web UI at /.
func (s *Server) Handler() http.Handler { return s.root }

// Metrics returns the metrics the server serves at /metrics.
func (s *Server) Metrics() *metrics.Metrics { return s.met }

// Routes lists the registered API routes.
func (s *Server) Routes() []Route {
	var out []Route
	for _, r := range s.e.Routes() {
		if strings.HasPrefix(r.Name, "github.com/labstack/echo") {
			continue // echo's own not-found placeholders
		}
		out = append(out, Route{Method: r.Method, Path: r.Path})
	}
	return out
}

func (s *Server) routes(e *echo.Echo) {
	g := e.Group("/api/v1")
	g.GET("/health", s.health)
	g.GET("/ready", s.ready)
	g.GET("/cluster", s.cluster)
	g.GET("/segments", s.listSegments)
	g.POST("/segments/:name/drain", s.drainSegment)
	g.DELETE("/segments/:name", s.unmountSegment)
	g.GET("/objects", s.listObjects)
	g.GET("/objects/:key", s.getObject)
	g.GET("/objects/:key/data", s.getObjectData)
	g.PUT("/objects/:key", s.putObject)
	g.DELETE("/objects/:key", s.deleteObject)
	g.GET("/tiers", s.getTiers)
	g.PATCH("/tiers/dram", s.patchDram)
	g.PATCH("/tiers/ssd", s.patchSSD)
	g.GET("/clients", s.listClients)
	g.GET("/nvme", s.nvme)
	g.GET("/config", s.getConfig)
	g.GET("/system", s.system)
	g.GET("/system/doctor", s.doctor)
	g.GET("/version", s.version)
	g.POST("/appliances/:name/drain", s.drainAppliance)
	g.POST("/appliances/:name/undrain", s.undrainAppliance)
	g.GET("/events", s.events)
	g.GET("/openapi.json", s.openapi)
}

// ErrorBody is the JSON of every refusal.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Status  int    `json:"status"`
}

// errorHandler writes every error as ErrorBody. kverr errors (and gRPC status
// errors carrying one) keep their code; echo's own errors (unknown route,
// method not allowed) get the closest code.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	body := errorBody(err, c.Request())
	if body.Status >= 500 {
		s.log.Warn("rest: request failed", "method", c.Request().Method, "path", c.Request().URL.Path, "err", err)
	}
	_ = c.JSON(body.Status, body)
}

func errorBody(err error, r *http.Request) ErrorBody {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg := http.StatusText(he.Code)
		if m, ok := he.Message.(string); ok {
			msg = m
		}
		code := kverr.InvalidParams
		switch he.Code {
		case http.StatusNotFound:
			msg = "no such endpoint: " + r.Method + " " + r.URL.EscapedPath()
			if strings.HasPrefix(r.URL.Path, "/api/v1/objects/") {
				msg += " (a '/' inside a key must be escaped as %2F, or use the ~b64: form)"
			}
		case http.StatusMethodNotAllowed:
			msg = "method " + r.Method + " not allowed on " + r.URL.EscapedPath()
		case http.StatusUnauthorized:
			code = kverr.Unauthorized
		case http.StatusRequestEntityTooLarge:
			code = kverr.PayloadTooLarge
		default:
			if he.Code >= 500 {
				code = kverr.InternalError
			}
		}
		return ErrorBody{Code: code.String(), Message: msg, Status: he.Code}
	}
	err = kverr.FromGRPC(err)
	code := kverr.CodeOf(err)
	msg := err.Error()
	var ke *kverr.Error
	if errors.As(err, &ke) && ke.Msg != "" {
		msg = ke.Msg
		if ke.Key != "" {
			msg = ke.Msg + " (key " + printable(ke.Key) + ")"
		}
	}
	return ErrorBody{Code: code.String(), Message: msg, Status: code.HTTP()}
}

func printable(k string) string {
	if len(k) > 80 {
		k = k[:80] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			return '?'
		}
		return r
	}, k)
}

// authMiddleware refuses mutating requests without the bearer token.
func (s *Server) authMiddleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.cfg.Credentials != nil {
			if err := s.authorizeREST(c); err != nil {
				c.Response().Header().Set("WWW-Authenticate", `Bearer realm="kvtier"`)
				return err
			}
			return next(c)
		}
		if s.cfg.Token == "" {
			return next(c)
		}
		switch c.Request().Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			return next(c)
		}
		got, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) != 1 {
			c.Response().Header().Set("WWW-Authenticate", `Bearer realm="kvtier"`)
			return kverr.New(kverr.Unauthorized, "", "this request changes state: send Authorization: Bearer <token> (the --http-token)")
		}
		return next(c)
	}
}

// ctx returns a request context bounded by the request timeout.
func (s *Server) ctx(c echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request().Context(), s.cfg.RequestTimeout)
}

// rateTracker turns monotonically growing counters into per-second rates.
type rateTracker struct {
	mu      sync.Mutex
	samples []rateSample // guarded by mu; oldest first, within rateWindow
}

type rateSample struct {
	at time.Time
	c  map[string]uint64
}

// rateWindow is how far back rates look; rateMinSpan the least span used.
const (
	rateWindow  = 10 * time.Second
	rateMinSpan = 500 * time.Millisecond
)

// observe records counters seen at now and returns per-second rates against
// the oldest sample within the window (nil until two samples span
// rateMinSpan). A counter that went down (master restart) reports 0.
func (t *rateTracker) observe(now time.Time, c map[string]uint64) (map[string]float64, float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	keep := t.samples[:0]
	for _, s := range t.samples {
		if now.Sub(s.at) <= rateWindow && !s.at.After(now) {
			keep = append(keep, s)
		}
	}
	t.samples = keep
	var rates map[string]float64
	var span float64
	if len(t.samples) > 0 {
		old := t.samples[0]
		if d := now.Sub(old.at); d >= rateMinSpan {
			span = d.Seconds()
			rates = make(map[string]float64, len(c))
			for k, v := range c {
				if p := old.c[k]; v >= p {
					rates[k] = float64(v-p) / span
				} else {
					rates[k] = 0
				}
			}
		}
	}
	cp := make(map[string]uint64, len(c))
	for k, v := range c {
		cp[k] = v
	}
	// Keep at most one sample per 500 ms so a busy UI does not grow the slice.
	if n := len(t.samples); n == 0 || now.Sub(t.samples[n-1].at) >= rateMinSpan {
		t.samples = append(t.samples, rateSample{at: now, c: cp})
	}
	return rates, span
}

// restPrincipal authenticates r: its bearer token (the --http-token is an
// admin token), else a verified client certificate.
func (s *Server) restPrincipal(r *http.Request) (auth.Principal, error) {
	if tok := auth.BearerToken(r.Header.Get("Authorization")); tok != "" {
		if s.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.Token)) == 1 {
			return auth.Principal{Role: auth.RoleAdmin, ID: "http-token"}, nil
		}
		if p, ok := s.cfg.Credentials.Lookup(tok); ok {
			return p, nil
		}
		return auth.Principal{}, kverr.New(kverr.Unauthenticated, "", "unknown credential")
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		if p, ok := auth.FromCertificate(r.TLS.VerifiedChains[0][0]); ok {
			return p, nil
		}
	}
	return auth.Principal{}, kverr.New(kverr.Unauthenticated, "", "this master requires a credential: send Authorization: Bearer <token>")
}

// writeRefusal writes err as ErrorBody outside echo (/metrics).
func (s *Server) writeRefusal(w http.ResponseWriter, r *http.Request, err error) {
	body := errorBody(err, r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("WWW-Authenticate", `Bearer realm="kvtier"`)
	w.WriteHeader(body.Status)
	_ = json.NewEncoder(w).Encode(body)
}

// authorizeREST is the REST side of the method table (auth.Methods):
//   - open: GET /api/v1/health and /api/v1/ready;
//   - client: the object routes (a DELETE with force=true is admin's),
//     /api/v1/version and /api/v1/openapi.json; a client confined to a
//     tenant has ?tenant= set to it (an empty or "default" one) or is
//     refused (another one, all_tenants);
//   - appliance: every GET;
//   - admin: everything.
func (s *Server) authorizeREST(c echo.Context) error {
	r := c.Request()
	path := c.Path() // the route pattern
	if r.Method == http.MethodGet && (path == "/api/v1/health" || path == "/api/v1/ready") {
		return nil
	}
	p, err := s.restPrincipal(r)
	if err != nil {
		return err
	}
	if p.Role == auth.RoleAdmin {
		return nil
	}
	isObject := strings.HasPrefix(path, "/api/v1/objects")
	// (r.URL.Query, not c.QueryParam: echo caches the query, and the tenant
	// may be rewritten below.)
	need := auth.RoleAdmin
	switch {
	case isObject:
		need = auth.RoleClient
		if f := r.URL.Query().Get("force"); r.Method == http.MethodDelete && f != "" && f != "false" && f != "0" {
			need = auth.RoleAdmin
		}
	case r.Method == http.MethodGet && (path == "/api/v1/version" || path == "/api/v1/openapi.json"):
		need = auth.RoleClient
	case r.Method == http.MethodGet:
		need = auth.RoleAppliance
	}
	if p.Role < need {
		return kverr.New(kverr.PermissionDenied, "", "%s %s needs the %s role; this credential is %s", r.Method, path, need, p.Role)
	}
	if isObject && p.Role == auth.RoleClient && p.Tenant != "" {
		q := r.URL.Query()
		if v := q.Get("all_tenants"); v != "" && v != "false" && v != "0" {
			return kverr.New(kverr.PermissionDenied, "", "this credential is confined to tenant %q: no all_tenants listing", p.Tenant)
		}
		switch t := q.Get("tenant"); t {
		case "", "default", p.Tenant:
			q.Set("tenant", p.Tenant)
			r.URL.RawQuery = q.Encode()
			c.SetRequest(r)
		default:
			return kverr.New(kverr.PermissionDenied, "", "this credential is confined to tenant %q, not %q", p.Tenant, t)
		}
	}
	return nil
}
