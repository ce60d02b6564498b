package spdk

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/kvtier/kvtier/kverr"
)

// Plan is the SPDK state the appliance wants in --nvme-backend spdk mode:
// block devices (NVMe controllers, aio files, malloc disks), optionally an
// lvol store carved into lvols, and one NVMe-oF subsystem exporting them over
// TCP. Which bdevs are exported: every lvol, and every base bdev that does
// not carry the lvol store, in plan order (controllers' namespaces, aio
// files, malloc disks, lvols). NSIDs are assigned by SPDK (lowest free).
type Plan struct {
	Controllers []ControllerSpec
	AioFiles    []AioSpec
	Mallocs     []MallocSpec
	Lvstore     *LvstoreSpec // nil: no lvol store
	Lvols       []LvolSpec   // needs Lvstore
	Subsystem   SubsystemSpec
	// Transport tunes the TCP transport when the Manager has to create it;
	// an existing TCP transport is used as it is.
	Transport NvmfCreateTransportParams
	// Keys are keyring_file keys to add (the DH-HMAC-CHAP secrets that
	// Subsystem.HostKeys name). The files must exist when the plan is
	// applied, with mode 0600 and SPDK's owner; SPDK reads them each time a
	// key is used, so rewriting a file changes the secret.
	Keys []KeySpec
}

// KeySpec is a keyring_file key: a name and the absolute path of a file
// holding the secret (for DH-HMAC-CHAP, "DHHC-1:xx:...:").
type KeySpec struct {
	Name string
	Path string
}

// HostKeys names the keyring keys of one host's DH-HMAC-CHAP secrets: Key,
// the host's (required), and CtrlrKey, the controller's, for a host that
// authenticates the controller too ("" = none).
type HostKeys struct {
	Key      string
	CtrlrKey string
}

// ControllerSpec is an NVMe controller to attach: a local PCIe SSD
// (Trtype "pcie", Traddr a PCI BDF such as 0000:5e:00.0, already bound to
// vfio-pci/uio by SPDK's setup.sh) or a remote NVMe/TCP subsystem.
type ControllerSpec struct {
	Name    string // bdevs become <Name>n<nsid>
	Trtype  string // "pcie" or "tcp"
	Traddr  string
	Adrfam  string // tcp: "ipv4" (default) or "ipv6"
	Trsvcid string // tcp: port
	Subnqn  string // tcp: remote subsystem NQN
	Hostnqn string // tcp: optional host NQN
}

// AioSpec is a file or block device served through Linux AIO.
type AioSpec struct {
	Name      string
	Filename  string // absolute path; must exist
	BlockSize uint32 // 0 = detected
}

// MallocSpec is a RAM disk.
type MallocSpec struct {
	Name      string
	Size      uint64 // bytes, a multiple of BlockSize
	BlockSize uint32 // 0 = 4096
}

// LvstoreSpec is an lvol store on one of the plan's bdevs.
type LvstoreSpec struct {
	Name        string
	BaseBdev    string // a plan bdev: a malloc/aio name or "<controller>n<nsid>"
	ClusterSize uint32 // bytes; 0 = SPDK's 4 MiB
}

// LvolSpec is a logical volume in the plan's lvol store.
type LvolSpec struct {
	Name    string
	SizeMiB uint64
	Thin    bool
}

// SubsystemSpec is the exported NVMe-oF subsystem.
type SubsystemSpec struct {
	NQN    string
	Serial string // ≤ 20 ASCII characters; "" = SPDK's default
	Model  string // ≤ 40 ASCII characters; "" = SPDK's default
	// Hosts lists the host NQNs allowed to connect; empty allows any host
	// (unless HostKeys is set).
	Hosts []string
	// HostKeys turns on DH-HMAC-CHAP in-band authentication for the hosts
	// it lists (host NQN -> keys of Plan.Keys); they are allowed to connect
	// whether Hosts lists them or not, and with any HostKeys the subsystem
	// no longer allows any host.
	HostKeys map[string]HostKeys
	// Listen is the TCP listener (Trtype "TCP", Adrfam "IPv4"/"IPv6",
	// Traddr, Trsvcid port). Adrfam defaults to IPv4.
	Listen ListenAddress
}

