package main

import (
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/spf13/pflag"

	"github.com/kvtier/kvtier/ha"
)

// campaign blocks until this master leads (HA mode, --etcd) and returns the
// leadership; without --etcd it returns nil at once. A standby neither
// listens nor serves: clients given every master's address connect to
// whichever accepts, which is the leader.
func campaign(f *masterFlags, log *slog.Logger) (*ha.Leadership, error) {
	if len(f.etcd) == 0 {
		return nil, nil
	}
	host, port, err := net.SplitHostPort(f.grpcAddr)
	if err != nil {
		return nil, fmt.Errorf("--grpc-addr %s: %w", f.grpcAddr, err)
	}
	if port == "0" {
		// The advertised address must be known before listening: take a
		// free port now.
		l, err := net.Listen("tcp", f.grpcAddr)
		if err != nil {
			return nil, fmt.Errorf("--grpc-addr %s: %w", f.grpcAddr, err)
		}
		f.grpcAddr = l.Addr().String()
		l.Close()
	} else if host == "" || host == "0.0.0.0" || host == "::" {
		return nil, fmt.Errorf("--grpc-addr %s: with --etcd give the address clients use (not a wildcard)", f.grpcAddr)
	}
	ctx, stop := signalContext()
	defer stop()
	log.Info("standby: campaigning for leadership", "etcd", f.etcd, "advertise", f.grpcAddr)
	fmt.Printf("standby grpc=%s etcd=%v\n", f.grpcAddr, f.etcd)
	lead, err := ha.Campaign(ctx, ha.Config{Endpoints: f.etcd, Name: f.grpcAddr, Advertise: f.grpcAddr, Logger: log, SessionTTL: f.etcdTTL})
	if err != nil {
		return nil, fmt.Errorf("--etcd: %w", err)
	}
	log.Info("elected leader", "epoch", lead.Epoch())
	return lead, nil
}

// registerHAFlags adds the HA settings beside --etcd.
func registerHAFlags(fs *pflag.FlagSet, f *masterFlags) {
	fs.DurationVar(&f.etcdTTL, "etcd-session-ttl", ha.DefaultSessionTTL,
		"HA: etcd session TTL (whole seconds); a dead leader is replaced within about this long, and a leader cut off from etcd stops serving within 2/3 of it")
	fs.DurationVar(&f.dramSync, "dram-sync-timeout", 2*time.Second,
		"longest a PutEnd waits for the appliances to record the put in their DRAM directories, which a restarted master or new leader is rebuilt from (negative: never wait; a put acknowledged just before the master dies may then be lost)")
}

// registerDramDirFlag adds the hidden switch that turns the appliance's
// DRAM directory off (the baseline of BenchmarkPutDramDirectory; without
// it a master restart or failover loses the DRAM-only objects).
func registerDramDirFlag(fs *pflag.FlagSet, f *applianceFlags) {
	fs.BoolVar(&f.noDramDir, "no-dram-directory", false, "keep no DRAM directory (benchmark baseline: DRAM-only objects are lost when the master restarts)")
	_ = fs.MarkHidden("no-dram-directory")
	fs.BoolVar(&f.noRevoke, "no-grant-revocation", false, "serve grants until their expiry even after their extent is freed (benchmark baseline of BenchmarkGrantRevocationCost; a stale grant can then overwrite reused space)")
	_ = fs.MarkHidden("no-grant-revocation")
}
