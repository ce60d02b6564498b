package spdk

import "encoding/json"

// Parameter and result types. JSON names are SPDK v26.05's (schema/schema.json,
// checked against the lab recordings). A field is omitempty where SPDK treats
// an absent member as its default; pointers are used where the zero value is
// a meaningful non-default (e.g. c2h_success=false).

// Version is the result of spdk_get_version.
type Version struct {
	Version string `json:"version"`
	Fields  struct {
		Major  int    `json:"major"`
		Minor  int    `json:"minor"`
		Patch  int    `json:"patch"`
		Suffix string `json:"suffix"`
	} `json:"fields"`
}

// RPCGetMethodsParams are the params of rpc_get_methods.
type RPCGetMethodsParams struct {
	Current        bool `json:"current,omitempty"`
	IncludeAliases bool `json:"include_aliases,omitempty"`
}

// BdevGetBdevsParams are the params of bdev_get_bdevs. Name may be a bdev
// name, an alias (e.g. "lvs0/vol0") or a UUID; empty lists every bdev.
type BdevGetBdevsParams struct {
	Name    string `json:"name,omitempty"`
	Timeout uint64 `json:"timeout,omitempty"` // ms to wait for the bdev to appear
}

// Bdev is one element of bdev_get_bdevs' result (the fields kvtier reads;
// DriverSpecific is kept raw).
type Bdev struct {
	Name             string          `json:"name"`
	Aliases          []string        `json:"aliases"`
	ProductName      string          `json:"product_name"`
	BlockSize        uint32          `json:"block_size"`
	NumBlocks        uint64          `json:"num_blocks"`
	UUID             string          `json:"uuid,omitempty"`
	NumaID           int             `json:"numa_id,omitempty"`
	Claimed          bool            `json:"claimed"`
	ClaimType        string          `json:"claim_type,omitempty"`
	Zoned            bool            `json:"zoned"`
	SupportedIOTypes map[string]bool `json:"supported_io_types,omitempty"`
	DriverSpecific   json.RawMessage `json:"driver_specific,omitempty"`
}

// Size returns the bdev's size in bytes.
func (b *Bdev) Size() uint64 { return uint64(b.BlockSize) * b.NumBlocks }

// HasName reports whether n is the bdev's name, one of its aliases or its UUID.
func (b *Bdev) HasName(n string) bool {
	if n == b.Name || (b.UUID != "" && n == b.UUID) {
		return true
	}
	for _, a := range b.Aliases {
		if a == n {
			return true
		}
	}
	return false
}

// BdevGetIostatParams are the params of bdev_get_iostat.
type BdevGetIostatParams struct {
	Name       string   `json:"name,omitempty"`
	Names      []string `json:"names,omitempty"`
	PerChannel bool     `json:"per_channel,omitempty"`
	ResetMode  string   `json:"reset_mode,omitempty"` // all, maxmin, error, none
}

// IOStat is the result of bdev_get_iostat. Latencies are in ticks; divide by
// TickRate for seconds.
type IOStat struct {
	TickRate uint64       `json:"tick_rate"`
	Ticks    uint64       `json:"ticks"`
	Bdevs    []BdevIOStat `json:"bdevs"`
}

// BdevIOStat is one bdev's counters.
type BdevIOStat struct {
	Name                string          `json:"name"`
	BytesRead           uint64          `json:"bytes_read"`
	NumReadOps          uint64          `json:"num_read_ops"`
	BytesWritten        uint64          `json:"bytes_written"`
	NumWriteOps         uint64          `json:"num_write_ops"`
	BytesUnmapped       uint64          `json:"bytes_unmapped"`
	NumUnmapOps         uint64          `json:"num_unmap_ops"`
	ReadLatencyTicks    uint64          `json:"read_latency_ticks"`
	MaxReadLatencyTicks uint64          `json:"max_read_latency_ticks"`
	MinReadLatencyTicks uint64          `json:"min_read_latency_ticks"`
	WriteLatencyTicks   uint64          `json:"write_latency_ticks"`
	MaxWriteLatency     uint64          `json:"max_write_latency_ticks"`
	MinWriteLatency     uint64          `json:"min_write_latency_ticks"`
	UnmapLatencyTicks   uint64          `json:"unmap_latency_ticks"`
	IOError             json.RawMessage `json:"io_error,omitempty"`
}

