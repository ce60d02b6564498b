package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvtier/kvtier/internal/auth"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/rest"
)

// adminFlags are shared by the operator verbs that talk to a master's REST
// API (status, appliance drain|undrain, tiers show|set).
type adminFlags struct {
	http      string
	tokenFile string
	tlsCA     string
	json      bool
	timeout   time.Duration
}

func (f *adminFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.http, "http", "127.0.0.1:8080", "master REST address HOST:PORT or URL (or KVTIER_HTTP; default: the standalone's)")
	cmd.Flags().StringVar(&f.tokenFile, "token-file", "", "file holding the admin bearer token (or KVTIER_TOKEN): the master's --http-token or an admin token of its --credentials")
	cmd.Flags().StringVar(&f.tlsCA, "tls-ca", "", "PEM CA of the master's --tls-cert (or KVTIER_TLS_CA): talk https to --http")
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 10*time.Second, "give up after this long")
}

// adminClient is a thin REST client for the operator verbs.
type adminClient struct {
	base  string
	token string
	hc    *http.Client
}

func (f *adminFlags) client() (*adminClient, error) {
	base := strings.TrimRight(f.http, "/")
	if base == "" {
		return nil, usagef("--http: empty address")
	}
	tc, err := auth.ClientTLS(f.tlsCA)
	if err != nil {
		return nil, usagef("%v", err)
	}
	if !strings.Contains(base, "://") {
		if tc != nil {
			base = "https://" + base
		} else {
			base = "http://" + base
		}
	}
	if u, err := url.Parse(base); err != nil || u.Host == "" {
		return nil, usagef("--http %q: want HOST:PORT or http://HOST:PORT", f.http)
	}
	token := os.Getenv("KVTIER_TOKEN")
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, usagef("--token-file: %v", err)
		}
		token = strings.TrimSpace(string(b))
	}
	hc := &http.Client{Timeout: f.timeout}
	if tc != nil {
		hc.Transport = &http.Transport{TLSClientConfig: tc}
	}
	return &adminClient{base: base, token: token, hc: hc}, nil
}

