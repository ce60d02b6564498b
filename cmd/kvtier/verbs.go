package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/client"
)

// clientFlags are shared by the client verbs.
type clientFlags struct {
	master  string
	tenant  string
	json    bool
	timeout time.Duration
	sec     clientSecurityFlags
	rdma    string

	replicasSet bool // put: --replicas given explicitly
	noDirectPut bool // put: --direct-put=false
}

func (f *clientFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.master, "master", envOr("KVTIER_MASTER", "127.0.0.1:7070"), "master gRPC address (or KVTIER_MASTER)")
	cmd.Flags().StringVar(&f.tenant, "tenant", "default", "tenant")
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 60*time.Second, "give up after this long")
	cmd.Flags().StringVar(&f.rdma, "rdma-device", "auto", rdmaDeviceHelp)
	f.sec.register(cmd)
}

// run wraps a verb: it connects a pure caller (no segment, no listener) for
// the verb's duration and hands it the client. The caller is one-shot: it
// never heartbeats, so it is not listed as a node and leaves no events.
func (f *clientFlags) run(verb func(ctx context.Context, c *client.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		f.replicasSet = cmd.Flags().Changed("replicas")
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		defer cancel()
		token, tc, err := f.sec.load()
		if err != nil {
			return err
		}
		c, err := client.New(ctx, client.Config{MasterAddr: f.master, Tenant: f.tenant, OneShot: true, Token: token, TLS: tc,
			Transfer: client.TransferConfig{RDMADevice: f.rdma}, DisableDirectPut: f.noDirectPut})
		if err != nil {
			return err
		}
		defer c.Close()
		return verb(ctx, c, args)
	}
}

// stdinIsTerminal reports whether standard input is a terminal (a
// character device), which a put reading it would wait on for typing.
func stdinIsTerminal() bool {
	st, err := os.Stdin.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newPutCmd() *cobra.Command {
	var f clientFlags
	var replicas, nofReplicas int
	var softPin, hardPin bool
	var preferred string
	cmd := &cobra.Command{
		Use:   "put KEY [FILE|-]",
		Short: "Store the contents of FILE (or standard input) under KEY",
		Long: "Store the contents of FILE under KEY; with - or no FILE, standard input's " +
			"(no FILE needs standard input to be a pipe or a file, not a terminal).",
		Args: cobra.RangeArgs(1, 2),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && stdinIsTerminal() {
				return usagef("put %q: give FILE, or - to read standard input", args[0])
			}
			return nil
		},
		RunE: f.run(func(ctx context.Context, c *client.Client, args []string) error {
			var value []byte
			var err error
			if len(args) == 1 || args[1] == "-" {
				value, err = io.ReadAll(os.Stdin)
			} else {
				value, err = os.ReadFile(args[1])
			}
			if err != nil {
				return fmt.Errorf("read value: %w", err)
			}
			o := client.PutOptions{Replicas: replicas, NOFReplicas: nofReplicas, PreferredSegment: preferred, SoftPin: softPin, HardPin: hardPin}
			if nofReplicas > 0 && !f.replicasSet {
				o.Replicas = 0 // --nof-replicas alone: NVMe-oF replicas only
			}
			res, err := c.PutWithResult(ctx, args[0], value, client.WithOptions(o))
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(map[string]any{"key": args[0], "size": len(value), "already_stored": res.AlreadyStored, "replicas": res.Replicas})
			}
			if res.AlreadyStored {
				fmt.Printf("already stored %q (%d bytes)\n", args[0], len(value))
			} else {
				fmt.Printf("stored %q (%d bytes, %d replicas)\n", args[0], len(value), res.Replicas)
			}
			return nil
		}),
	}
	f.register(cmd)
	cmd.Flags().IntVar(&replicas, "replicas", 1, "number of DRAM replicas (best-effort, on distinct segments)")
	cmd.Flags().IntVar(&nofReplicas, "nof-replicas", 0, "number of NVMe-oF replicas (on appliances' NVMe namespaces)")
	cmd.Flags().BoolVar(&softPin, "soft-pin", false, "survive the first eviction pass for the soft-pin TTL")
	cmd.Flags().BoolVar(&hardPin, "hard-pin", false, "never evict (only rm deletes it)")
	cmd.Flags().StringVar(&preferred, "preferred-segment", "", "put the first replica on this segment when it has room")
	cmd.Flags().BoolFunc("direct-put", "send the bytes to an appliance that places the put itself (one round trip); false: PutStart, write, PutEnd (default true)", func(v string) error {
		on, err := strconv.ParseBool(v)
		f.noDirectPut = !on
		return err
	})
	return cmd
}

