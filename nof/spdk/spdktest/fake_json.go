package spdktest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Reply shapes of FakeSPDK, member for member in the order SPDK v26.05 writes
// them (see the recordings 04, 09, 10, 11, 12, 55, 56, 62).

type jsonVersion struct {
	Version string `json:"version"`
	Fields  struct {
		Major  int    `json:"major"`
		Minor  int    `json:"minor"`
		Patch  int    `json:"patch"`
		Suffix string `json:"suffix"`
	} `json:"fields"`
}

type jsonTransport struct {
	Trtype                string `json:"trtype"`
	MaxQueueDepth         uint32 `json:"max_queue_depth"`
	MaxIOQpairsPerCtrlr   uint32 `json:"max_io_qpairs_per_ctrlr"`
	InCapsuleDataSize     uint32 `json:"in_capsule_data_size"`
	MaxIOSize             uint32 `json:"max_io_size"`
	MaxAQDepth            uint32 `json:"max_aq_depth"`
	IobufSmallCacheSize   uint32 `json:"iobuf_small_cache_size"`
	IobufLargeCacheSize   uint32 `json:"iobuf_large_cache_size"`
	DifInsertOrStrip      bool   `json:"dif_insert_or_strip"`
	Zcopy                 bool   `json:"zcopy"`
	C2HSuccess            bool   `json:"c2h_success"`
	SockPriority          uint32 `json:"sock_priority"`
	AbortTimeoutSec       uint32 `json:"abort_timeout_sec"`
	AckTimeout            uint32 `json:"ack_timeout"`
	DataWrPoolSize        uint32 `json:"data_wr_pool_size"`
	DisableCommandPassthu bool   `json:"disable_command_passthru"`
	Kas                   uint32 `json:"kas"`
	MinKato               uint32 `json:"min_kato"`
}

func defaultTCPTransport() jsonTransport {
	return jsonTransport{Trtype: "TCP", MaxQueueDepth: 128, MaxIOQpairsPerCtrlr: 127, InCapsuleDataSize: 4096,
		MaxIOSize: 131072, MaxAQDepth: 128, IobufSmallCacheSize: 4294967295, IobufLargeCacheSize: 4294967295,
		C2HSuccess: true, AbortTimeoutSec: 1, Kas: 100, MinKato: 10000}
}

type jsonRateLimits struct {
	RwIosPerSec   uint64 `json:"rw_ios_per_sec"`
	RwMbytesPerS  uint64 `json:"rw_mbytes_per_sec"`
	RMbytesPerSec uint64 `json:"r_mbytes_per_sec"`
	WMbytesPerSec uint64 `json:"w_mbytes_per_sec"`
}

type jsonBdev struct {
	Name                      string          `json:"name"`
	Aliases                   []string        `json:"aliases"`
	ProductName               string          `json:"product_name"`
	BlockSize                 uint32          `json:"block_size"`
	NumBlocks                 uint64          `json:"num_blocks"`
	PreferredWriteAlignment   uint32          `json:"preferred_write_alignment"`
	PreferredWriteGranularity uint32          `json:"preferred_write_granularity"`
	OptimalWriteSize          uint32          `json:"optimal_write_size"`
	PreferredUnmapAlignment   uint32          `json:"preferred_unmap_alignment"`
	PreferredUnmapGranularity uint32          `json:"preferred_unmap_granularity"`
	UUID                      string          `json:"uuid"`
	NumaID                    *int            `json:"numa_id,omitempty"`
	AssignedRateLimits        jsonRateLimits  `json:"assigned_rate_limits"`
	Claimed                   bool            `json:"claimed"`
	ClaimType                 string          `json:"claim_type,omitempty"`
	Zoned                     bool            `json:"zoned"`
	SupportedIOTypes          json.RawMessage `json:"supported_io_types"`
	DriverSpecific            json.RawMessage `json:"driver_specific"`
}

