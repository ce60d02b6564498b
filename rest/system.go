package rest

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/shirou/gopsutil/v3/cpu"
	"github.com/shirou/gopsutil/v3/disk"
	"github.com/shirou/gopsutil/v3/host"
	"github.com/shirou/gopsutil/v3/load"
	"github.com/shirou/gopsutil/v3/mem"
	psnet "github.com/shirou/gopsutil/v3/net"
)

// SystemJSON is GET system: host figures. A part gopsutil cannot read is
// left empty and named in Errors rather than failing the whole answer.
type SystemJSON struct {
	Hostname  string          `json:"hostname"`
	OS        string          `json:"os"`
	Kernel    string          `json:"kernel"`
	UptimeSec uint64          `json:"uptime_seconds"`
	CPU       CPUJSON         `json:"cpu"`
	Memory    MemoryJSON      `json:"memory"`
	HugePages HugePagesJSON   `json:"hugepages"`
	Disks     []DiskUsageJSON `json:"disks"`
	NICs      []NICJSON       `json:"nics"`
	Errors    []string        `json:"errors,omitempty"`
}

// CPUJSON describes the processors.
type CPUJSON struct {
	Model        string    `json:"model"`
	Logical      int       `json:"logical"`
	Physical     int       `json:"physical"`
	UsedPercent  float64   `json:"used_percent"`
	Load         []float64 `json:"load"` // 1, 5, 15 minutes
	NUMANodes    int       `json:"numa_nodes"`
	GoMaxProcs   int       `json:"gomaxprocs"`
	ProcessCount uint64    `json:"processes"`
}

// MemoryJSON is host memory in bytes.
type MemoryJSON struct {
	Total       uint64  `json:"total"`
	Available   uint64  `json:"available"`
	Used        uint64  `json:"used"`
	UsedPercent float64 `json:"used_percent"`
	SwapTotal   uint64  `json:"swap_total"`
	SwapUsed    uint64  `json:"swap_used"`
}

// HugePagesJSON comes from /proc/meminfo.
type HugePagesJSON struct {
	Total    uint64 `json:"total"`
	Free     uint64 `json:"free"`
	Reserved uint64 `json:"reserved"`
	Surplus  uint64 `json:"surplus"`
	PageSize uint64 `json:"page_size"`   // bytes
	Bytes    uint64 `json:"total_bytes"` // total * page size
}

// DiskUsageJSON is one mounted file system.
type DiskUsageJSON struct {
	Device      string  `json:"device"`
	Mountpoint  string  `json:"mountpoint"`
	FSType      string  `json:"fstype"`
	Total       uint64  `json:"total"`
	Used        uint64  `json:"used"`
	Free        uint64  `json:"free"`
	UsedPercent float64 `json:"used_percent"`
}

// NICJSON is one network interface.
type NICJSON struct {
	Name      string   `json:"name"`
	MTU       int      `json:"mtu"`
	MAC       string   `json:"mac,omitempty"`
	Addrs     []string `json:"addrs"`
	Up        bool     `json:"up"`
	BytesSent uint64   `json:"bytes_sent"`
	BytesRecv uint64   `json:"bytes_recv"`
}

// parseMeminfoHugePages reads the HugePages_* and Hugepagesize lines of a
// /proc/meminfo text. Unknown or malformed lines are skipped.
func parseMeminfoHugePages(r io.Reader) HugePagesJSON {
	var h HugePagesJSON
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "HugePages_Total":
			h.Total = v
		case "HugePages_Free":
			h.Free = v
		case "HugePages_Rsvd":
			h.Reserved = v
		case "HugePages_Surp":
			h.Surplus = v
		case "Hugepagesize":
			if len(f) > 1 && strings.EqualFold(f[1], "kB") && v <= (1<<54) {
				v *= 1024
			}
			h.PageSize = v
		}
	}
	if h.PageSize > 0 && h.Total <= (1<<63)/h.PageSize {
		h.Bytes = h.Total * h.PageSize
	}
	return h
}

// pseudoFS are file systems not worth showing an operator.
var pseudoFS = map[string]bool{"proc": true, "sysfs": true, "devtmpfs": true, "devpts": true, "cgroup": true,
	"cgroup2": true, "securityfs": true, "debugfs": true, "tracefs": true, "mqueue": true, "pstore": true,
	"bpf": true, "autofs": true, "configfs": true, "fusectl": true, "hugetlbfs": true, "binfmt_misc": true, "nsfs": true}