// BdevMallocCreateParams are the params of bdev_malloc_create.
type BdevMallocCreateParams struct {
	Name              string `json:"name,omitempty"`
	NumBlocks         uint64 `json:"num_blocks"`
	BlockSize         uint32 `json:"block_size"`
	UUID              string `json:"uuid,omitempty"`
	OptimalIOBoundary uint32 `json:"optimal_io_boundary,omitempty"`
	MDSize            uint32 `json:"md_size,omitempty"`
	PhysicalBlockSize uint32 `json:"physical_block_size,omitempty"`
}

// BdevAioCreateParams are the params of bdev_aio_create.
type BdevAioCreateParams struct {
	Name      string `json:"name"`
	Filename  string `json:"filename"`
	BlockSize uint32 `json:"block_size,omitempty"` // auto-detected when 0
	Readonly  bool   `json:"readonly,omitempty"`
	Fallocate bool   `json:"fallocate,omitempty"`
	UUID      string `json:"uuid,omitempty"`
}

// BdevUringCreateParams are the params of bdev_uring_create (present only in
// SPDK built --with-uring).
type BdevUringCreateParams struct {
	Name      string `json:"name"`
	Filename  string `json:"filename"`
	BlockSize uint32 `json:"block_size,omitempty"`
	UUID      string `json:"uuid,omitempty"`
}

// NameParams is {"name": ...}: the params of the bdev delete methods and of
// bdev_lvol_delete.
type NameParams struct {
	Name string `json:"name"`
}

// BdevNvmeAttachControllerParams are the params of bdev_nvme_attach_controller.
// Trtype is "pcie" (Traddr a PCI BDF such as 0000:5e:00.0), "tcp" or "rdma".
type BdevNvmeAttachControllerParams struct {
	Name                    string `json:"name"`
	Trtype                  string `json:"trtype"`
	Adrfam                  string `json:"adrfam,omitempty"`
	Traddr                  string `json:"traddr"`
	Trsvcid                 string `json:"trsvcid,omitempty"`
	Subnqn                  string `json:"subnqn,omitempty"`
	Hostnqn                 string `json:"hostnqn,omitempty"`
	Hostaddr                string `json:"hostaddr,omitempty"`
	Hostsvcid               string `json:"hostsvcid,omitempty"`
	Hdgst                   bool   `json:"hdgst,omitempty"`
	Ddgst                   bool   `json:"ddgst,omitempty"`
	Multipath               string `json:"multipath,omitempty"`
	NumIOQueues             uint32 `json:"num_io_queues,omitempty"`
	CtrlrLossTimeoutSec     *int   `json:"ctrlr_loss_timeout_sec,omitempty"`
	ReconnectDelaySec       uint32 `json:"reconnect_delay_sec,omitempty"`
	FastIOFailTimeoutSec    uint32 `json:"fast_io_fail_timeout_sec,omitempty"`
	FabricsConnectTimeoutUs uint64 `json:"fabrics_connect_timeout_us,omitempty"`
}

// BdevNvmeDetachControllerParams are the params of bdev_nvme_detach_controller;
// the optional trid fields remove only one path.
type BdevNvmeDetachControllerParams struct {
	Name      string `json:"name"`
	Trtype    string `json:"trtype,omitempty"`
	Traddr    string `json:"traddr,omitempty"`
	Adrfam    string `json:"adrfam,omitempty"`
	Trsvcid   string `json:"trsvcid,omitempty"`
	Subnqn    string `json:"subnqn,omitempty"`
	Hostaddr  string `json:"hostaddr,omitempty"`
	Hostsvcid string `json:"hostsvcid,omitempty"`
}

// TransportID is an NVMe transport identifier as SPDK prints it.
type TransportID struct {
	Trtype  string `json:"trtype"`
	Adrfam  string `json:"adrfam,omitempty"`
	Traddr  string `json:"traddr"`
	Trsvcid string `json:"trsvcid,omitempty"`
	Subnqn  string `json:"subnqn,omitempty"`
}