// do sends one request and decodes a 2xx JSON answer into out (nil: ignore).
// A refusal comes back as the *kverr.Error the REST body names, so the exit
// code table applies; an unreachable master is RPC_FAIL (exit 3).
func (c *adminClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return usagef("%s %s: %v", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return kverr.New(kverr.RPCFail, "", "master REST API at %s unreachable: %v", c.base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return kverr.New(kverr.RPCFail, "", "%s %s: reading the answer: %v", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb rest.ErrorBody
		if json.Unmarshal(raw, &eb) == nil && eb.Code != "" {
			code, ok := kverr.ParseCode(eb.Code)
			if !ok {
				code = kverr.InternalError
			}
			return kverr.New(code, "", "%s", eb.Message)
		}
		code := kverr.InternalError
		switch {
		case resp.StatusCode == http.StatusNotFound:
			code = kverr.SegmentNotFound
		case resp.StatusCode == http.StatusUnauthorized:
			code = kverr.Unauthorized
		case resp.StatusCode >= 500:
			code = kverr.RPCFail
		}
		return kverr.New(code, "", "%s %s: HTTP %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return kverr.New(kverr.InternalError, "", "%s %s: not the JSON expected: %v", method, path, err)
	}
	return nil
}

func (f *adminFlags) run(verb func(ctx context.Context, c *adminClient, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := f.client()
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
		defer cancel()
		return verb(ctx, c, args)
	}
}

// statusRateSpan is how long status waits for a second sample of the
// master's counters when the first look had no rates (rest's rateMinSpan,
// 500 ms, and a margin).
const statusRateSpan = 600 * time.Millisecond

func newStatusCmd() *cobra.Command {
	var f adminFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "The cluster at a glance: master, tiers, appliances, segments, rates (REST client)",
		Args:  cobra.NoArgs,
		RunE: f.run(func(ctx context.Context, c *adminClient, _ []string) error {
			var st struct {
				Version map[string]any   `json:"version"`
				Ready   rest.ReadyJSON   `json:"ready"`
				Cluster rest.ClusterJSON `json:"cluster"`
				Tiers   rest.TiersJSON   `json:"tiers"`
				Clients struct {
					Clients []rest.ClientJSON `json:"clients"`
				} `json:"clients"`
				Segments struct {
					Segments []rest.SegmentJSON `json:"segments"`
				} `json:"segments"`
			}
			if err := c.do(ctx, http.MethodGet, "/api/v1/version", nil, &st.Version); err != nil {
				return err
			}
			// ready answers 503 with the same body when not ready.
			_ = c.do(ctx, http.MethodGet, "/api/v1/ready", nil, &st.Ready)
			for _, q := range []struct {
				path string
				out  any
			}{{"/api/v1/cluster", &st.Cluster}, {"/api/v1/tiers", &st.Tiers}, {"/api/v1/clients", &st.Clients}, {"/api/v1/segments", &st.Segments}} {
				if err := c.do(ctx, http.MethodGet, q.path, nil, q.out); err != nil {
					return err
				}
			}
			if !st.Cluster.Rates.Valid {
				// The master derives rates from the samples its cluster
				// route takes when asked: with nobody asking lately (no UI
				// open), a second look after its shortest span has them.
				time.Sleep(statusRateSpan)
				if err := c.do(ctx, http.MethodGet, "/api/v1/cluster", nil, &st.Cluster); err != nil {
					return err
				}
			}
			if f.json {
				return printJSON(st)
			}
			fmt.Printf("# master\nendpoint:   %s\nversion:    %v (commit %v)\nleader:     %v\nready:      %v %s\nobjects:    %d\nheap:       %s\n",
				c.base, st.Version["version"], st.Version["commit"], st.Cluster.Leader, st.Ready.Ready, st.Ready.Reason, st.Cluster.Objects, humanBytes(st.Cluster.HeapBytes))
			fmt.Printf("\n# tiers\n")
			for _, t := range st.Cluster.Tiers {
				fmt.Printf("%-8s %10s / %-10s %5.1f%% used  %d objects  hit rate %.3f\n", t.Tier, formatSize(t.Used), formatSize(t.Capacity), pct(t.Used, t.Capacity), t.Objects, t.HitRate)
			}
			fmt.Printf("dram:    high watermark %.2f, eviction ratio %.2f, lease policy %s\n", st.Tiers.DRAM.HighWatermark, st.Tiers.DRAM.EvictionRatio, st.Tiers.DRAM.LeasePolicy)
			fmt.Printf("ssd:     policy %s, offload %s\n", st.Tiers.SSD.Policy, st.Tiers.SSD.OffloadMode)
			if r := st.Cluster.Rates; r.Valid {
				fmt.Printf("\n# rates (last %.0f s)\nputs/s %.1f  gets/s %.1f  hits/s %.1f  evictions/s %.1f  offloads/s %.1f  rejected/s %.1f\n",
					r.WindowSeconds, r.PutsPerSec, r.GetsPerSec, r.HitsPerSec, r.EvictionsPerSec, r.OffloadsPerSec, r.RejectedPerSec)
			} else {
				fmt.Printf("\n# rates\nnot measured yet: the master has not taken two samples of its counters (ask again in a few seconds)\n")
			}
			fmt.Printf("\n# appliances and clients\n")
			cls := st.Clients.Clients
			sort.Slice(cls, func(i, j int) bool { return cls[i].ID < cls[j].ID })
			for _, cl := range cls {
				disk := ""
				if cl.Disk != nil {
					disk = fmt.Sprintf("  ssd %s / %s", formatSize(cl.Disk.Used), formatSize(cl.Disk.Capacity))
				}
				fmt.Printf("%-24s %-6s %d segments  heartbeat %.1fs ago%s\n", cl.ID, cl.State, len(cl.Segments), cl.SinceSeconds, disk)
			}
			fmt.Printf("\n# segments\n")
			for _, s := range st.Segments.Segments {
				fmt.Printf("%-32s %-9s %-8s %10s / %-10s %s\n", s.Name, s.Type, s.State, formatSize(s.Used), formatSize(s.Capacity), s.Owner)
			}
			return nil
		}),
	}
	f.register(cmd)
	return cmd
}

// humanBytes prints n in the largest binary unit, one decimal.
func humanBytes(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

func pct(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func newApplianceAdminCmds(parent *cobra.Command) {
	var df adminFlags
	var grace time.Duration
	drain := &cobra.Command{
		Use:   "drain NAME",
		Short: "Drain every segment of appliance NAME: no new allocations, reads served for --grace, then unmounted",
		Args:  cobra.ExactArgs(1),
		RunE: df.run(func(ctx context.Context, c *adminClient, args []string) error {
			if grace <= 0 {
				return usagef("--grace %v: want a positive duration", grace)
			}
			var out rest.ApplianceDrainJSON
			if err := c.do(ctx, http.MethodPost, "/api/v1/appliances/"+url.PathEscape(args[0])+"/drain", map[string]any{"grace_ms": grace.Milliseconds()}, &out); err != nil {
				return err
			}
			if df.json {
				return printJSON(out)
			}
			fmt.Printf("draining %s: %d segments (%s), unmounted after %v; undo with: kvtier appliance undrain %s\n", out.Appliance, len(out.Segments), strings.Join(out.Segments, ", "), grace, out.Appliance)
			return nil
		}),
	}
	df.register(drain)
	drain.Flags().DurationVar(&grace, "grace", 30*time.Second, "keep serving reads this long before unmounting")
	var uf adminFlags
	undrain := &cobra.Command{
		Use:   "undrain NAME",
		Short: "Undo a drain of appliance NAME: its segments take allocations again (remounted at its next heartbeat if already unmounted)",
		Args:  cobra.ExactArgs(1),
		RunE: uf.run(func(ctx context.Context, c *adminClient, args []string) error {
			var out rest.ApplianceDrainJSON
			if err := c.do(ctx, http.MethodPost, "/api/v1/appliances/"+url.PathEscape(args[0])+"/undrain", struct{}{}, &out); err != nil {
				return err
			}
			if uf.json {
				return printJSON(out)
			}
			fmt.Printf("undrained %s: %d segments (%s)\n", out.Appliance, len(out.Segments), strings.Join(out.Segments, ", "))
			return nil
		}),
	}
	uf.register(undrain)
	parent.AddCommand(drain, undrain)
}

func newTiersCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tiers", Short: "Show or change the cluster-wide tier settings (REST client)"}
	var sf adminFlags
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the tier settings and figures",
		Args:  cobra.NoArgs,
		RunE: sf.run(func(ctx context.Context, c *adminClient, _ []string) error {
			var t rest.TiersJSON
			if err := c.do(ctx, http.MethodGet, "/api/v1/tiers", nil, &t); err != nil {
				return err
			}
			return printTiers(t, sf.json)
		}),
	}
	sf.register(show)
	var f adminFlags
	var hw, er, ssdHW float64
	var leasePolicy, ssdPolicy, offload string
	var ssdCap sizeValue
	set := &cobra.Command{
		Use:   "set [--high-watermark F] [--eviction-ratio F] [--lease-policy P] [--ssd-policy fifo|lru] [--ssd-capacity SIZE] [--ssd-high-watermark F] [--offload MODE]",
		Short: "Change cluster-wide tier settings (they win over appliances' own flags)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fl := cmd.Flags()
			dram := map[string]any{}
			ssd := map[string]any{}
			if fl.Changed("high-watermark") {
				dram["high_watermark"] = hw
			}
			if fl.Changed("eviction-ratio") {
				dram["eviction_ratio"] = er
			}
			if fl.Changed("lease-policy") {
				dram["lease_policy"] = leasePolicy
			}
			if fl.Changed("ssd-policy") {
				ssd["policy"] = ssdPolicy
			}
			if fl.Changed("ssd-capacity") {
				ssd["capacity"] = uint64(ssdCap)
			}
			if fl.Changed("ssd-high-watermark") {
				ssd["high_watermark"] = ssdHW
			}
			if fl.Changed("offload") {
				ssd["offload_mode"] = offload
			}
			if len(dram) == 0 && len(ssd) == 0 {
				return usagef("tiers set: nothing to change (give --high-watermark, --eviction-ratio, --lease-policy, --ssd-policy, --ssd-capacity, --ssd-high-watermark or --offload)")
			}
			return f.run(func(ctx context.Context, c *adminClient, _ []string) error {
				var t rest.TiersJSON
				if len(dram) > 0 {
					if err := c.do(ctx, http.MethodPatch, "/api/v1/tiers/dram", dram, &t); err != nil {
						return err
					}
				}
				if len(ssd) > 0 {
					if err := c.do(ctx, http.MethodPatch, "/api/v1/tiers/ssd", ssd, &t); err != nil {
						return err
					}
				}
				return printTiers(t, f.json)
			})(cmd, args)
		},
	}
	f.register(set)
	set.Flags().Float64Var(&hw, "high-watermark", 0, "DRAM use fraction that triggers eviction, in (0,1]")
	set.Flags().Float64Var(&er, "eviction-ratio", 0, "fraction of DRAM one eviction pass frees, in (0,1]")
	set.Flags().StringVar(&leasePolicy, "lease-policy", "", "eviction order: plain | frequency")
	set.Flags().StringVar(&ssdPolicy, "ssd-policy", "", "SSD bucket eviction: fifo | lru")
	set.Flags().Var(&ssdCap, "ssd-capacity", "SSD tier capacity of every appliance, e.g. 100GiB")
	set.Flags().Float64Var(&ssdHW, "ssd-high-watermark", 0, "SSD use fraction that triggers bucket eviction, in (0,1]")
	set.Flags().StringVar(&offload, "offload", "", "SSD offload mode: off | immediate | on-evict")
	cmd.AddCommand(show, set)
	return cmd
}

func printTiers(t rest.TiersJSON, asJSON bool) error {
	if asJSON {
		return printJSON(t)
	}
	fmt.Printf("dram:  high_watermark=%.2f eviction_ratio=%.2f lease_policy=%s\n", t.DRAM.HighWatermark, t.DRAM.EvictionRatio, t.DRAM.LeasePolicy)
	fmt.Printf("ssd:   policy=%s offload=%s capacity=%s high_watermark=%.2f\n", t.SSD.Policy, t.SSD.OffloadMode, capacityString(t.SSD.Capacity), t.SSD.HighWatermark)
	for _, s := range t.Stats {
		fmt.Printf("%-6s %10s / %-10s %d objects, %d hits, %d misses\n", s.Tier, formatSize(s.Used), formatSize(s.Capacity), s.Objects, s.Hits, s.Misses)
	}
	return nil
}

func capacityString(n uint64) string {
	if n == 0 {
		return "per-appliance"
	}
	return formatSize(n)
}