func newGetCmd() *cobra.Command {
	var f clientFlags
	var out string
	cmd := &cobra.Command{
		Use:   "get KEY [-o FILE]",
		Short: "Read the object stored under KEY to standard output or FILE (--json: metadata printed, data to -o FILE)",
		Args:  cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, args []string) error {
			toStdout := out == "" || out == "-"
			if f.json && toStdout {
				return usagef("get --json prints the object's metadata: give -o FILE for the data (it cannot share standard output with the JSON)")
			}
			v, err := c.Get(ctx, args[0])
			if err != nil {
				return err
			}
			if toStdout {
				_, err = os.Stdout.Write(v)
				return err
			}
			if err := os.WriteFile(out, v, 0o644); err != nil {
				return err
			}
			if !f.json {
				return nil
			}
			// The metadata as stat shows it (no lease taken), plus where the
			// bytes went.
			res := map[string]any{"key": args[0], "size": len(v), "file": out}
			if info, err := c.Stat(ctx, args[0]); err == nil {
				res["object"] = toObjectJSON(info)
			}
			return printJSON(res)
		}),
	}
	f.register(cmd)
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to FILE instead of standard output")
	return cmd
}

func newExistCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "exist KEY",
		Short: "Exit 0 when KEY is stored, 1 when it is not (never extends a lease)",
		Args:  cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, args []string) error {
			ok, err := c.Exist(ctx, args[0])
			if err != nil {
				return err
			}
			if f.json {
				if err := printJSON(map[string]any{"key": args[0], "exists": ok}); err != nil {
					return err
				}
			} else if ok {
				fmt.Println("exists")
			} else {
				fmt.Println("absent")
			}
			if !ok {
				return exitError{code: 1}
			}
			return nil
		}),
	}
	f.register(cmd)
	return cmd
}

// objectJSON is the stable JSON shape of an object for `stat --json` and `ls --json`.
type objectJSON struct {
	Key           string        `json:"key"`
	Tenant        string        `json:"tenant"`
	Size          uint64        `json:"size"`
	CRC32C        *uint32       `json:"crc32c,omitempty"`
	Writer        string        `json:"writer,omitempty"`
	Created       string        `json:"created,omitempty"`
	LeaseDeadline string        `json:"lease_deadline"`
	SoftPin       bool          `json:"soft_pin"`
	HardPin       bool          `json:"hard_pin"`
	ReadCount     uint64        `json:"read_count"`
	Replicas      []replicaJSON `json:"replicas"`
}

type replicaJSON struct {
	Type     string `json:"type"`
	State    string `json:"state"`
	Segment  string `json:"segment"`
	Node     string `json:"node,omitempty"`
	Endpoint string `json:"endpoint,omitempty"`
	Offset   uint64 `json:"offset"`
	Length   uint64 `json:"length"`
	Bucket   uint64 `json:"bucket,omitempty"`
	NQN      string `json:"nqn,omitempty"`
	NSID     uint32 `json:"nsid,omitempty"`
	// Unavailable: its node is down; readers are not sent there.
	Unavailable bool `json:"unavailable,omitempty"`
}

func msTime(ms int64) string {
	if ms <= 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano)
}

