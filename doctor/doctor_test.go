package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// host writes a fake /proc and /sys tree under a temporary root.
func host(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, body := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func meminfoWith(total, free int) string {
	return "MemTotal:       16000000 kB\nHugePages_Total:    " + itoa(total) + "\nHugePages_Free:     " + itoa(free) +
		"\nHugepagesize:       2048 kB\n"
}

func itoa(n int) string { return strconv.Itoa(n) }

func find(t *testing.T, r Report, name string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q in %+v", name, r.Checks)
	return Check{}
}

func fixed(cur uint64) func(int) (uint64, error) {
	return func(int) (uint64, error) { return cur, nil }
}

func base(root string) Config {
	return Config{Root: root, Rlimit: fixed(unlimited), ClockSynced: func() (bool, error) { return true, nil },
		Privileged: func() bool { return false }}
}

func TestHugepagesOnAndOff(t *testing.T) {
	on := host(t, map[string]string{"proc/meminfo": meminfoWith(512, 512)})
	off := host(t, map[string]string{"proc/meminfo": meminfoWith(0, 0)})

	cfg := base(on)
	cfg.DRAM, cfg.Hugepages = 512<<20, "on"
	if c := find(t, Run(context.Background(), cfg), "hugepages"); c.Status != StatusOK {
		t.Errorf("512 free 2 MiB pages for 512 MiB: %+v", c)
	}
	cfg.DRAM = 2 << 30 // 1024 pages needed, 512 free
	c := find(t, Run(context.Background(), cfg), "hugepages")
	if c.Status != StatusFail || !strings.Contains(c.Fix, "vm.nr_hugepages=1024") {
		t.Errorf("--hugepages on with too few pages: %+v", c)
	}

	cfg = base(off)
	cfg.DRAM, cfg.Hugepages = 1<<30, "auto"
	r := Run(context.Background(), cfg)
	if c := find(t, r, "hugepages"); c.Status != StatusWarn || !strings.Contains(c.Fix, "nr_hugepages=512") {
		t.Errorf("no hugepages, auto: %+v", c)
	}
	if !r.OK {
		t.Errorf("a warning must not fail the report: %+v", r)
	}
	cfg.Hugepages = "on"
	r = Run(context.Background(), cfg)
	if c := find(t, r, "hugepages"); c.Status != StatusFail || r.OK || r.Failed != 1 {
		t.Errorf("no hugepages, on: %+v (report ok=%v failed=%d)", c, r.OK, r.Failed)
	}
	cfg.Hugepages = "off"
	if c := find(t, Run(context.Background(), cfg), "hugepages"); c.Status != StatusSkip {
		t.Errorf("--hugepages off: %+v", c)
	}
}

func TestMemlockLimit(t *testing.T) {
	root := host(t, map[string]string{"proc/meminfo": meminfoWith(0, 0)})
	cfg := base(root)
	cfg.DRAM = 1 << 30
	cfg.Rlimit = func(res int) (uint64, error) {
		if res == unix.RLIMIT_MEMLOCK {
			return 8 << 20, nil
		}
		return unlimited, nil
	}
	c := find(t, Run(context.Background(), cfg), "memlock")
	if c.Status != StatusFail || !strings.Contains(c.Fix, "LimitMEMLOCK=infinity") || !strings.Contains(c.Found, "8388608") {
		t.Errorf("8 MiB memlock for 1 GiB DRAM: %+v", c)
	}
	cfg.Privileged = func() bool { return true }
	if c := find(t, Run(context.Background(), cfg), "memlock"); c.Status != StatusWarn {
		t.Errorf("privileged process with a low limit: %+v", c)
	}
	cfg.Rlimit = fixed(unlimited)
	if c := find(t, Run(context.Background(), cfg), "memlock"); c.Status != StatusOK || c.Found != "unlimited" {
		t.Errorf("unlimited memlock: %+v", c)
	}
}

// TestODirectRefused runs the probe on ramfs, a real filesystem that refuses
// O_DIRECT (tmpfs accepts it since Linux 6.6).
func TestODirectRefused(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mount("ramfs", dir, "ramfs", 0, ""); err != nil {
		t.Skipf("skipped: cannot mount a ramfs (a filesystem without O_DIRECT) here: %v (needs root)", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	cfg := base(host(t, nil))
	cfg.SSDDir = dir
	r := Run(context.Background(), cfg)
	c := find(t, r, "o_direct")
	if c.Status != StatusFail || !strings.Contains(c.Found, "ramfs") || !strings.Contains(c.Fix, "ext4") {
		t.Errorf("O_DIRECT on ramfs: %+v", c)
	}
	if r.OK {
		t.Error("a failed O_DIRECT check left the report OK")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the probe left files behind: %v", left)
	}
}

func TestODirectOnDiskAndFreeSpace(t *testing.T) {
	dir := t.TempDir()
	if fsName(dir) == "tmpfs" {
		t.Skip("skipped: the test temporary directory is on tmpfs; no O_DIRECT-capable filesystem to test")
	}
	cfg := base(host(t, nil))
	cfg.SSDDir = dir
	cfg.SSDCapacity = 1 << 50 // 1 PiB: more than any test disk
	r := Run(context.Background(), cfg)
	if c := find(t, r, "o_direct"); c.Status != StatusOK && c.Status != StatusWarn {
		t.Errorf("O_DIRECT on %s (%s): %+v", dir, fsName(dir), c)
	}
	if c := find(t, r, "free_space"); c.Status != StatusWarn || !strings.Contains(c.Fix, "lower --ssd-capacity") {
		t.Errorf("1 PiB capacity: %+v", c)
	}
	cfg.SSDCapacity = 1 << 20
	if c := find(t, Run(context.Background(), cfg), "free_space"); c.Status != StatusOK {
		t.Errorf("1 MiB capacity: %+v", c)
	}
	// A directory not created yet is checked on its parent and not created.
	cfg.SSDDir = filepath.Join(dir, "not", "yet")
	if c := find(t, Run(context.Background(), cfg), "o_direct"); c.Status != StatusOK || !strings.Contains(c.Found, "not created yet") {
		t.Errorf("missing directory: %+v", c)
	}
	if _, err := os.Stat(filepath.Join(dir, "not")); !os.IsNotExist(err) {
		t.Errorf("doctor created %s: %v", cfg.SSDDir, err)
	}
}

func TestSysfsDevicesAndModes(t *testing.T) {
	root := host(t, map[string]string{
		"proc/meminfo": meminfoWith(16, 16),
		"sys/kernel/mm/transparent_hugepage/enabled":            "always madvise [never]",
		"sys/kernel/mm/transparent_hugepage/shmem_enabled":      "always within_size advise [never] deny force",
		"sys/devices/system/node/node0/cpulist":                 "0-7",
		"sys/devices/system/node/node1/cpulist":                 "8-15",
		"sys/class/nvme/nvme0/model":                            "Example NVMe SSD",
		"sys/class/nvme/nvme0/firmware_rev":                     "1.2.3",
		"sys/class/nvme/nvme0/device/numa_node":                 "1",
		"sys/class/nvme/nvme0/nvme0n1/queue/logical_block_size": "512",
		"sys/class/infiniband/mlx5_0/ports/1/state":             "1: DOWN",
		"sys/class/infiniband/mlx5_0/ports/1/link_layer":        "Ethernet",
	})
	cfg := base(root)
	cfg.Rlimit = func(res int) (uint64, error) {
		if res == unix.RLIMIT_NOFILE {
			return 1024, nil
		}
		return unlimited, nil
	}
	cfg.ClockSynced = func() (bool, error) { return false, nil }
	r := Run(context.Background(), cfg)
	want := map[string]Status{"thp": StatusWarn, "numa": StatusOK, "nvme": StatusWarn, "rdma": StatusWarn,
		"open_files": StatusWarn, "clock_sync": StatusWarn, "o_direct": StatusSkip}
	for name, st := range want {
		if c := find(t, r, name); c.Status != st {
			t.Errorf("%s: %+v, want %s", name, c, st)
		}
	}
	if c := find(t, r, "nvme"); !strings.Contains(c.Fix, "--lbaf") || !strings.Contains(c.Found, "fw 1.2.3") {
		t.Errorf("nvme: %+v", c)
	}
	if c := find(t, r, "numa"); !strings.Contains(c.Found, "2 node(s)") || !strings.Contains(c.Found, "nvme0@node1") {
		t.Errorf("numa: %+v", c)
	}
	if len(r.Checks) != 12 {
		t.Errorf("%d checks, want 12", len(r.Checks))
	}
}
