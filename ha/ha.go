package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/internal/clock"
	"github.com/kvtier/kvtier/kverr"
)

// Defaults applied by Config for zero fields.
const (
	DefaultPrefix      = "/kvtier/master"
	DefaultSessionTTL  = 5 * time.Second
	DefaultDialTimeout = 5 * time.Second
)

// Config configures one master's participation in the election. The zero value
// of every optional field means its default; Endpoints, Name and Advertise are
// required.
type Config struct {
	// Endpoints are the etcd client URLs, e.g. "http://10.0.0.1:2379".
	Endpoints []string
	// Name is this master's id, used in logs only (the election key is
	// derived from the session lease, so two masters may not collide).
	Name string
	// Advertise is the gRPC address clients use to reach this master; it is
	// the value stored under the leader key.
	Advertise string
	// Prefix is the election key prefix (default DefaultPrefix). It must
	// start with "/" and not end with "/".
	Prefix string
	// SessionTTL is the lease TTL (default DefaultSessionTTL). etcd grants
	// whole seconds, so it is rounded up to a second; etcd may raise a very
	// small TTL to its own minimum (about 2 s with default raft timing).
	SessionTTL time.Duration
	// DialTimeout bounds the first contact with etcd (default
	// DefaultDialTimeout).
	DialTimeout time.Duration
	// Logger receives leadership transitions (default: discard).
	Logger *slog.Logger
	// Clock times lease refreshes for the early-loss rule (default
	// clock.Real).
	Clock clock.Clock
}

// Validate reports a kverr.InvalidParams error for an unusable config. It
// does not contact etcd and does not change cfg.
func (c Config) Validate() error {
	if err := validateEndpoints(c.Endpoints); err != nil {
		return err
	}
	if strings.TrimSpace(c.Name) == "" {
		return kverr.New(kverr.InvalidParams, "", "ha: empty master name")
	}
	if strings.TrimSpace(c.Advertise) == "" {
		return kverr.New(kverr.InvalidParams, "", "ha: empty advertise address")
	}
	if err := validatePrefix(c.Prefix); err != nil {
		return err
	}
	if c.SessionTTL < 0 {
		return kverr.New(kverr.InvalidParams, "", "ha: negative session TTL %s", c.SessionTTL)
	}
	if c.DialTimeout < 0 {
		return kverr.New(kverr.InvalidParams, "", "ha: negative dial timeout %s", c.DialTimeout)
	}
	return nil
}

func validateEndpoints(eps []string) error {
	if len(eps) == 0 {
		return kverr.New(kverr.InvalidParams, "", "ha: no etcd endpoints")
	}
	for _, ep := range eps {
		if strings.TrimSpace(ep) == "" {
			return kverr.New(kverr.InvalidParams, "", "ha: empty etcd endpoint in %q", eps)
		}
	}
	return nil
}

func validatePrefix(p string) error {
	if p == "" {
		return nil
	}
	if !strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
		return kverr.New(kverr.InvalidParams, "", "ha: prefix %q must start with / and not end with /", p)
	}
	return nil
}

// withDefaults returns cfg with zero fields replaced by defaults.
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	return c
}

// ttlSeconds rounds d up to whole seconds, at least 1.
func ttlSeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

// dial opens an etcd client and proves an endpoint answers within
// dialTimeout (clientv3.New itself does not wait for a connection).
func dial(ctx context.Context, endpoints []string, dialTimeout time.Duration) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: dialTimeout,
		Logger:      zap.NewNop(),
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		return nil, kverr.New(kverr.RPCFail, "", "ha: etcd %s: %v", strings.Join(endpoints, ","), err)
	}
	pctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, "/", clientv3.WithCountOnly(), clientv3.WithSerializable()); err != nil {
		cli.Close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("ha: connecting to etcd %s: %w", strings.Join(endpoints, ","), ctx.Err())
		}
		return nil, kverr.New(kverr.RPCFail, "", "ha: etcd %s unreachable within %s: %v",
			strings.Join(endpoints, ","), dialTimeout, err)
	}
	return cli, nil
}

