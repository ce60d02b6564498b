package master

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/kverr"
)

// Authenticator resolves a bearer token to its principal (*auth.Store).
type Authenticator interface {
	Lookup(token string) (auth.Principal, bool)
}

// Authorizer checks every gRPC (and fast-path) call of a master that has
// credentials: who calls (the bearer token in the `authorization`
// metadata), whether the role may make that call (auth.Methods plus the
// content rules below), the tenant a confined client may touch, and the
// session that owns the client ID the call names (BindSession). Without
// credentials no Authorizer is installed and the master runs open.
type Authorizer struct {
	m     *Master
	creds Authenticator
}

// NewAuthorizer returns the authorizer of m's calls.
func NewAuthorizer(m *Master, creds Authenticator) *Authorizer {
	return &Authorizer{m: m, creds: creds}
}

func deny(format string, args ...any) error {
	return kverr.ToGRPC(kverr.New(kverr.PermissionDenied, "", format, args...))
}

// principal authenticates the call's token.
func (a *Authorizer) principal(ctx context.Context) (auth.Principal, error) {
	vals := metadata.ValueFromIncomingContext(ctx, "authorization") // no copy of the whole metadata
	if len(vals) == 0 {
		if p, ok := auth.PeerPrincipal(ctx); ok {
			return p, nil // a verified client certificate (mTLS)
		}
		return auth.Principal{}, kverr.ToGRPC(kverr.New(kverr.Unauthenticated, "", "no credential: this master requires a token (KVTIER_TOKEN or --token-file)"))
	}
	p, ok := a.creds.Lookup(auth.BearerToken(vals[0]))
	if !ok {
		return auth.Principal{}, kverr.ToGRPC(kverr.New(kverr.Unauthenticated, "", "unknown credential"))
	}
	return p, nil
}

// need is the least role method needs for req (auth.Methods plus the
// content rules).
func need(method string, req any) (auth.Role, bool) {
	r, ok := auth.Methods[method]
	if !ok {
		return auth.RoleAdmin, false
	}
	switch q := req.(type) {
	case *kvtierpb.KeyRequest:
		if q.Force && method == kvtierpb.Master_Remove_FullMethodName {
			r = auth.RoleAdmin
		}
	case *kvtierpb.BatchKeysRequest:
		if q.Force && method == kvtierpb.Master_BatchRemove_FullMethodName {
			r = auth.RoleAdmin
		}
	case *kvtierpb.HeartbeatRequest:
		if len(q.Segments) > 0 || q.Disk != nil || q.Nvme != nil || q.OffloadSlots > 0 {
			r = max(r, auth.RoleAppliance)
		}
	case *kvtierpb.UnmountSegmentRequest:
		if q.ClientId == "" {
			r = auth.RoleAdmin // any node's segment (drain)
		}
	}
	return r, true
}

// check authorizes req for p, confines its tenant and binds its client ID.
func (a *Authorizer) check(p auth.Principal, method string, req any) error {
	r, known := need(method, req)
	if !known && p.Role != auth.RoleAdmin {
		return deny("%s is not in the method table: admin only", method)
	}
	if p.Role < r {
		return deny("%s needs the %s role; this credential is %s", method, r, p.Role)
	}
	if p.Role == auth.RoleClient && p.Tenant != "" {
		if err := confine(p.Tenant, req); err != nil {
			return err
		}
	}
	if p.Role >= auth.RoleAppliance && hasPutTicket(req) {
		// An appliance's call for the client a put ticket names: the
		// handler checks the ticket (CheckPutTicket), and the client ID
		// stays bound to the client's own credential.
		return nil
	}
	if q, ok := req.(interface{ GetClientId() string }); ok {
		if err := a.m.BindSession(q.GetClientId(), p); err != nil {
			return kverr.ToGRPC(err)
		}
	}
	return nil
}

// confine points req at tenant: an empty or "default" tenant becomes
// tenant, any other is refused.
func confine(tenant string, req any) error {
	fix := func(t *string) error {
		switch *t {
		case "", "default":
			*t = tenant
		case tenant:
		default:
			return deny("this credential is confined to tenant %q, not %q", tenant, *t)
		}
		return nil
	}
	switch q := req.(type) {
	case *kvtierpb.PutStartRequest:
		return fix(&q.Tenant)
	case *kvtierpb.KeyRequest:
		return fix(&q.Tenant)
	case *kvtierpb.BatchPutStartRequest:
		return fix(&q.Tenant)
	case *kvtierpb.BatchKeysRequest:
		return fix(&q.Tenant)
	case *kvtierpb.PutTicketRequest:
		return fix(&q.Tenant)
	case *kvtierpb.ListObjectsRequest:
		if q.AllTenants {
			return deny("this credential is confined to tenant %q: no all_tenants listing", tenant)
		}
		return fix(&q.Tenant)
	case *kvtierpb.HeartbeatRequest:
		kept := q.CachedReads[:0]
		for _, c := range q.CachedReads {
			if c.Tenant == tenant || c.Tenant == "" || c.Tenant == "default" {
				c.Tenant = tenant
				kept = append(kept, c)
			}
		}
		q.CachedReads = kept
	case *kvtierpb.RemoveByRegexRequest:
		return fix(&q.Tenant)
	case *kvtierpb.RemoveAllRequest:
		return fix(&q.Tenant)
	case *kvtierpb.OffloadDoneRequest:
		return fix(&q.Tenant)
	case *kvtierpb.BatchOffloadDoneRequest:
		for _, it := range q.Items {
			if err := fix(&it.Tenant); err != nil {
				return err
			}
		}
	}
	return nil
}

// Unary is the unary interceptor (gRPC and the fast path).
func (a *Authorizer) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	p, err := a.principal(ctx)
	if err != nil {
		return nil, err
	}
	if err := a.check(p, info.FullMethod, req); err != nil {
		return nil, err
	}
	return h(auth.WithPrincipal(ctx, p), req)
}

// Stream is the stream interceptor: the role is checked before the
// handler runs, the request (all of kvtier's streams are server streams:
// one request) when the handler receives it.
func (a *Authorizer) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	p, err := a.principal(ss.Context())
	if err != nil {
		return err
	}
	if r, known := need(info.FullMethod, nil); (!known && p.Role != auth.RoleAdmin) || p.Role < r {
		return deny("%s needs the %s role; this credential is %s", info.FullMethod, r, p.Role)
	}
	return h(srv, &authStream{ServerStream: ss, a: a, p: p, method: info.FullMethod, ctx: auth.WithPrincipal(ss.Context(), p)})
}

type authStream struct {
	grpc.ServerStream
	a      *Authorizer
	p      auth.Principal
	method string
	ctx    context.Context
}

func (s *authStream) Context() context.Context { return s.ctx }

func (s *authStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.a.check(s.p, s.method, m)
}