// NvmeController is one element of bdev_nvme_get_controllers' result.
type NvmeController struct {
	Name   string `json:"name"`
	Ctrlrs []struct {
		State  string      `json:"state"`
		Trid   TransportID `json:"trid"`
		Cntlid int         `json:"cntlid"`
		Host   struct {
			Nqn   string `json:"nqn"`
			Addr  string `json:"addr"`
			Svcid string `json:"svcid"`
		} `json:"host"`
	} `json:"ctrlrs"`
}

// BdevLvolCreateLvstoreParams are the params of bdev_lvol_create_lvstore.
type BdevLvolCreateLvstoreParams struct {
	BdevName                  string `json:"bdev_name"`
	LvsName                   string `json:"lvs_name"`
	ClusterSz                 uint32 `json:"cluster_sz,omitempty"` // bytes; default 4 MiB
	ClearMethod               string `json:"clear_method,omitempty"`
	NumMdPagesPerClusterRatio uint32 `json:"num_md_pages_per_cluster_ratio,omitempty"`
}

// LvstoreSelector picks an lvstore by UUID or name (exactly one, or neither
// to list all).
type LvstoreSelector struct {
	UUID    string `json:"uuid,omitempty"`
	LvsName string `json:"lvs_name,omitempty"`
}

// Lvstore is one element of bdev_lvol_get_lvstores' result.
type Lvstore struct {
	UUID              string `json:"uuid"`
	Name              string `json:"name"`
	BaseBdev          string `json:"base_bdev"`
	TotalDataClusters uint64 `json:"total_data_clusters"`
	FreeClusters      uint64 `json:"free_clusters"`
	BlockSize         uint32 `json:"block_size"`
	ClusterSize       uint64 `json:"cluster_size"`
	MaxGrowableSize   uint64 `json:"max_growable_size,omitempty"`
}

// BdevLvolCreateParams are the params of bdev_lvol_create (exactly one of
// LvsName / UUID).
type BdevLvolCreateParams struct {
	LvolName      string `json:"lvol_name"`
	SizeInMiB     uint64 `json:"size_in_mib"`
	LvsName       string `json:"lvs_name,omitempty"`
	UUID          string `json:"uuid,omitempty"`
	ThinProvision bool   `json:"thin_provision,omitempty"`
	ClearMethod   string `json:"clear_method,omitempty"`
}

// NvmfCreateTransportParams are the params of nvmf_create_transport. Zero
// fields take SPDK's defaults (TCP: queue depth 128, 127 I/O qpairs, 4 KiB
// in-capsule, 128 KiB max I/O).
type NvmfCreateTransportParams struct {
	Trtype              string `json:"trtype"`
	TgtName             string `json:"tgt_name,omitempty"`
	MaxQueueDepth       uint32 `json:"max_queue_depth,omitempty"`
	MaxIOQpairsPerCtrlr uint32 `json:"max_io_qpairs_per_ctrlr,omitempty"`
	InCapsuleDataSize   uint32 `json:"in_capsule_data_size,omitempty"`
	MaxIOSize           uint32 `json:"max_io_size,omitempty"`
	IOUnitSize          uint32 `json:"io_unit_size,omitempty"`
	MaxAQDepth          uint32 `json:"max_aq_depth,omitempty"`
	NumSharedBuffers    uint32 `json:"num_shared_buffers,omitempty"`
	BufCacheSize        uint32 `json:"buf_cache_size,omitempty"`
	Zcopy               bool   `json:"zcopy,omitempty"`
	C2HSuccess          *bool  `json:"c2h_success,omitempty"`
	SockPriority        uint32 `json:"sock_priority,omitempty"`
	AbortTimeoutSec     uint32 `json:"abort_timeout_sec,omitempty"`
}

// Transport is one element of nvmf_get_transports' result.
type Transport struct {
	Trtype              string `json:"trtype"`
	MaxQueueDepth       uint32 `json:"max_queue_depth"`
	MaxIOQpairsPerCtrlr uint32 `json:"max_io_qpairs_per_ctrlr"`
	InCapsuleDataSize   uint32 `json:"in_capsule_data_size"`
	MaxIOSize           uint32 `json:"max_io_size"`
	MaxAQDepth          uint32 `json:"max_aq_depth"`
	Zcopy               bool   `json:"zcopy"`
	C2HSuccess          bool   `json:"c2h_success"`
	SockPriority        uint32 `json:"sock_priority"`
	AbortTimeoutSec     uint32 `json:"abort_timeout_sec"`
	Kas                 uint32 `json:"kas"`
	MinKato             uint32 `json:"min_kato"`
}

