package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/appliance"
)

// registerLogFlags adds --log-format and --log-level to every command.
func registerLogFlags(root *cobra.Command) {
	root.PersistentFlags().String("log-format", "text", "log format on standard error: text (key=value) | json (one object per line)")
	root.PersistentFlags().String("log-level", "info", "least severe log level written: debug | info | warn | error")
	root.PersistentFlags().Duration("summary-interval", time.Minute, "servers log a one-line summary this often (0: never)")
}

// newLogger builds the logger the command's --log-format and --log-level ask for.
func newLogger(cmd *cobra.Command) (*slog.Logger, error) {
	format, _ := cmd.Flags().GetString("log-format")
	levelName, _ := cmd.Flags().GetString("log-level")
	var level slog.Level
	if err := level.UnmarshalText([]byte(levelName)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", levelName)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}

// Minimum segment size and most segments per appliance. Every segment is
// one MountSegment call at start and one entry in every heartbeat: 1 KiB
// segments of 256 MiB (262144 of them) took over 15 s of sequential mounts
// to start and made each heartbeat megabytes long.
const (
	minSegmentSize = 1 << 20
	maxSegments    = 4096
)

// validateDRAM refuses DRAM and segment sizes that cannot work, before any
// memory is mapped.
func (f *applianceFlags) validateDRAM() error {
	dram, seg := uint64(f.dramSize), uint64(f.segmentSize)
	if dram == 0 {
		return usagef("--dram 0: the DRAM tier cannot be empty (every put lands in DRAM first); give a size such as 1GiB (minimum %s)", formatSize(minSegmentSize))
	}
	if dram < minSegmentSize {
		return usagef("--dram %s: below the minimum of %s", formatSize(dram), formatSize(minSegmentSize))
	}
	if seg == 0 {
		return nil
	}
	if seg < minSegmentSize {
		return usagef("--segment-size %s: below the minimum of %s (each segment costs a mount call and a heartbeat entry)", formatSize(seg), formatSize(minSegmentSize))
	}
	if seg > dram {
		return usagef("--segment-size %s exceeds --dram %s", formatSize(seg), formatSize(dram))
	}
	if n := (dram + seg - 1) / seg; n > maxSegments {
		return usagef("--segment-size %s splits --dram %s into %d segments; at most %d (use at least %s)", formatSize(seg), formatSize(dram), n, maxSegments, formatSize((dram+maxSegments-1)/maxSegments))
	}
	return nil
}

// notifyReady tells systemd (Type=notify) the service is up; outside
// systemd (no NOTIFY_SOCKET) it does nothing.
func notifyReady(log *slog.Logger, status string) {
	sent, err := daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS="+status)
	if err != nil {
		log.Warn("systemd readiness notification failed", "err", err)
	} else if sent {
		log.Debug("notified systemd: ready")
	}
}

// notifyStopping tells systemd the service is stopping (draining).
func notifyStopping(status string) {
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping+"\nSTATUS="+status)
}

// summarySource is what the periodic summary reads: the master's figures.
type summarySource interface {
	Stats(context.Context, *kvtierpb.Empty) (*kvtierpb.StatsResponse, error)
	ListClients(context.Context, *kvtierpb.Empty) (*kvtierpb.ListClientsResponse, error)
}

// logSummaries writes one line every interval until ctx ends: objects, DRAM
// and SSD use, puts, gets, hit rate, evictions and offloads since the last
// line, live appliances. It is what an operator tails.
func logSummaries(ctx context.Context, log *slog.Logger, src summarySource, interval time.Duration) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var prev map[string]uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := src.Stats(cctx, &kvtierpb.Empty{})
		if err != nil {
			cancel()
			log.Warn("summary: master stats", "err", err)
			continue
		}
		cl, _ := src.ListClients(cctx, &kvtierpb.Empty{})
		cancel()
		c := st.GetCounters()
		d := func(k string) uint64 {
			if prev == nil || c[k] < prev[k] {
				return c[k]
			}
			return c[k] - prev[k]
		}
		var memUsed, memCap, diskUsed, diskCap uint64
		for _, tr := range st.GetTiers() {
			switch tr.GetTier() {
			case "memory":
				memUsed, memCap = tr.GetUsed(), tr.GetCapacity()
			case "disk":
				diskUsed, diskCap = tr.GetUsed(), tr.GetCapacity()
			}
		}
		live := 0
		for _, ci := range cl.GetClients() {
			if ci.GetState() == kvtierpb.ClientState_LIVE && len(ci.GetSegments()) > 0 {
				live++
			}
		}
		gets := d("gets")
		hits := d("get_hits_memory") + d("get_hits_nof") + d("get_hits_disk")
		hitRate := 0.0
		if gets > 0 {
			hitRate = float64(hits) / float64(gets)
		}
		log.Info("summary", "interval", interval.String(), "objects", st.GetObjects(),
			"dram_used", formatSize(memUsed), "dram_capacity", formatSize(memCap),
			"ssd_used", formatSize(diskUsed), "ssd_capacity", formatSize(diskCap),
			"puts", d("puts_completed"), "rejected", d("puts_rejected_no_space")+d("puts_rejected_quota")+d("puts_rejected_object_count"),
			"gets", gets, "hit_rate", fmt.Sprintf("%.3f", hitRate), "evictions", d("evictions"),
			"offloads", d("offloads_completed"), "offload_failures", d("offloads_failed"), "appliances_live", live)
		prev = c
	}
}

