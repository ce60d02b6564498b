package appliance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/kvtier/kvtier/api/kvtierpb"
	"github.com/kvtier/kvtier/kverr"
	"github.com/kvtier/kvtier/nof/auth"
	"github.com/kvtier/kvtier/nof/namespace"
	"github.com/kvtier/kvtier/nof/target"
)

// NVMeConfig exports namespaces over NVMe/TCP, with the built-in target or
// (Backend "spdk") an operator's SPDK target. GPU nodes then read and write
// NOF replicas straight from those namespaces.
type NVMeConfig struct {
	Addr       string          // listener host:port; empty = no NVMe/TCP target
	Namespaces []NVMeNamespace // backing files or block devices, nsid 1..n in order (spdk: aio bdevs)
	AllowHosts []string        // host NQNs allowed to connect; empty = any
	// HostSecrets turn on DH-HMAC-CHAP in-band authentication: host NQN ->
	// its secret. Every host then needs one; hosts with a secret are allowed
	// whatever AllowHosts says (and, with the spdk backend, only they: the
	// secrets go to SPDK's keyring as files, see SPDKConfig.KeyDir).
	HostSecrets map[string]*auth.Secret
	// CtrlSecrets: host NQN -> controller secret, for hosts that
	// authenticate the appliance too (bidirectional).
	CtrlSecrets map[string]*auth.Secret
	Backend     string     // "" or "builtin": built-in target; "spdk": drive SPDK (see SPDKConfig)
	SPDK        SPDKConfig // used when Backend is "spdk"
	// PollSpin: the built-in target's connections poll an empty socket
	// this long before sleeping (target.Config.PollSpin), as SPDK polls.
	PollSpin time.Duration
}

// NVMeNamespace is one exported namespace.
type NVMeNamespace struct {
	Path string
	Size int64 // create the file at this size when missing; 0 = use existing size
}

// ParseNVMeNamespace parses PATH[:SIZE] with SIZE already resolved by the
// caller's size parser (sizeOf).
func ParseNVMeNamespace(spec string, sizeOf func(string) (uint64, error)) (NVMeNamespace, error) {
	path, size, hasSize := strings.Cut(spec, ":")
	if path == "" {
		return NVMeNamespace{}, kverr.New(kverr.InvalidParams, "", "--nvme-namespace %q: empty path", spec)
	}
	ns := NVMeNamespace{Path: path}
	if hasSize {
		n, err := sizeOf(size)
		if err != nil || n == 0 {
			return NVMeNamespace{}, kverr.New(kverr.InvalidParams, "", "--nvme-namespace %q: bad size %q", spec, size)
		}
		ns.Size = int64(n)
	}
	return ns, nil
}

// ParseNVMeSecretFlag parses NQN=SECRET (--nvme-host-key, --nvme-ctrl-key):
// SECRET is a DHHC-1 secret ("DHHC-1:01:...:", as nvme gen-dhchap-key
// prints) or @FILE holding one (so it is not visible in ps).
func ParseNVMeSecretFlag(flag, spec string) (string, *auth.Secret, error) {
	nqn, val, ok := strings.Cut(spec, "=")
	if !ok || nqn == "" || val == "" {
		return "", nil, kverr.New(kverr.InvalidParams, "", "--%s %q: want HOSTNQN=DHHC-1:... or HOSTNQN=@FILE", flag, redact(spec))
	}
	sec, err := LoadNVMeSecret(val)
	if err != nil {
		return "", nil, kverr.New(kverr.InvalidParams, "", "--%s for %s: %v", flag, nqn, err)
	}
	return nqn, sec, nil
}

// LoadNVMeSecret parses a DHHC-1 secret given as is or as @FILE.
func LoadNVMeSecret(val string) (*auth.Secret, error) { return auth.LoadSecret(val) }

// redact keeps a malformed secret flag out of error messages and logs.
func redact(spec string) string {
	if i := strings.Index(spec, "DHHC-1:"); i >= 0 {
		return spec[:i] + "DHHC-1:…"
	}
	return spec
}

var nqnUnsafe = regexp.MustCompile(`[^a-zA-Z0-9.\-]+`)

// SubsystemNQN is the NQN an appliance exports its namespaces under.
func SubsystemNQN(name string) string {
	return "nqn.2026-11.io.kvtier:appliance:" + nqnUnsafe.ReplaceAllString(name, "-")
}

type nvmeExport struct {
	target *target.Target
	addr   string
	nqn    string
	files  []*namespace.File
	watch  *spdkWatch // SPDK backend: SPDK's liveness
}