var (
	nqnRE  = regexp.MustCompile(`^nqn\.[0-9]{4}-[0-9]{2}\.[A-Za-z0-9][A-Za-z0-9.-]*(:.+)?$`)
	bdfRE  = regexp.MustCompile(`^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)
	nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
)

func validNQN(n string) bool { return len(n) <= 223 && nqnRE.MatchString(n) }

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Validate checks the plan without contacting SPDK. Errors are
// kverr.InvalidParams.
func (p *Plan) Validate() error {
	bad := func(format string, args ...any) error {
		return kverr.New(kverr.InvalidParams, "", "spdk plan: "+format, args...)
	}
	names := map[string]bool{}
	addName := func(n, what string) error {
		if !nameRE.MatchString(n) {
			return bad("%s name %q: want 1-64 of [A-Za-z0-9_.-]", what, n)
		}
		if names[n] {
			return bad("duplicate name %q", n)
		}
		names[n] = true
		return nil
	}
	ctrlPrefix := map[string]bool{}
	for _, c := range p.Controllers {
		if err := addName(c.Name, "controller"); err != nil {
			return err
		}
		ctrlPrefix[c.Name] = true
		switch strings.ToLower(c.Trtype) {
		case "pcie":
			if !bdfRE.MatchString(c.Traddr) {
				return bad("controller %s: %q is not a PCI address (0000:5e:00.0)", c.Name, c.Traddr)
			}
		case "tcp":
			if c.Traddr == "" || !validPort(c.Trsvcid) || !validNQN(c.Subnqn) {
				return bad("controller %s: tcp needs traddr, trsvcid (port) and a valid subnqn", c.Name)
			}
			if c.Hostnqn != "" && !validNQN(c.Hostnqn) {
				return bad("controller %s: bad hostnqn %q", c.Name, c.Hostnqn)
			}
			if a := strings.ToLower(c.Adrfam); a != "" && a != "ipv4" && a != "ipv6" {
				return bad("controller %s: adrfam %q", c.Name, c.Adrfam)
			}
		default:
			return bad("controller %s: trtype %q (want pcie or tcp)", c.Name, c.Trtype)
		}
	}
	for _, a := range p.AioFiles {
		if err := addName(a.Name, "aio"); err != nil {
			return err
		}
		if !filepath.IsAbs(a.Filename) {
			return bad("aio %s: filename %q must be absolute", a.Name, a.Filename)
		}
		if a.BlockSize%512 != 0 {
			return bad("aio %s: block size %d not a multiple of 512", a.Name, a.BlockSize)
		}
	}
	for _, m := range p.Mallocs {
		if err := addName(m.Name, "malloc"); err != nil {
			return err
		}
		bs := uint64(m.blockSize())
		if bs%512 != 0 || m.Size == 0 || m.Size%bs != 0 {
			return bad("malloc %s: size %d must be a positive multiple of block size %d (a multiple of 512)", m.Name, m.Size, bs)
		}
	}
	if p.Lvstore != nil {
		l := p.Lvstore
		if err := addName(l.Name, "lvstore"); err != nil {
			return err
		}
		if !p.isPlanBdev(l.BaseBdev, ctrlPrefix) {
			return bad("lvstore %s: base bdev %q is not one of the plan's bdevs", l.Name, l.BaseBdev)
		}
		if l.ClusterSize != 0 && (l.ClusterSize%4096 != 0) {
			return bad("lvstore %s: cluster size %d not a multiple of 4096", l.Name, l.ClusterSize)
		}
	} else if len(p.Lvols) > 0 {
		return bad("lvols need an lvstore")
	}
	lvols := map[string]bool{}
	for _, v := range p.Lvols {
		if !nameRE.MatchString(v.Name) || lvols[v.Name] {
			return bad("lvol name %q invalid or duplicate", v.Name)
		}
		lvols[v.Name] = true
		if v.SizeMiB == 0 {
			return bad("lvol %s: size 0", v.Name)
		}
	}
	s := p.Subsystem
	if !validNQN(s.NQN) {
		return bad("subsystem NQN %q is not nqn.yyyy-mm.reverse.domain:name", s.NQN)
	}
	if len(s.Serial) > 20 || !printableASCII(s.Serial) || len(s.Model) > 40 || !printableASCII(s.Model) {
		return bad("serial (≤20) or model (≤40) not printable ASCII of allowed length")
	}
	for _, h := range s.Hosts {
		if !validNQN(h) {
			return bad("host NQN %q invalid", h)
		}
	}
	keys := map[string]bool{}
	for _, k := range p.Keys {
		if !nameRE.MatchString(k.Name) || keys[k.Name] {
			return bad("key name %q invalid or duplicate", k.Name)
		}
		keys[k.Name] = true
		if !filepath.IsAbs(k.Path) {
			return bad("key %s: path %q must be absolute", k.Name, k.Path)
		}
	}
	for h, hk := range s.HostKeys {
		if !validNQN(h) {
			return bad("host NQN %q invalid", h)
		}
		if hk.Key == "" {
			return bad("host %s: a DH-HMAC-CHAP controller key needs a host key", h)
		}
		for _, k := range []string{hk.Key, hk.CtrlrKey} {
			if k != "" && !keys[k] {
				return bad("host %s: key %q is not one of the plan's keys", h, k)
			}
		}
	}
	if !strings.EqualFold(s.Listen.Trtype, "tcp") || s.Listen.Traddr == "" || !validPort(s.Listen.Trsvcid) {
		return bad("listener must be TCP with traddr and port, got %+v", s.Listen)
	}
	if a := strings.ToLower(s.Listen.Adrfam); a != "" && a != "ipv4" && a != "ipv6" {
		return bad("listener adrfam %q", s.Listen.Adrfam)
	}
	if tt := p.Transport.Trtype; tt != "" && !strings.EqualFold(tt, "tcp") {
		return bad("transport %q: only TCP is managed", tt)
	}
	if len(p.Controllers)+len(p.AioFiles)+len(p.Mallocs)+len(p.Lvols) == 0 {
		return bad("nothing to export")
	}
	return nil
}

// hosts is every host NQN the subsystem allows, sorted: Hosts and those
// with keys.
func (s *SubsystemSpec) hosts() []string {
	out := slices.Clone(s.Hosts)
	for h := range s.HostKeys {
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

func (m MallocSpec) blockSize() uint32 {
	if m.BlockSize == 0 {
		return 4096
	}
	return m.BlockSize
}

func validPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0 && n < 65536
}

// isPlanBdev reports whether n names a bdev the plan creates.
func (p *Plan) isPlanBdev(n string, ctrl map[string]bool) bool {
	for _, a := range p.AioFiles {
		if a.Name == n {
			return true
		}
	}
	for _, m := range p.Mallocs {
		if m.Name == n {
			return true
		}
	}
	if i := strings.LastIndex(n, "n"); i > 0 {
		if _, err := strconv.Atoi(n[i+1:]); err == nil && ctrl[n[:i]] {
			return true
		}
	}
	return false
}

func (p *Plan) lvolAlias(v LvolSpec) string { return p.Lvstore.Name + "/" + v.Name }

func (p *Plan) listen() ListenAddress {
	l := p.Subsystem.Listen
	l.Trtype = "TCP"
	switch strings.ToLower(l.Adrfam) {
	case "", "ipv4":
		l.Adrfam = "IPv4"
	case "ipv6":
		l.Adrfam = "IPv6"
	}
	return l
}

func (p *Plan) String() string {
	return fmt.Sprintf("plan{%s: %d ctrl, %d aio, %d malloc, %d lvol}", p.Subsystem.NQN,
		len(p.Controllers), len(p.AioFiles), len(p.Mallocs), len(p.Lvols))
}