// supported_io_types as recorded for each bdev kind.
var ioTypes = map[string]string{
	kindMalloc: `{"read":true,"write":true,"unmap":true,"flush":true,"reset":true,"nvme_admin":false,"nvme_io":false,"nvme_io_md":false,"write_zeroes":true,"zcopy":true,"get_zone_info":false,"zone_management":false,"zone_append":false,"compare":true,"compare_and_write":false,"abort":true,"seek_hole":false,"seek_data":false,"copy":true,"nvme_iov_md":false,"nvme_nssr":false,"write_uncorrectable":false}`,
	kindAio:    `{"read":true,"write":true,"unmap":false,"flush":true,"reset":true,"nvme_admin":false,"nvme_io":false,"nvme_io_md":false,"write_zeroes":true,"zcopy":false,"get_zone_info":false,"zone_management":false,"zone_append":false,"compare":false,"compare_and_write":false,"abort":false,"seek_hole":false,"seek_data":false,"copy":false,"nvme_iov_md":false,"nvme_nssr":false,"write_uncorrectable":false}`,
	kindLvol:   `{"read":true,"write":true,"unmap":true,"flush":false,"reset":true,"nvme_admin":false,"nvme_io":false,"nvme_io_md":false,"write_zeroes":true,"zcopy":false,"get_zone_info":false,"zone_management":false,"zone_append":false,"compare":false,"compare_and_write":false,"abort":false,"seek_hole":true,"seek_data":true,"copy":false,"nvme_iov_md":false,"nvme_nssr":false,"write_uncorrectable":false}`,
	kindNvme:   `{"read":true,"write":true,"unmap":false,"flush":true,"reset":true,"nvme_admin":true,"nvme_io":true,"nvme_io_md":false,"write_zeroes":true,"zcopy":false,"get_zone_info":false,"zone_management":false,"zone_append":false,"compare":true,"compare_and_write":true,"abort":true,"seek_hole":false,"seek_data":false,"copy":true,"nvme_iov_md":false,"nvme_nssr":false,"write_uncorrectable":false}`,
}

var productNames = map[string]string{
	kindMalloc: "Malloc disk", kindAio: "AIO disk", kindLvol: "Logical Volume", kindNvme: "NVMe disk",
}

func (f *FakeSPDK) bdevJSONLocked(b *fakeBdev) jsonBdev {
	j := jsonBdev{Name: b.name, Aliases: b.aliases, ProductName: productNames[b.kind], BlockSize: b.blockSize,
		NumBlocks: b.numBlocks, UUID: b.uuid, Claimed: b.claim != "", ClaimType: b.claim, SupportedIOTypes: json.RawMessage(ioTypes[b.kind]),
		DriverSpecific: json.RawMessage(`{}`)}
	if j.Aliases == nil {
		j.Aliases = []string{}
	}
	if b.kind != kindAio {
		n := -1
		j.NumaID = &n
	}
	switch b.kind {
	case kindLvol:
		lvs := f.lvstoreByUUIDLocked(b.lvsUUID)
		base := ""
		if lvs != nil {
			base = lvs.base
		}
		j.DriverSpecific = mustJSON(map[string]any{"lvol": map[string]any{"lvol_store_uuid": b.lvsUUID, "base_bdev": base,
			"thin_provision": b.thin, "num_allocated_clusters": 0, "snapshot": false, "clone": false, "esnap_clone": false}})
	case kindAio:
		j.DriverSpecific = mustJSON(map[string]any{"aio": map[string]any{"filename": b.filename, "block_size_override": true,
			"readonly": false, "fallocate": false, "nowait": false}})
	case kindNvme:
		j.PreferredWriteAlignment, j.PreferredWriteGranularity, j.OptimalWriteSize = 1, 1, 32
		j.PreferredUnmapAlignment, j.PreferredUnmapGranularity = 1, 1
		c := f.ctrlrByNameLocked(b.ctrlr)
		if c != nil {
			j.DriverSpecific = mustJSON(map[string]any{"nvme": []any{map[string]any{"trid": c.tridJSON(),
				"ns_data": map[string]any{"id": b.nsid, "can_share": true}}}, "mp_policy": "active_passive"})
		}
	}
	return j
}