// startNVMe opens the namespaces, serves them and mounts each as a NOF
// segment on the master.
func (a *Appliance) startNVMe(ctx context.Context, cfg NVMeConfig) (err error) {
	switch cfg.Backend {
	case "", BackendBuiltin:
	case BackendSPDK:
		if err := a.startSPDK(ctx, cfg); err != nil {
			return err
		}
		a.nvmeLive.Store(a.nvme)
		return nil
	default:
		return kverr.New(kverr.InvalidParams, "", "--nvme-backend %q: want builtin or spdk", cfg.Backend)
	}
	if cfg.Addr == "" {
		if len(cfg.Namespaces) > 0 {
			return kverr.New(kverr.InvalidParams, "", "--nvme-namespace needs --nvme-addr")
		}
		return nil
	}
	if len(cfg.Namespaces) == 0 {
		return kverr.New(kverr.InvalidParams, "", "--nvme-addr needs at least one --nvme-namespace PATH[:SIZE]")
	}
	ex := &nvmeExport{nqn: SubsystemNQN(a.cfg.Name)}
	a.nvme = ex
	var nss []namespace.Namespace
	for _, n := range cfg.Namespaces {
		if n.Size > 0 {
			if _, statErr := os.Stat(n.Path); statErr == nil {
				n.Size = 0 // existing file: keep its size and contents
			}
		}
		f, err := namespace.OpenFile(n.Path, namespace.FileConfig{Size: n.Size})
		if err != nil {
			return fmt.Errorf("appliance: NVMe namespace %s: %w", n.Path, err)
		}
		ex.files = append(ex.files, f)
		nss = append(nss, f)
	}
	ex.target, err = target.New(target.Config{Logger: a.log, PollSpin: cfg.PollSpin})
	if err != nil {
		return err
	}
	if err := ex.target.AddSubsystem(target.Subsystem{NQN: ex.nqn, Serial: "KVT" + a.cfg.Name, Model: "kvtier appliance",
		AllowHosts: cfg.AllowHosts, Namespaces: nss, HostSecrets: cfg.HostSecrets, CtrlSecrets: cfg.CtrlSecrets}); err != nil {
		return err
	}
	addr, err := ex.target.Listen(cfg.Addr)
	if err != nil {
		return fmt.Errorf("appliance: --nvme-addr %s: %w", cfg.Addr, err)
	}
	ex.addr = addr.String()
	for i, f := range ex.files {
		seg := &kvtierpb.Segment{
			Name: fmt.Sprintf("%s/nvme%d", a.cfg.Name, i+1), Type: kvtierpb.ReplicaType_NOF,
			Nqn: ex.nqn, Nsid: uint32(i + 1), TargetAddr: ex.addr,
			BlockSize: uint32(f.BlockSize()), Size: uint64(f.Size()),
		}
		if err := a.client.MountSegment(ctx, seg); err != nil {
			return fmt.Errorf("appliance: mount NOF segment %s: %w", seg.Name, err)
		}
		a.nofSegments = append(a.nofSegments, seg.Name)
	}
	a.log.Info("nvme/tcp target", "addr", ex.addr, "nqn", ex.nqn, "namespaces", len(ex.files), "dhchap_hosts", len(cfg.HostSecrets))
	a.nvmeLive.Store(ex)
	return nil
}

// NVMeAddr is the NVMe/TCP listener address ("" when not exporting).
func (a *Appliance) NVMeAddr() string {
	ex := a.nvmeLive.Load()
	if ex == nil {
		return ""
	}
	return ex.addr
}

// NVMeNQN is the exported subsystem NQN ("" when not exporting).
func (a *Appliance) NVMeNQN() string {
	ex := a.nvmeLive.Load()
	if ex == nil {
		return ""
	}
	return ex.nqn
}

// NVMeStats returns the target's per-namespace and per-host figures.
// The heartbeat loop calls it (and NVMeAddr) while Start may still be in
// startNVMe: the NOF segments are mounted, so beats carry them, before the
// export is published whole.
func (a *Appliance) NVMeStats() (target.Stats, bool) {
	ex := a.nvmeLive.Load()
	if ex == nil || ex.target == nil {
		return target.Stats{}, false
	}
	return ex.target.Stats(), true
}

// NVMeHealth returns nil while the NVMe/TCP export serves, else why it
// does not: a built-in target listener that cannot accept (out of file
// descriptors) or stopped, or, with the SPDK backend, an SPDK that does not
// answer its JSON-RPC socket. The appliance's liveness report uses it; nil
// when not exporting.
func (a *Appliance) NVMeHealth() error {
	// The heartbeat loop calls this while Start may still be in startNVMe:
	// read the export only once it was published whole.
	ex := a.nvmeLive.Load()
	if ex == nil {
		return nil
	}
	if ex.target != nil {
		if err := ex.target.Health(); err != nil {
			return fmt.Errorf("appliance %s: %w", a.cfg.Name, err)
		}
	}
	if w := ex.watch; w != nil {
		if err := w.health(); err != nil {
			return fmt.Errorf("appliance %s: %w", a.cfg.Name, err)
		}
	}
	return nil
}

func (ex *nvmeExport) close() error {
	if ex == nil {
		return nil
	}
	var err error
	if ex.target != nil {
		err = ex.target.Close()
	}
	for _, f := range ex.files {
		err = errors.Join(err, f.Close())
	}
	return err
}