func toObjectJSON(o *kvtierpb.ObjectInfo) objectJSON {
	j := objectJSON{Key: string(o.Key), Tenant: o.Tenant, Size: o.Size, Writer: o.Writer, Created: msTime(o.CreatedMs),
		LeaseDeadline: msTime(o.LeaseDeadlineMs), SoftPin: o.SoftPin, HardPin: o.HardPin, ReadCount: o.ReadCount,
		Replicas: []replicaJSON{}}
	if o.HasChecksum {
		c := o.Crc32C
		j.CRC32C = &c
	}
	for _, r := range o.Replicas {
		j.Replicas = append(j.Replicas, replicaJSON{Type: r.Type.String(), State: r.State.String(), Segment: r.Segment,
			Node: r.Node, Endpoint: r.Endpoint, Offset: r.Offset, Length: r.Length, Bucket: r.Bucket, NQN: r.Nqn, NSID: r.Nsid,
			Unavailable: r.Unavailable})
	}
	return j
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newStatCmd() *cobra.Command {
	var f clientFlags
	cmd := &cobra.Command{
		Use:   "stat KEY",
		Short: "Show an object's size, replicas, lease and pins (takes no lease)",
		Args:  cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, args []string) error {
			info, err := c.Stat(ctx, args[0])
			if err != nil {
				return err
			}
			j := toObjectJSON(info)
			if f.json {
				return printJSON(j)
			}
			fmt.Printf("key:       %s\nsize:      %d\n", strconv.Quote(j.Key), j.Size)
			if j.LeaseDeadline != "" {
				fmt.Printf("lease:     until %s\n", j.LeaseDeadline)
			} else {
				fmt.Printf("lease:     none\n")
			}
			fmt.Printf("pins:      soft=%v hard=%v\nreads:     %d\nreplicas:\n", j.SoftPin, j.HardPin, j.ReadCount)
			for _, r := range j.Replicas {
				down := ""
				if r.Unavailable {
					down = " (node " + r.Node + " down: not served)"
				}
				fmt.Printf("  %-10s %-10s %s offset=%d length=%d%s\n", r.Type, r.State, r.Segment, r.Offset, r.Length, down)
			}
			return nil
		}),
	}
	f.register(cmd)
	return cmd
}

func newLsCmd() *cobra.Command {
	var f clientFlags
	var prefix string
	var limit int
	cmd := &cobra.Command{
		Use:   "ls [PREFIX | --prefix P]",
		Short: "List objects by key prefix",
		Args:  cobra.MaximumNArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return usagef("--limit %d: want at least 1", limit)
			}
			if len(args) == 1 {
				if cmd.Flags().Changed("prefix") && prefix != args[0] {
					return usagef("two prefixes: %q and --prefix %q (give one)", args[0], prefix)
				}
				prefix = args[0]
			}
			return nil
		},
		RunE: f.run(func(ctx context.Context, c *client.Client, args []string) error {
			cursor := ""
			var all []objectJSON
			for {
				page, next, err := c.List(ctx, prefix, cursor, min(limit-len(all), 1000))
				if err != nil {
					return err
				}
				for _, o := range page {
					j := toObjectJSON(o)
					if f.json {
						all = append(all, j)
					} else {
						fmt.Printf("%12d  %d replicas  %s\n", j.Size, len(j.Replicas), strconv.Quote(j.Key))
						all = append(all, objectJSON{})
					}
				}
				if next == "" || len(all) >= limit {
					break
				}
				cursor = next
			}
			if f.json {
				if all == nil {
					all = []objectJSON{}
				}
				return printJSON(all)
			}
			return nil
		}),
	}
	f.register(cmd)
	cmd.Flags().StringVar(&prefix, "prefix", "", "only keys starting with P")
	cmd.Flags().IntVar(&limit, "limit", 100000, "list at most this many objects")
	return cmd
}

func newRmCmd() *cobra.Command {
	var f clientFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "rm KEY [--force]",
		Short: "Remove an object (refused while it is read-leased unless --force)",
		Args:  cobra.ExactArgs(1),
		RunE: f.run(func(ctx context.Context, c *client.Client, args []string) error {
			if err := c.Remove(ctx, args[0], force); err != nil {
				return err
			}
			if f.json {
				return printJSON(map[string]any{"key": args[0], "removed": true, "force": force})
			}
			fmt.Printf("removed %q\n", args[0])
			return nil
		}),
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "remove even while read-leased")
	return cmd
}