func collectSystem(ctx context.Context) SystemJSON {
	out := SystemJSON{Disks: []DiskUsageJSON{}, NICs: []NICJSON{}}
	fail := func(what string, err error) { out.Errors = append(out.Errors, what+": "+err.Error()) }
	if hi, err := host.InfoWithContext(ctx); err == nil {
		out.Hostname, out.OS, out.Kernel, out.UptimeSec = hi.Hostname, hi.Platform+" "+hi.PlatformVersion, hi.KernelVersion, hi.Uptime
		out.CPU.ProcessCount = hi.Procs
	} else {
		fail("host", err)
	}
	out.CPU.GoMaxProcs = runtime.GOMAXPROCS(0)
	if n, err := cpu.CountsWithContext(ctx, true); err == nil {
		out.CPU.Logical = n
	}
	if n, err := cpu.CountsWithContext(ctx, false); err == nil {
		out.CPU.Physical = n
	}
	if infos, err := cpu.InfoWithContext(ctx); err == nil && len(infos) > 0 {
		out.CPU.Model = infos[0].ModelName
	}
	// Interval 0 compares with the previous call (the first call since
	// process start compares with boot), so this never blocks.
	if p, err := cpu.PercentWithContext(ctx, 0, false); err == nil && len(p) > 0 {
		out.CPU.UsedPercent = p[0]
	} else if err != nil {
		fail("cpu", err)
	}
	if l, err := load.AvgWithContext(ctx); err == nil {
		out.CPU.Load = []float64{l.Load1, l.Load5, l.Load15}
	}
	if ents, err := os.ReadDir("/sys/devices/system/node"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "node") {
				out.CPU.NUMANodes++
			}
		}
	}
	if vm, err := mem.VirtualMemoryWithContext(ctx); err == nil {
		out.Memory = MemoryJSON{Total: vm.Total, Available: vm.Available, Used: vm.Used, UsedPercent: vm.UsedPercent}
	} else {
		fail("memory", err)
	}
	if sw, err := mem.SwapMemoryWithContext(ctx); err == nil {
		out.Memory.SwapTotal, out.Memory.SwapUsed = sw.Total, sw.Used
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		out.HugePages = parseMeminfoHugePages(f)
		f.Close()
	} else {
		fail("hugepages", err)
	}
	if parts, err := disk.PartitionsWithContext(ctx, false); err == nil {
		seen := map[string]bool{}
		for _, p := range parts {
			if pseudoFS[p.Fstype] || seen[p.Mountpoint] {
				continue
			}
			seen[p.Mountpoint] = true
			u, err := disk.UsageWithContext(ctx, p.Mountpoint)
			if err != nil || u.Total == 0 {
				continue
			}
			out.Disks = append(out.Disks, DiskUsageJSON{Device: p.Device, Mountpoint: p.Mountpoint, FSType: p.Fstype,
				Total: u.Total, Used: u.Used, Free: u.Free, UsedPercent: u.UsedPercent})
			if len(out.Disks) >= 64 {
				break
			}
		}
	} else {
		fail("disks", err)
	}
	counters := map[string]psnet.IOCountersStat{}
	if cs, err := psnet.IOCountersWithContext(ctx, true); err == nil {
		for _, c := range cs {
			counters[c.Name] = c
		}
	}
	if ifs, err := psnet.InterfacesWithContext(ctx); err == nil {
		for _, i := range ifs {
			n := NICJSON{Name: i.Name, MTU: i.MTU, MAC: i.HardwareAddr, Addrs: []string{}}
			for _, f := range i.Flags {
				if f == "up" {
					n.Up = true
				}
			}
			for _, a := range i.Addrs {
				n.Addrs = append(n.Addrs, a.Addr)
			}
			if c, ok := counters[i.Name]; ok {
				n.BytesSent, n.BytesRecv = c.BytesSent, c.BytesRecv
			}
			out.NICs = append(out.NICs, n)
		}
	} else {
		fail("nics", err)
	}
	return out
}

func (s *Server) system(c echo.Context) error {
	ctx, cancel := s.ctx(c)
	defer cancel()
	return c.JSON(http.StatusOK, collectSystem(ctx))
}