// NvmfGetTransportsParams are the optional params of nvmf_get_transports.
type NvmfGetTransportsParams struct {
	Trtype  string `json:"trtype,omitempty"`
	TgtName string `json:"tgt_name,omitempty"`
}

// NvmfCreateSubsystemParams are the params of nvmf_create_subsystem.
type NvmfCreateSubsystemParams struct {
	Nqn           string `json:"nqn"`
	AllowAnyHost  bool   `json:"allow_any_host,omitempty"`
	SerialNumber  string `json:"serial_number,omitempty"` // default 00000000000000000000
	ModelNumber   string `json:"model_number,omitempty"`  // default "SPDK bdev Controller"
	MaxNamespaces uint32 `json:"max_namespaces,omitempty"`
	AnaReporting  bool   `json:"ana_reporting,omitempty"`
	MinCntlid     uint16 `json:"min_cntlid,omitempty"`
	MaxCntlid     uint16 `json:"max_cntlid,omitempty"`
	TgtName       string `json:"tgt_name,omitempty"`
}

// NqnParams is {"nqn": ...}: nvmf_delete_subsystem,
// nvmf_subsystem_get_controllers.
type NqnParams struct {
	Nqn string `json:"nqn"`
}

// NamespaceParams is the "namespace" object of nvmf_subsystem_add_ns.
type NamespaceParams struct {
	BdevName      string `json:"bdev_name"`
	Nsid          uint32 `json:"nsid,omitempty"` // 0 = lowest free
	UUID          string `json:"uuid,omitempty"`
	Nguid         string `json:"nguid,omitempty"` // 32 hex digits
	Eui64         string `json:"eui64,omitempty"` // 16 hex digits
	PtplFile      string `json:"ptpl_file,omitempty"`
	Anagrpid      uint32 `json:"anagrpid,omitempty"`
	NoAutoVisible bool   `json:"no_auto_visible,omitempty"`
}

// NvmfSubsystemAddNsParams are the params of nvmf_subsystem_add_ns.
type NvmfSubsystemAddNsParams struct {
	Nqn       string          `json:"nqn"`
	Namespace NamespaceParams `json:"namespace"`
	TgtName   string          `json:"tgt_name,omitempty"`
}

// NvmfSubsystemRemoveNsParams are the params of nvmf_subsystem_remove_ns.
type NvmfSubsystemRemoveNsParams struct {
	Nqn     string `json:"nqn"`
	Nsid    uint32 `json:"nsid"`
	TgtName string `json:"tgt_name,omitempty"`
}

// ListenAddress is a listener's transport address. Trtype "TCP", Adrfam
// "IPv4"/"IPv6", Trsvcid the port as a string.
type ListenAddress struct {
	Trtype  string `json:"trtype"`
	Adrfam  string `json:"adrfam,omitempty"`
	Traddr  string `json:"traddr"`
	Trsvcid string `json:"trsvcid,omitempty"`
}

// NvmfListenerParams are the params of nvmf_subsystem_add_listener and
// nvmf_subsystem_remove_listener.
type NvmfListenerParams struct {
	Nqn           string        `json:"nqn"`
	ListenAddress ListenAddress `json:"listen_address"`
	TgtName       string        `json:"tgt_name,omitempty"`
	SecureChannel bool          `json:"secure_channel,omitempty"`
	AnaState      string        `json:"ana_state,omitempty"`
}

// NvmfHostParams are the params of nvmf_subsystem_add_host / remove_host.
type NvmfHostParams struct {
	Nqn     string `json:"nqn"`
	Host    string `json:"host"`
	TgtName string `json:"tgt_name,omitempty"`
	Psk     string `json:"psk,omitempty"`
	// DhchapKey and DhchapCtrlrKey name keyring keys (keyring_file_add_key):
	// the host's DH-HMAC-CHAP secret, and the controller's for hosts that
	// authenticate the controller too. Also the params of
	// nvmf_subsystem_set_keys.
	DhchapKey      string `json:"dhchap_key,omitempty"`
	DhchapCtrlrKey string `json:"dhchap_ctrlr_key,omitempty"`
}