type jsonListen struct {
	Trtype  string `json:"trtype"`
	Adrfam  string `json:"adrfam"`
	Traddr  string `json:"traddr"`
	Trsvcid string `json:"trsvcid"`
}

type jsonHost struct {
	Nqn            string `json:"nqn"`
	DhchapKey      string `json:"dhchap_key,omitempty"`
	DhchapCtrlrKey string `json:"dhchap_ctrlr_key,omitempty"`
}

type jsonNS struct {
	Nsid     uint32 `json:"nsid"`
	BdevName string `json:"bdev_name"`
	Name     string `json:"name"`
	Nguid    string `json:"nguid,omitempty"`
	Eui64    string `json:"eui64,omitempty"`
	UUID     string `json:"uuid,omitempty"`
}

type jsonDiscovery struct {
	Nqn             string       `json:"nqn"`
	Subtype         string       `json:"subtype"`
	ListenAddresses []jsonListen `json:"listen_addresses"`
	AllowAnyHost    bool         `json:"allow_any_host"`
	Hosts           []jsonHost   `json:"hosts"`
}

type jsonSubsystem struct {
	jsonDiscovery
	SerialNumber  string   `json:"serial_number"`
	ModelNumber   string   `json:"model_number"`
	MaxNamespaces uint32   `json:"max_namespaces"`
	Passthrough   bool     `json:"passthrough"`
	MinCntlid     uint16   `json:"min_cntlid"`
	MaxCntlid     uint16   `json:"max_cntlid"`
	Dmrsl         uint32   `json:"dmrsl"`
	Wzsl          uint8    `json:"wzsl"`
	Namespaces    []jsonNS `json:"namespaces"`
}

func (s *fakeSubsystem) toJSON() any {
	d := jsonDiscovery{Nqn: s.nqn, Subtype: "NVMe", ListenAddresses: append([]jsonListen{}, s.listeners...),
		AllowAnyHost: s.allowAny, Hosts: []jsonHost{}}
	d.Hosts = append(d.Hosts, s.hosts...)
	if s.discovery {
		d.Subtype = "Discovery"
		return d
	}
	out := jsonSubsystem{jsonDiscovery: d, SerialNumber: s.serial, ModelNumber: s.model, MaxNamespaces: s.maxNS,
		MinCntlid: 1, MaxCntlid: 65519, Dmrsl: 2097152, Wzsl: 12, Namespaces: []jsonNS{}}
	for _, n := range s.namespaces {
		out.Namespaces = append(out.Namespaces, n)
	}
	return out
}

func (c *fakeCtrlr) tridJSON() map[string]any {
	m := map[string]any{"trtype": strings.ToUpper(c.trid.Trtype), "traddr": c.trid.Traddr}
	if !strings.EqualFold(c.trid.Trtype, "pcie") {
		m["adrfam"] = adrfamName(c.trid.Adrfam)
		m["trsvcid"] = c.trid.Trsvcid
		m["subnqn"] = c.trid.Subnqn
	}
	return m
}

func adrfamName(a string) string {
	switch strings.ToLower(a) {
	case "", "ipv4":
		return "IPv4"
	case "ipv6":
		return "IPv6"
	}
	return a
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(fmt.Sprintf(`{"spdktest_error":%q}`, err.Error()))
	}
	return b
}

// nguidOf derives the NGUID SPDK reports for a namespace added without one:
// the bdev UUID's 16 bytes as upper-case hex (recording 09).
func nguidOf(uuid string) string {
	return strings.ToUpper(strings.ReplaceAll(uuid, "-", ""))
}