// reportTierConflicts compares an appliance's explicit tier flags with the
// cluster-wide settings the master holds. The rule (README "Tier settings"):
// tier settings are cluster-wide and the master's win; an appliance's
// --ssd-policy, --ssd-capacity and --offload are its values only until the
// master's arrive. A flag that disagrees is reported at start, never
// silently overridden.
func reportTierConflicts(ctx context.Context, cmd *cobra.Command, f *applianceFlags, a *appliance.Appliance, log *slog.Logger) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t, err := a.Client().Master().GetTiers(cctx, &kvtierpb.Empty{})
	if err != nil {
		log.Warn("cannot read the cluster's tier settings to compare with this appliance's flags", "err", err)
		return
	}
	var conflicts []string
	changed := func(name string) bool { return cmd.Flags().Changed(name) }
	if changed("ssd-policy") && t.GetSsd().GetSsdPolicy() != "" && t.GetSsd().GetSsdPolicy() != f.ssdPolicy {
		conflicts = append(conflicts, fmt.Sprintf("--ssd-policy %s, cluster uses %s", f.ssdPolicy, t.GetSsd().GetSsdPolicy()))
	}
	if changed("offload") && t.GetSsd().GetOffloadMode() != f.offload {
		conflicts = append(conflicts, fmt.Sprintf("--offload %s, cluster uses %s", f.offload, t.GetSsd().GetOffloadMode()))
	}
	if c := t.GetSsd().GetSsdCapacity(); changed("ssd-capacity") && c > 0 && c != uint64(f.ssdCapacity) {
		conflicts = append(conflicts, fmt.Sprintf("--ssd-capacity %s, cluster sets %s", formatSize(uint64(f.ssdCapacity)), formatSize(c)))
	}
	for _, c := range conflicts {
		msg := "tier setting conflict: " + c + "; the cluster's setting applies (change it for every appliance with: kvtier tiers set ...)"
		log.Warn(msg, "appliance", a.Name())
		fmt.Fprintln(os.Stderr, "kvtier: warning:", msg)
	}
}

// logApplianceSummaries is the appliance's own one-line summary (an
// appliance process has no master figures): segments, SSD use and bytes
// written and read since the last line, quarantined buckets, and bytes its
// transfer engine served to clients.
func logApplianceSummaries(ctx context.Context, log *slog.Logger, a *appliance.Appliance, interval time.Duration) {
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var prevW, prevR, prevServed uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		args := []any{"interval", interval.String(), "segments", len(a.Segments())}
		if tier := a.Tier(); tier != nil {
			s := tier.Stats()
			args = append(args, "ssd_used", formatSize(s.Used), "ssd_capacity", formatSize(s.Capacity), "ssd_objects", s.Objects,
				"ssd_written", formatSize(sub(s.BytesWritten, prevW)), "ssd_read", formatSize(sub(s.BytesRead, prevR)),
				"ssd_quarantined_buckets", s.QuarantinedBuckets)
			prevW, prevR = s.BytesWritten, s.BytesRead
		}
		es := a.Client().Engine().Stats()
		served := es.ServedBytesRead + es.ServedBytesWritten
		args = append(args, "served", formatSize(sub(served, prevServed)))
		prevServed = served
		log.Info("summary", args...)
	}
}

// sub is a-b for counters that restart at zero (then a).
func sub(a, b uint64) uint64 {
	if a < b {
		return a
	}
	return a - b
}
