package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Status is the outcome of one check.
type Status string

// The statuses, worst last.
const (
	StatusOK   Status = "ok"
	StatusSkip Status = "skip" // nothing to check (no SSD directory, no device)
	StatusWarn Status = "warn" // works, but a figure suffers
	StatusFail Status = "fail" // kvtier will refuse to start or lose data/speed badly
)

// Check is one finding.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Found  string `json:"found"`
	Want   string `json:"want,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

// Report is every check of one run.
type Report struct {
	Checks []Check `json:"checks"`
	OK     bool    `json:"ok"` // no check failed
	Failed int     `json:"failed"`
	Warned int     `json:"warned"`
}

// Config says what to check and how to reach the host. The zero value checks
// this host for an appliance with no SSD directory and unknown DRAM size.
type Config struct {
	// Root prefixes every /proc and /sys path ("" is "/").
	Root string
	// SSDDir is the SSD tier directory (--ssd-dir); empty skips the
	// O_DIRECT, free-space and scheduler checks.
	SSDDir string
	// SSDCapacity is the SSD tier size wanted (--ssd-capacity); 0 skips
	// the free-space comparison.
	SSDCapacity uint64
	// DRAM is the DRAM the appliance will serve (--dram); 0 compares
	// hugepages and memlock with nothing.
	DRAM uint64
	// Hugepages is the appliance's --hugepages mode: auto, on or off.
	Hugepages string
	// Rlimit returns a resource limit (unix.RLIMIT_*); nil reads this
	// process's own (unix.Getrlimit). Values at or above 1<<63 mean unlimited.
	Rlimit func(resource int) (cur uint64, err error)
	// ClockSynced reports whether the kernel clock is synchronised; nil asks
	// adjtimex(2).
	ClockSynced func() (bool, error)
	// Privileged reports whether the process may lock memory beyond
	// RLIMIT_MEMLOCK (CAP_IPC_LOCK); nil means euid 0.
	Privileged func() bool
	// RDMATransport reports whether the transfer engine would use RDMA
	// with the --rdma-device setting, and why not (transfer.Engine's
	// RDMAStatus; the caller probes it: doctor imports no mechanism).
	// nil skips the rdma-transport check.
	RDMATransport func() (on bool, detail string)
}

func (c Config) path(p string) string {
	if c.Root == "" || c.Root == "/" {
		return p
	}
	return filepath.Join(c.Root, p)
}

func (c Config) read(p string) (string, error) {
	b, err := os.ReadFile(c.path(p))
	return strings.TrimSpace(string(b)), err
}

// Run performs every check. It reads files and probes the SSD directory; ctx
// bounds nothing slow today but keeps the signature of an I/O call.
func Run(ctx context.Context, cfg Config) Report {
	if cfg.Rlimit == nil {
		cfg.Rlimit = func(res int) (uint64, error) {
			var l unix.Rlimit
			if err := unix.Getrlimit(res, &l); err != nil {
				return 0, err
			}
			return l.Cur, nil
		}
	}
	if cfg.ClockSynced == nil {
		cfg.ClockSynced = adjtimexSynced
	}
	if cfg.Privileged == nil {
		cfg.Privileged = func() bool { return os.Geteuid() == 0 }
	}
	var r Report
	for _, f := range []func(Config) Check{
		checkHugepages, checkMemlock, checkTHP, checkODirect, checkFreeSpace, checkScheduler,
		checkNUMA, checkOpenFiles, checkClock, checkRDMA, checkRDMATransport, checkNVMe,
	} {
		if ctx.Err() != nil {
			break
		}
		c := f(cfg)
		switch c.Status {
		case StatusFail:
			r.Failed++
		case StatusWarn:
			r.Warned++
		}
		r.Checks = append(r.Checks, c)
	}
	r.OK = r.Failed == 0
	return r
}

// meminfo reads the fields of /proc/meminfo (values in the file's units).
func meminfo(cfg Config) (map[string]uint64, error) {
	s, err := cfg.read("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			n <<= 10
		}
		out[strings.TrimSpace(k)] = n
	}
	return out, nil
}

func checkHugepages(cfg Config) Check {
	c := Check{Name: "hugepages", Want: "hugepages reserved and free for the DRAM tier (--dram)"}
	mi, err := meminfo(cfg)
	if err != nil {
		c.Status, c.Found = StatusWarn, "cannot read /proc/meminfo: "+err.Error()
		return c
	}
	total, free, size := mi["HugePages_Total"], mi["HugePages_Free"], mi["Hugepagesize"]
	c.Found = fmt.Sprintf("%d reserved, %d free, %s pages", total, free, fmtBytes(size))
	if gb, err := cfg.read("/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"); err == nil && gb != "0" {
		c.Found += ", " + gb + " x 1 GiB reserved"
	}
	need := uint64(0)
	if size > 0 && cfg.DRAM > 0 {
		need = (cfg.DRAM + size - 1) / size
		c.Want = fmt.Sprintf("at least %d free %s pages for --dram %s", need, fmtBytes(size), fmtBytes(cfg.DRAM))
	}
	fix := "reserve at boot: sysctl -w vm.nr_hugepages=N (persist in /etc/sysctl.d/80-kvtier.conf) or kernel command line hugepagesz=2M hugepages=N; see firmware-notes/hugepages.md"
	if size > 0 && cfg.DRAM > 0 {
		fix = fmt.Sprintf("sysctl -w vm.nr_hugepages=%d (or hugepages=%d on the kernel command line); see firmware-notes/hugepages.md", total+need-min(need, free), need)
	}
	switch {
	case cfg.Hugepages == "off":
		c.Status, c.Want = StatusSkip, "not used (--hugepages off)"
	case total == 0 && cfg.Hugepages == "on":
		c.Status, c.Fix = StatusFail, fix
	case total == 0:
		c.Status, c.Fix = StatusWarn, fix+" (without them DRAM uses 4 KiB pages: more TLB misses, ~7% slower remote reads)"
	case need > free && cfg.Hugepages == "on":
		c.Status, c.Fix = StatusFail, fix
	case need > free:
		c.Status, c.Fix = StatusWarn, fix+" (auto falls back to normal pages for what does not fit)"
	default:
		c.Status = StatusOK
	}
	return c
}

const unlimited = 1 << 63

func checkMemlock(cfg Config) Check {
	c := Check{Name: "memlock", Want: "RLIMIT_MEMLOCK unlimited (or at least --dram) so DRAM segments are locked and never swapped"}
	cur, err := cfg.Rlimit(unix.RLIMIT_MEMLOCK)
	if err != nil {
		c.Status, c.Found = StatusWarn, err.Error()
		return c
	}
	c.Found = fmtLimit(cur)
	need := max(cfg.DRAM, 64<<20)
	c.Fix = "LimitMEMLOCK=infinity in the systemd unit (deploy/systemd/kvtier.service), or ulimit -l unlimited / memlock in /etc/security/limits.conf"
	switch {
	case cur >= unlimited || cur >= need:
		c.Status, c.Fix = StatusOK, ""
	case cfg.Privileged():
		c.Status = StatusWarn
		c.Found += " (running privileged: CAP_IPC_LOCK lets this process lock anyway; the service user may not)"
	default:
		c.Status = StatusFail
		c.Found += fmt.Sprintf(" < %s: segment memory may be swapped out", fmtBytes(need))
	}
	return c
}

// bracketed returns the [selected] word of a sysfs choice file.
func bracketed(s string) string {
	if i := strings.IndexByte(s, '['); i >= 0 {
		if j := strings.IndexByte(s[i:], ']'); j > 0 {
			return s[i+1 : i+j]
		}
	}
	return s
}

func checkTHP(cfg Config) Check {
	c := Check{Name: "thp", Want: "transparent hugepages 'always' or 'madvise' (anonymous DRAM when no hugepages are reserved); shmem 'advise' or better for shared segments"}
	en, err := cfg.read("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		c.Status, c.Found = StatusSkip, "no transparent_hugepage in sysfs"
		return c
	}
	mode := bracketed(en)
	shm, _ := cfg.read("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
	shmMode := bracketed(shm)
	c.Found = "enabled=" + mode
	if shmMode != "" {
		c.Found += " shmem_enabled=" + shmMode
	}
	switch {
	case mode == "never":
		c.Status = StatusWarn
		c.Fix = "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled (or transparent_hugepage=madvise on the kernel command line), or reserve hugepages"
	case shmMode == "never" || shmMode == "deny":
		c.Status = StatusWarn
		c.Fix = "echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled, or reserve hugepages (shared segments otherwise use 4 KiB pages), or run the appliance with --shm=false"
	default:
		c.Status = StatusOK
	}
	return c
}

// ODirectAlign is the alignment kvtier's SSD tier uses for direct I/O.
const ODirectAlign = 4096

// ProbeODirect creates a file in dir with O_DIRECT, writes and reads back
// one aligned block, and removes it. It returns nil when direct I/O works
// with ODirectAlign-byte alignment.
func ProbeODirect(dir string) error {
	f, err := os.CreateTemp(dir, ".kvtier-doctor-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	defer os.Remove(name)
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		return fmt.Errorf("open with O_DIRECT: %w", err)
	}
	defer unix.Close(fd)
	buf := alignedBlock(ODirectAlign)
	for i := range buf {
		buf[i] = byte(i)
	}
	if _, err := unix.Pwrite(fd, buf, 0); err != nil {
		return fmt.Errorf("%d-byte O_DIRECT write: %w", ODirectAlign, err)
	}
	back := alignedBlock(ODirectAlign)
	if _, err := unix.Pread(fd, back, 0); err != nil {
		return fmt.Errorf("%d-byte O_DIRECT read: %w", ODirectAlign, err)
	}
	for i := range back {
		if back[i] != buf[i] {
			return errors.New("O_DIRECT read returned other bytes than were written")
		}
	}
	return nil
}

func alignedBlock(n int) []byte {
	b := make([]byte, 2*n)
	off := 0
	if r := int(uintptrOf(b) % uintptr(n)); r != 0 {
		off = n - r
	}
	return b[off : off+n]
}

func checkODirect(cfg Config) Check {
	c := Check{Name: "o_direct", Want: fmt.Sprintf("O_DIRECT reads and writes with %d-byte alignment on --ssd-dir", ODirectAlign)}
	if cfg.SSDDir == "" {
		c.Status, c.Found = StatusSkip, "no --ssd-dir"
		return c
	}
	// The checks change nothing: a directory not created yet is checked
	// on its nearest existing parent (the same filesystem, as a rule).
	dir, note := existingDir(cfg.SSDDir)
	fsType := fsName(dir)
	if err := ProbeODirect(dir); err != nil {
		c.Status = StatusFail
		c.Found = fmt.Sprintf("%s%s (%s): %v", cfg.SSDDir, note, fsType, err)
		c.Fix = "put --ssd-dir on a filesystem that supports O_DIRECT (ext4 or xfs on the NVMe namespace); ramfs, tmpfs before Linux 6.6 and some overlay/network filesystems refuse it"
		return c
	}
	c.Status = StatusOK
	c.Found = fmt.Sprintf("%s%s (%s): O_DIRECT ok", cfg.SSDDir, note, fsType)
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil && st.Bsize > 0 && st.Bsize%ODirectAlign != 0 && ODirectAlign%st.Bsize != 0 {
		c.Status = StatusWarn
		c.Found += fmt.Sprintf(", filesystem block %d bytes", st.Bsize)
	}
	return c
}

// existingDir returns dir, or its nearest existing ancestor with a note
// saying so.
func existingDir(dir string) (string, string) {
	d := filepath.Clean(dir)
	for {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			if d == filepath.Clean(dir) {
				return d, ""
			}
			return d, " (not created yet; checked " + d + ")"
		}
		parent := filepath.Dir(d)
		if parent == d {
			return d, ""
		}
		d = parent
	}
}

// fsName names the filesystem type of dir from its statfs magic.
func fsName(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	switch st.Type {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.RAMFS_MAGIC:
		return "ramfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	case unix.NFS_SUPER_MAGIC:
		return "nfs"
	}
	return fmt.Sprintf("fs magic 0x%x", st.Type)
}

func checkFreeSpace(cfg Config) Check {
	c := Check{Name: "free_space", Want: "free space on --ssd-dir at least --ssd-capacity"}
	if cfg.SSDDir == "" {
		c.Status, c.Found = StatusSkip, "no --ssd-dir"
		return c
	}
	dir, _ := existingDir(cfg.SSDDir)
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		c.Status, c.Found = StatusFail, err.Error()
		return c
	}
	avail := st.Bavail * uint64(st.Bsize)
	total := st.Blocks * uint64(st.Bsize)
	c.Found = fmt.Sprintf("%s free of %s", fmtBytes(avail), fmtBytes(total))
	used := dirBytes(dir) // the tier's own buckets count towards its capacity
	switch {
	case cfg.SSDCapacity > 0 && avail+used < cfg.SSDCapacity:
		c.Status = StatusWarn
		c.Want = fmt.Sprintf("%s for --ssd-capacity", fmtBytes(cfg.SSDCapacity))
		c.Fix = fmt.Sprintf("lower --ssd-capacity to at most %s, or free space; the tier evicts buckets when the disk fills, so capacity beyond the disk is never reached", fmtBytes(avail+used))
	default:
		c.Status = StatusOK
	}
	return c
}

// dirBytes sums the sizes of regular files directly under dir.
func dirBytes(dir string) uint64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n uint64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += uint64(fi.Size())
		}
	}
	return n
}

func checkScheduler(cfg Config) Check {
	c := Check{Name: "io_scheduler", Want: "'none' on NVMe devices (the device schedules; a host scheduler adds latency)"}
	if cfg.SSDDir == "" {
		c.Status, c.Found = StatusSkip, "no --ssd-dir"
		return c
	}
	dir, _ := existingDir(cfg.SSDDir)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		c.Status, c.Found = StatusSkip, err.Error()
		return c
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	base, err := filepath.EvalSymlinks(cfg.path("/sys/dev/block/" + dev))
	if err != nil {
		c.Status, c.Found = StatusSkip, "no block device behind "+cfg.SSDDir+" (device "+dev+"; tmpfs, overlay or a container)"
		return c
	}
	sched, err := os.ReadFile(filepath.Join(base, "queue/scheduler"))
	if err != nil { // a partition: the queue is its parent's
		base = filepath.Dir(base)
		sched, err = os.ReadFile(filepath.Join(base, "queue/scheduler"))
	}
	if err != nil {
		c.Status, c.Found = StatusSkip, "no I/O queue for device "+dev
		return c
	}
	name := filepath.Base(base)
	mode := bracketed(strings.TrimSpace(string(sched)))
	c.Found = name + ": " + mode
	if strings.HasPrefix(name, "nvme") && mode != "none" {
		c.Status = StatusWarn
		c.Fix = fmt.Sprintf("echo none > /sys/block/%s/queue/scheduler (persist with a udev rule: firmware-notes/nvme-queues-irq.md)", name)
		return c
	}
	c.Status = StatusOK
	return c
}

func checkNUMA(cfg Config) Check {
	c := Check{Name: "numa", Want: "the appliance, its DRAM, its NVMe devices and its NIC on one NUMA node"}
	nodes, _ := filepath.Glob(cfg.path("/sys/devices/system/node/node[0-9]*"))
	sort.Strings(nodes)
	if len(nodes) == 0 {
		c.Status, c.Found = StatusOK, "no NUMA information (one node)"
		return c
	}
	var parts []string
	for _, n := range nodes {
		cpus, _ := os.ReadFile(filepath.Join(n, "cpulist"))
		parts = append(parts, filepath.Base(n)+" cpus "+strings.TrimSpace(string(cpus)))
	}
	c.Found = fmt.Sprintf("%d node(s): %s", len(nodes), strings.Join(parts, "; "))
	devs := deviceNodes(cfg, "/sys/class/nvme/*/device/numa_node")
	for k, v := range deviceNodes(cfg, "/sys/class/net/*/device/numa_node") {
		devs[k] = v
	}
	if len(devs) > 0 {
		var ds []string
		for k, v := range devs {
			ds = append(ds, k+"@node"+v)
		}
		sort.Strings(ds)
		c.Found += "; devices " + strings.Join(ds, " ")
	}
	c.Status = StatusOK
	if len(nodes) > 1 {
		c.Fix = "pin the appliance beside its devices: numactl --cpunodebind=N --membind=N kvtier appliance ... (or NUMAPolicy= in the unit); firmware-notes/numa.md"
	}
	return c
}

// deviceNodes maps device name -> numa_node for a sysfs glob.
func deviceNodes(cfg Config, glob string) map[string]string {
	out := map[string]string{}
	files, _ := filepath.Glob(cfg.path(glob))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		v := strings.TrimSpace(string(b))
		if v == "-1" {
			continue
		}
		out[filepath.Base(filepath.Dir(filepath.Dir(f)))] = v
	}
	return out
}

func checkOpenFiles(cfg Config) Check {
	c := Check{Name: "open_files", Want: "RLIMIT_NOFILE at least 65536 (one descriptor per client connection, SSD bucket file and NVMe/TCP queue)"}
	cur, err := cfg.Rlimit(unix.RLIMIT_NOFILE)
	if err != nil {
		c.Status, c.Found = StatusWarn, err.Error()
		return c
	}
	c.Found = fmtLimit(cur)
	if cur < 65536 {
		c.Status = StatusWarn
		c.Fix = "LimitNOFILE=1048576 in the unit, or ulimit -n 65536"
		return c
	}
	c.Status = StatusOK
	return c
}

// adjtimexSynced asks the kernel whether NTP/PTP discipline holds the clock.
func adjtimexSynced() (bool, error) {
	var tx unix.Timex
	state, err := unix.Adjtimex(&tx)
	if err != nil {
		return false, err
	}
	return state != unix.TIME_ERROR && tx.Status&unix.STA_UNSYNC == 0, nil
}

func checkClock(cfg Config) Check {
	c := Check{Name: "clock_sync", Want: "clock synchronised (leases and heartbeats are timed across boxes)"}
	ok, err := cfg.ClockSynced()
	switch {
	case err != nil:
		c.Status, c.Found = StatusWarn, "adjtimex: "+err.Error()
	case ok:
		c.Status, c.Found = StatusOK, "synchronised"
	default:
		c.Status, c.Found = StatusWarn, "not synchronised"
		c.Fix = "run chrony or systemd-timesyncd (timedatectl set-ntp true); check with chronyc tracking or timedatectl"
	}
	return c
}

func checkRDMA(cfg Config) Check {
	c := Check{Name: "rdma", Want: "RDMA devices with an ACTIVE port when clients use the rdma transport (optional: TCP works without)"}
	devs, _ := filepath.Glob(cfg.path("/sys/class/infiniband/*"))
	if len(devs) == 0 {
		c.Status, c.Found = StatusOK, "none (the TCP transfer engine and NVMe/TCP are used)"
		return c
	}
	var parts []string
	down := false
	for _, d := range devs {
		ports, _ := filepath.Glob(filepath.Join(d, "ports", "*"))
		for _, p := range ports {
			state, _ := os.ReadFile(filepath.Join(p, "state"))
			ll, _ := os.ReadFile(filepath.Join(p, "link_layer"))
			s := strings.TrimSpace(string(state))
			if !strings.Contains(s, "ACTIVE") {
				down = true
			}
			parts = append(parts, fmt.Sprintf("%s/%s %s %s", filepath.Base(d), filepath.Base(p), strings.TrimSpace(string(ll)), s))
		}
	}
	c.Found = strings.Join(parts, "; ")
	c.Status = StatusOK
	if down {
		c.Status = StatusWarn
		c.Fix = "bring the port up (ip link set DEV up; check cabling, PFC/ECN and MTU: firmware-notes/rdma-tcp.md); rdma link show"
	}
	return c
}

// checkRDMATransport says whether kvtier's transfer engine uses RDMA here
// and why not: a host with RDMA devices whose engine does not use them
// (built without -tags rdma, --rdma-device off or naming another device,
// the device failing to open) warns, since its remote reads then go over
// TCP.
func checkRDMATransport(cfg Config) Check {
	c := Check{Name: "rdma-transport", Want: "the transfer engine reads and writes one-sided over RDMA where a device exists (--rdma-device auto)"}
	if cfg.RDMATransport == nil {
		c.Status, c.Found = StatusSkip, "not probed"
		return c
	}
	on, detail := cfg.RDMATransport()
	c.Found = detail
	devs, _ := filepath.Glob(cfg.path("/sys/class/infiniband/*"))
	switch {
	case on:
		c.Status = StatusOK
	case len(devs) == 0:
		c.Status = StatusOK // nothing to use: TCP is the transport
	case strings.Contains(detail, "--rdma-device off"):
		c.Status = StatusOK // the operator's choice
	default:
		c.Status = StatusWarn
		c.Fix = "build kvtier with RDMA (apt-get install libibverbs-dev rdma-core; make build adds -tags rdma then) and give --rdma-device auto or a device listed by rdma link show"
	}
	return c
}

func checkNVMe(cfg Config) Check {
	c := Check{Name: "nvme", Want: "NVMe namespaces formatted with 4 KiB logical blocks"}
	ctrls, _ := filepath.Glob(cfg.path("/sys/class/nvme/nvme[0-9]*"))
	if len(ctrls) == 0 {
		c.Status, c.Found = StatusOK, "no NVMe controllers (file-backed SSD tier and namespaces only)"
		return c
	}
	var parts []string
	small := []string{}
	for _, ctl := range ctrls {
		model, _ := os.ReadFile(filepath.Join(ctl, "model"))
		fw, _ := os.ReadFile(filepath.Join(ctl, "firmware_rev"))
		part := fmt.Sprintf("%s %s fw %s", filepath.Base(ctl), strings.TrimSpace(string(model)), strings.TrimSpace(string(fw)))
		nss, _ := filepath.Glob(filepath.Join(ctl, filepath.Base(ctl)+"n*"))
		if len(nss) == 0 { // newer kernels: namespaces under nvme-subsystem; fall back to /sys/block
			nss, _ = filepath.Glob(cfg.path("/sys/block/" + filepath.Base(ctl) + "n*"))
		}
		for _, ns := range nss {
			lbs, err := os.ReadFile(filepath.Join(ns, "queue/logical_block_size"))
			if err != nil {
				continue
			}
			v := strings.TrimSpace(string(lbs))
			part += fmt.Sprintf(", %s lba %s", filepath.Base(ns), v)
			if v != "4096" {
				small = append(small, filepath.Base(ns))
			}
		}
		parts = append(parts, part)
	}
	c.Found = strings.Join(parts, "; ")
	c.Status = StatusOK
	if len(small) > 0 {
		c.Status = StatusWarn
		c.Fix = fmt.Sprintf("reformat %s to a 4 KiB LBA format (destroys data): nvme id-ns -H /dev/%s | grep 'LBA Format'; nvme format /dev/%s --lbaf=N; firmware-notes/nvme-lba-format.md", strings.Join(small, ", "), small[0], small[0])
	}
	return c
}

func fmtLimit(n uint64) string {
	if n >= unlimited {
		return "unlimited"
	}
	return strconv.FormatUint(n, 10)
}

func fmtBytes(n uint64) string {
	switch {
	case n >= 1<<40 && n%(1<<40) == 0:
		return fmt.Sprintf("%dTiB", n>>40)
	case n >= 1<<30:
		return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatUint(n, 10) + "B"
}