// Leadership is held by the elected master until Lost is closed. All methods
// are safe for concurrent use.
type Leadership struct {
	cfg     Config
	cli     *clientv3.Client
	sess    *concurrency.Session
	el      *concurrency.Election
	key     string
	epoch   int64
	ttl     time.Duration // lease TTL as granted by etcd
	lost    chan struct{}
	resignc chan struct{} // closed by Resign/Close to stop the monitor
	done    chan struct{} // closed when the monitor goroutine has returned

	lostOnce   sync.Once
	resignOnce sync.Once
	closeOnce  sync.Once
	resignErr  error // set once inside resignOnce
	closeErr   error // set once inside closeOnce
}

// Campaign connects to etcd, opens a session (a lease of cfg.SessionTTL) and
// blocks until this master is the leader, ctx is done, or etcd cannot be
// reached within cfg.DialTimeout at the start. While waiting it survives etcd
// outages: a session that expires is replaced and the campaign restarts.
// Errors: kverr.InvalidParams for a bad cfg, kverr.RPCFail naming the
// endpoints when etcd is unreachable, ctx's error (wrapped) when ctx ends.
func Campaign(ctx context.Context, cfg Config) (*Leadership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	cli, err := dial(ctx, cfg.Endpoints, cfg.DialTimeout)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("name", cfg.Name, "advertise", cfg.Advertise, "prefix", cfg.Prefix)
	for {
		l, err := campaignOnce(ctx, cfg, cli, log)
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil {
			cli.Close()
			return nil, fmt.Errorf("ha: campaign for %s: %w", cfg.Prefix, ctx.Err())
		}
		log.Warn("ha: campaign interrupted, retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// campaignOnce runs one session's campaign. It returns a Leadership, or an
// error after which the caller may retry with a fresh session.
func campaignOnce(ctx context.Context, cfg Config, cli *clientv3.Client, log *slog.Logger) (*Leadership, error) {
	// The lease is granted under ctx (so a cancelled caller is not stuck
	// while etcd is down), but the session's keepalive must outlive ctx:
	// Campaign's ctx bounds only the wait for leadership.
	ttl := ttlSeconds(cfg.SessionTTL)
	grant, err := cli.Grant(ctx, int64(ttl))
	if err != nil {
		return nil, fmt.Errorf("ha: grant lease: %w", err)
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl),
		concurrency.WithLease(grant.ID), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.DialTimeout)
		_, _ = cli.Revoke(rctx, grant.ID)
		cancel()
		return nil, fmt.Errorf("ha: new session: %w", err)
	}
	el := concurrency.NewElection(sess, cfg.Prefix)

	// Campaign waits for older candidates' keys to go. It is cancelled when
	// our own session dies (our key is then gone and waiting would be
	// meaningless). On a cancelled ctx concurrency.Election.Campaign resigns
	// with the client's context, which can block while etcd is down, so it
	// runs in a goroutine and a cancelled caller closes the client to free it.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(sess.Ctx(), cancel)
	defer stop()
	errc := make(chan error, 1)
	log.Info("ha: campaigning", "lease", fmt.Sprintf("%x", sess.Lease()))
	go func() { errc <- el.Campaign(cctx, cfg.Advertise) }()
	select {
	case err = <-errc:
	case <-ctx.Done():
		// Give the campaign's own resign a moment (it removes our key while
		// etcd is up), then close the client to free it if etcd is down.
		select {
		case <-errc:
			dropSession(cli, sess, cfg.DialTimeout)
		case <-time.After(cfg.DialTimeout):
			cli.Close()
			<-errc
			sess.Orphan()
		}
		return nil, ctx.Err()
	}
	if err != nil {
		dropSession(cli, sess, cfg.DialTimeout)
		return nil, fmt.Errorf("ha: campaign: %w", err)
	}

	// Campaign can return success after our own key vanished (lease expired
	// while waiting): confirm the key is still ours before claiming it.
	resp, err := cli.Get(cctx, el.Key())
	if err != nil {
		dropSession(cli, sess, cfg.DialTimeout)
		return nil, fmt.Errorf("ha: confirm leader key: %w", err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != el.Rev() || sess.Ctx().Err() != nil {
		dropSession(cli, sess, cfg.DialTimeout)
		return nil, errors.New("ha: leader key lost while campaigning")
	}

	l := &Leadership{
		cfg:     cfg,
		cli:     cli,
		sess:    sess,
		el:      el,
		key:     el.Key(),
		epoch:   el.Rev(),
		lost:    make(chan struct{}),
		resignc: make(chan struct{}),
		done:    make(chan struct{}),
	}
	l.ttl = time.Duration(grant.TTL) * time.Second

	// Refresh the lease once more now, so its server-side expiry is at
	// least start+TTL, and start timing refreshes from here.
	start := cfg.Clock.Now()
	if _, err := cli.KeepAliveOnce(cctx, sess.Lease()); err != nil {
		dropSession(cli, sess, cfg.DialTimeout)
		return nil, fmt.Errorf("ha: refresh lease after election: %w", err)
	}
	// The monitor's context is not ctx: Campaign's ctx bounds only the wait.
	mctx, mstop := context.WithCancel(clientv3.WithRequireLeader(context.WithoutCancel(ctx)))
	wch := cli.Watch(mctx, l.key, clientv3.WithRev(resp.Header.Revision+1))
	kach, err := cli.KeepAlive(mctx, sess.Lease())
	if err != nil {
		mstop()
		dropSession(cli, sess, cfg.DialTimeout)
		return nil, fmt.Errorf("ha: watch lease: %w", err)
	}
	log.Info("ha: elected leader", "key", l.key, "epoch", l.epoch, "ttl", l.ttl)
	go l.monitor(mstop, wch, kach, start, log)
	return l, nil
}

// dropSession stops refreshing sess and revokes its lease (removing any key
// it holds), bounded by timeout; a failed revoke leaves the lease to expire.
func dropSession(cli *clientv3.Client, sess *concurrency.Session, timeout time.Duration) {
	sess.Orphan()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, _ = cli.Revoke(ctx, sess.Lease())
}

// monitor closes Lost when the session dies, the leader key is deleted or
// overwritten by someone else, the watch breaks, the lease has not been
// refreshed for too long (see refreshOverdue), or Resign is called.
// lastOK is a time at or before the lease's latest known refresh.
func (l *Leadership) monitor(stop context.CancelFunc, wch clientv3.WatchChan,
	kach <-chan *clientv3.LeaseKeepAliveResponse, lastOK time.Time, log *slog.Logger) {
	defer close(l.done)
	defer stop()
	tick := time.NewTicker(max(l.ttl/10, 10*time.Millisecond))
	defer tick.Stop()
	reason := ""
	for reason == "" {
		select {
		case <-tick.C:
			if now := l.cfg.Clock.Now(); refreshOverdue(now, lastOK, l.ttl) {
				reason = fmt.Sprintf("lease not refreshed for %s (TTL %s)", now.Sub(lastOK), l.ttl)
			}
		case ka, ok := <-kach:
			if !ok || ka.TTL <= 0 {
				reason = "lease keepalive ended"
			} else {
				lastOK = l.cfg.Clock.Now()
			}
		case <-l.sess.Done():
			reason = "session expired or etcd unreachable beyond the TTL"
		case <-l.resignc:
			reason = "resigned"
		case wr, ok := <-wch:
			switch {
			case !ok:
				reason = "watch on leader key closed"
			case wr.Err() != nil:
				reason = "watch on leader key failed: " + wr.Err().Error()
			default:
				for _, ev := range wr.Events {
					if ev.Type == clientv3.EventTypeDelete || ev.Kv.CreateRevision != l.epoch {
						reason = "leader key deleted"
					}
				}
			}
		}
	}
	log.Warn("ha: leadership lost", "reason", reason, "key", l.key)
	l.markLost()
}

// refreshOverdue reports whether the leader must stop because its lease may
// be about to expire on the server. The client sends a refresh every TTL/3;
// after 2/3 TTL without a successful one, a third of the TTL is left as the
// margin for the response's network delay and clock-rate drift. Stopping a
// little early is safe; serving after the lease expired (a standby may be
// elected) is not.
func refreshOverdue(now, lastOK time.Time, ttl time.Duration) bool {
	return now.Sub(lastOK) >= ttl*2/3
}

func (l *Leadership) markLost() { l.lostOnce.Do(func() { close(l.lost) }) }

// Lost is closed when leadership ends for any reason: the session lease
// expired or was revoked, etcd was unreachable for longer than the TTL, the
// leader key was deleted, or Resign/Close was called. The caller must stop
// serving as master at once.
func (l *Leadership) Lost() <-chan struct{} { return l.lost }

// Key is the etcd key holding this leader's advertised address.
func (l *Leadership) Key() string { return l.key }

// Epoch is the leader key's create revision: it strictly increases with
// every election under the same prefix, so it can fence a deposed leader.
func (l *Leadership) Epoch() int64 { return l.epoch }

// Resign gives up leadership: it deletes the leader key (so a standby takes
// over without waiting for the TTL), closes Lost and revokes the session
// lease. It is idempotent; the etcd client stays open until Close.
func (l *Leadership) Resign(ctx context.Context) error {
	l.resignOnce.Do(func() {
		close(l.resignc)
		<-l.done // Lost is closed from here on
		var errs []error
		if err := l.el.Resign(ctx); err != nil {
			errs = append(errs, fmt.Errorf("ha: resign: %w", err))
		}
		l.sess.Orphan()
		rctx, cancel := context.WithTimeout(ctx, l.cfg.SessionTTL)
		if _, err := l.cli.Revoke(rctx, l.sess.Lease()); err != nil && !isLeaseGone(err) {
			errs = append(errs, fmt.Errorf("ha: revoke lease: %w", err))
		}
		cancel()
		l.resignErr = errors.Join(errs...)
	})
	return l.resignErr
}

// isLeaseGone reports an error meaning the lease had already expired.
func isLeaseGone(err error) bool {
	return err != nil && strings.Contains(err.Error(), "requested lease not found")
}

// Close resigns (bounded by the dial timeout) and closes the etcd client.
// It is idempotent.
func (l *Leadership) Close() error {
	l.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.DialTimeout)
		err := l.Resign(ctx)
		cancel()
		l.closeErr = errors.Join(err, l.cli.Close())
	})
	return l.closeErr
}

// Leader returns the advertised address of the current leader under prefix
// ("" with a nil error when there is none). An empty prefix means
// DefaultPrefix. It dials etcd for this one call, bounded by ctx and
// DefaultDialTimeout.
func Leader(ctx context.Context, endpoints []string, prefix string) (string, error) {
	if err := validateEndpoints(endpoints); err != nil {
		return "", err
	}
	if err := validatePrefix(prefix); err != nil {
		return "", err
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	cli, err := dial(ctx, endpoints, DefaultDialTimeout)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	return leaderOf(ctx, cli, prefix)
}

// leaderOf reads the oldest key under prefix+"/", the election's leader.
func leaderOf(ctx context.Context, cli *clientv3.Client, prefix string) (string, error) {
	resp, err := cli.Get(ctx, prefix+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", kverr.New(kverr.RPCFail, "", "ha: read leader under %s: %v", prefix, err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}