// KeyringFileKeyParams are the params of keyring_file_add_key (Path:
// absolute, a file of mode 0600 owned by SPDK's user, read by SPDK each time
// the key is used) and of keyring_file_remove_key (Name only).
type KeyringFileKeyParams struct {
	Name string `json:"name"`
	Path string `json:"path,omitempty"`
}

// Key is one entry of keyring_get_keys.
type Key struct {
	Name    string `json:"name"`
	Module  string `json:"module"` // "keyring_file", "keyring_linux"
	Removed bool   `json:"removed"`
	Probed  bool   `json:"probed"`
	Refcnt  int    `json:"refcnt"`
	Path    string `json:"path,omitempty"` // keyring_file keys
}

// NvmfGetSubsystemsParams are the optional params of nvmf_get_subsystems; an
// unknown Nqn is error -19.
type NvmfGetSubsystemsParams struct {
	Nqn     string `json:"nqn,omitempty"`
	TgtName string `json:"tgt_name,omitempty"`
}

// Subsystem is one element of nvmf_get_subsystems' result.
type Subsystem struct {
	Nqn             string          `json:"nqn"`
	Subtype         string          `json:"subtype"` // "NVMe" or "Discovery"
	ListenAddresses []ListenAddress `json:"listen_addresses"`
	AllowAnyHost    bool            `json:"allow_any_host"`
	Hosts           []struct {
		Nqn            string `json:"nqn"`
		DhchapKey      string `json:"dhchap_key,omitempty"`
		DhchapCtrlrKey string `json:"dhchap_ctrlr_key,omitempty"`
	} `json:"hosts"`
	SerialNumber  string               `json:"serial_number,omitempty"`
	ModelNumber   string               `json:"model_number,omitempty"`
	MaxNamespaces uint32               `json:"max_namespaces,omitempty"`
	MinCntlid     uint16               `json:"min_cntlid,omitempty"`
	MaxCntlid     uint16               `json:"max_cntlid,omitempty"`
	Namespaces    []SubsystemNamespace `json:"namespaces,omitempty"`
}

// SubsystemNamespace is a namespace of a Subsystem. BdevName is the bdev's
// real name (for an lvol its UUID, not the alias it was added by).
type SubsystemNamespace struct {
	Nsid     uint32 `json:"nsid"`
	BdevName string `json:"bdev_name"`
	Name     string `json:"name"`
	Nguid    string `json:"nguid,omitempty"`
	Eui64    string `json:"eui64,omitempty"`
	UUID     string `json:"uuid,omitempty"`
}

// SubsystemController is one element of nvmf_subsystem_get_controllers.
type SubsystemController struct {
	Cntlid      int    `json:"cntlid"`
	Cntrltype   string `json:"cntrltype"`
	Hostnqn     string `json:"hostnqn"`
	Hostid      string `json:"hostid"`
	NumIOQpairs int    `json:"num_io_qpairs"`
}

// NvmfStats is the result of nvmf_get_stats.
type NvmfStats struct {
	TickRate   uint64 `json:"tick_rate"`
	PollGroups []struct {
		Name                      string `json:"name"`
		AdminQpairs               uint64 `json:"admin_qpairs"`
		IOQpairs                  uint64 `json:"io_qpairs"`
		CurrentAdminQpairs        uint64 `json:"current_admin_qpairs"`
		CurrentIOQpairs           uint64 `json:"current_io_qpairs"`
		CurrentUnassociatedQpairs uint64 `json:"current_unassociated_qpairs"`
		PendingBdevIO             uint64 `json:"pending_bdev_io"`
		CompletedNvmeIO           uint64 `json:"completed_nvme_io"`
		Transports                []struct {
			Trtype string `json:"trtype"`
		} `json:"transports"`
	} `json:"poll_groups"`
}

// KillInstanceParams are the params of spdk_kill_instance.
type KillInstanceParams struct {
	SigName string `json:"sig_name"`
}
