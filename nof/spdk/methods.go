package spdk

import (
	"context"
	"fmt"
)

// Typed wrappers, one per SPDK method. Each is a thin Call with the method's
// parameter and result types; errors are as Call's.

// SpdkGetVersion calls spdk_get_version.
func (c *Client) SpdkGetVersion(ctx context.Context) (Version, error) {
	var v Version
	err := c.Call(ctx, "spdk_get_version", nil, &v)
	return v, err
}

// FrameworkWaitInit calls framework_wait_init (blocks until SPDK's subsystems
// are initialised; safe at any time).
func (c *Client) FrameworkWaitInit(ctx context.Context) error {
	return c.callTrue(ctx, "framework_wait_init", nil)
}

// FrameworkStartInit calls framework_start_init (only for an app started with
// --wait-for-rpc, only once; a second call is -1).
func (c *Client) FrameworkStartInit(ctx context.Context) error {
	return c.callTrue(ctx, "framework_start_init", nil)
}

// RPCGetMethods calls rpc_get_methods.
func (c *Client) RPCGetMethods(ctx context.Context, p RPCGetMethodsParams) ([]string, error) {
	var out []string
	err := c.Call(ctx, "rpc_get_methods", p, &out)
	return out, err
}

// SpdkKillInstance calls spdk_kill_instance.
func (c *Client) SpdkKillInstance(ctx context.Context, sig string) error {
	return c.callTrue(ctx, "spdk_kill_instance", KillInstanceParams{SigName: sig})
}

// BdevGetBdevs calls bdev_get_bdevs. An unknown name is *RPCError -19.
func (c *Client) BdevGetBdevs(ctx context.Context, p BdevGetBdevsParams) ([]Bdev, error) {
	var out []Bdev
	err := c.Call(ctx, "bdev_get_bdevs", omitZero(p), &out)
	return out, err
}

// BdevGetIostat calls bdev_get_iostat.
func (c *Client) BdevGetIostat(ctx context.Context, p BdevGetIostatParams) (IOStat, error) {
	var out IOStat
	var params any = p
	if p.Name == "" && len(p.Names) == 0 && !p.PerChannel && p.ResetMode == "" {
		params = nil
	}
	err := c.Call(ctx, "bdev_get_iostat", params, &out)
	return out, err
}

// BdevMallocCreate calls bdev_malloc_create and returns the bdev name.
func (c *Client) BdevMallocCreate(ctx context.Context, p BdevMallocCreateParams) (string, error) {
	var name string
	err := c.Call(ctx, "bdev_malloc_create", p, &name)
	return name, err
}

// BdevMallocDelete calls bdev_malloc_delete.
func (c *Client) BdevMallocDelete(ctx context.Context, name string) error {
	return c.callTrue(ctx, "bdev_malloc_delete", NameParams{Name: name})
}

// BdevAioCreate calls bdev_aio_create and returns the bdev name.
func (c *Client) BdevAioCreate(ctx context.Context, p BdevAioCreateParams) (string, error) {
	var name string
	err := c.Call(ctx, "bdev_aio_create", p, &name)
	return name, err
}

// BdevAioDelete calls bdev_aio_delete.
func (c *Client) BdevAioDelete(ctx context.Context, name string) error {
	return c.callTrue(ctx, "bdev_aio_delete", NameParams{Name: name})
}

// BdevUringCreate calls bdev_uring_create and returns the bdev name.
func (c *Client) BdevUringCreate(ctx context.Context, p BdevUringCreateParams) (string, error) {
	var name string
	err := c.Call(ctx, "bdev_uring_create", p, &name)
	return name, err
}

// BdevUringDelete calls bdev_uring_delete.
func (c *Client) BdevUringDelete(ctx context.Context, name string) error {
	return c.callTrue(ctx, "bdev_uring_delete", NameParams{Name: name})
}

// BdevNvmeAttachController calls bdev_nvme_attach_controller and returns the
// names of the bdevs created (one per namespace, "<name>n<nsid>"). SPDK may
// return an empty list, e.g. when the namespaces' UUIDs collide with bdevs
// already present.
func (c *Client) BdevNvmeAttachController(ctx context.Context, p BdevNvmeAttachControllerParams) ([]string, error) {
	var out []string
	err := c.Call(ctx, "bdev_nvme_attach_controller", p, &out)
	return out, err
}

// BdevNvmeDetachController calls bdev_nvme_detach_controller.
func (c *Client) BdevNvmeDetachController(ctx context.Context, p BdevNvmeDetachControllerParams) error {
	return c.callTrue(ctx, "bdev_nvme_detach_controller", p)
}

// BdevNvmeGetControllers calls bdev_nvme_get_controllers (name "" = all).
func (c *Client) BdevNvmeGetControllers(ctx context.Context, name string) ([]NvmeController, error) {
	var out []NvmeController
	var p any
	if name != "" {
		p = NameParams{Name: name}
	}
	err := c.Call(ctx, "bdev_nvme_get_controllers", p, &out)
	return out, err
}

// BdevLvolCreateLvstore calls bdev_lvol_create_lvstore and returns its UUID.
func (c *Client) BdevLvolCreateLvstore(ctx context.Context, p BdevLvolCreateLvstoreParams) (string, error) {
	var uuid string
	err := c.Call(ctx, "bdev_lvol_create_lvstore", p, &uuid)
	return uuid, err
}

// BdevLvolGetLvstores calls bdev_lvol_get_lvstores.
func (c *Client) BdevLvolGetLvstores(ctx context.Context, sel LvstoreSelector) ([]Lvstore, error) {
	var out []Lvstore
	err := c.Call(ctx, "bdev_lvol_get_lvstores", omitZero(sel), &out)
	return out, err
}

// BdevLvolDeleteLvstore calls bdev_lvol_delete_lvstore.
func (c *Client) BdevLvolDeleteLvstore(ctx context.Context, sel LvstoreSelector) error {
	return c.callTrue(ctx, "bdev_lvol_delete_lvstore", sel)
}

// BdevLvolCreate calls bdev_lvol_create and returns the lvol's UUID (its bdev
// name; "<lvs_name>/<lvol_name>" is an alias).
func (c *Client) BdevLvolCreate(ctx context.Context, p BdevLvolCreateParams) (string, error) {
	var uuid string
	err := c.Call(ctx, "bdev_lvol_create", p, &uuid)
	return uuid, err
}

// BdevLvolDelete calls bdev_lvol_delete (name = UUID or alias).
func (c *Client) BdevLvolDelete(ctx context.Context, name string) error {
	return c.callTrue(ctx, "bdev_lvol_delete", NameParams{Name: name})
}

// NvmfCreateTransport calls nvmf_create_transport. A second transport of the
// same type is *RPCError -32603 "Transport type 'TCP' already exists".
func (c *Client) NvmfCreateTransport(ctx context.Context, p NvmfCreateTransportParams) error {
	return c.callTrue(ctx, "nvmf_create_transport", p)
}

// NvmfGetTransports calls nvmf_get_transports.
func (c *Client) NvmfGetTransports(ctx context.Context, p NvmfGetTransportsParams) ([]Transport, error) {
	var out []Transport
	err := c.Call(ctx, "nvmf_get_transports", omitZero(p), &out)
	return out, err
}

// NvmfCreateSubsystem calls nvmf_create_subsystem.
func (c *Client) NvmfCreateSubsystem(ctx context.Context, p NvmfCreateSubsystemParams) error {
	return c.callTrue(ctx, "nvmf_create_subsystem", p)
}

// NvmfDeleteSubsystem calls nvmf_delete_subsystem.
func (c *Client) NvmfDeleteSubsystem(ctx context.Context, nqn string) error {
	return c.callTrue(ctx, "nvmf_delete_subsystem", NqnParams{Nqn: nqn})
}

// NvmfSubsystemAddNs calls nvmf_subsystem_add_ns and returns the NSID.
func (c *Client) NvmfSubsystemAddNs(ctx context.Context, p NvmfSubsystemAddNsParams) (uint32, error) {
	var nsid uint32
	err := c.Call(ctx, "nvmf_subsystem_add_ns", p, &nsid)
	return nsid, err
}

// NvmfSubsystemRemoveNs calls nvmf_subsystem_remove_ns.
func (c *Client) NvmfSubsystemRemoveNs(ctx context.Context, p NvmfSubsystemRemoveNsParams) error {
	return c.callTrue(ctx, "nvmf_subsystem_remove_ns", p)
}

// NvmfSubsystemAddListener calls nvmf_subsystem_add_listener.
func (c *Client) NvmfSubsystemAddListener(ctx context.Context, p NvmfListenerParams) error {
	return c.callTrue(ctx, "nvmf_subsystem_add_listener", p)
}

// NvmfSubsystemRemoveListener calls nvmf_subsystem_remove_listener.
func (c *Client) NvmfSubsystemRemoveListener(ctx context.Context, p NvmfListenerParams) error {
	return c.callTrue(ctx, "nvmf_subsystem_remove_listener", p)
}

// NvmfSubsystemAddHost calls nvmf_subsystem_add_host.
func (c *Client) NvmfSubsystemAddHost(ctx context.Context, p NvmfHostParams) error {
	return c.callTrue(ctx, "nvmf_subsystem_add_host", p)
}

// NvmfSubsystemRemoveHost calls nvmf_subsystem_remove_host.
func (c *Client) NvmfSubsystemRemoveHost(ctx context.Context, p NvmfHostParams) error {
	return c.callTrue(ctx, "nvmf_subsystem_remove_host", p)
}

// NvmfGetSubsystems calls nvmf_get_subsystems.
func (c *Client) NvmfGetSubsystems(ctx context.Context, p NvmfGetSubsystemsParams) ([]Subsystem, error) {
	var out []Subsystem
	err := c.Call(ctx, "nvmf_get_subsystems", omitZero(p), &out)
	return out, err
}

// NvmfSubsystemGetControllers calls nvmf_subsystem_get_controllers.
func (c *Client) NvmfSubsystemGetControllers(ctx context.Context, nqn string) ([]SubsystemController, error) {
	var out []SubsystemController
	err := c.Call(ctx, "nvmf_subsystem_get_controllers", NqnParams{Nqn: nqn}, &out)
	return out, err
}

// NvmfGetStats calls nvmf_get_stats.
func (c *Client) NvmfGetStats(ctx context.Context) (NvmfStats, error) {
	var out NvmfStats
	err := c.Call(ctx, "nvmf_get_stats", nil, &out)
	return out, err
}

// KeyringFileAddKey adds a keyring_file key (error -17 if the name exists).
func (c *Client) KeyringFileAddKey(ctx context.Context, p KeyringFileKeyParams) error {
	return c.callTrue(ctx, "keyring_file_add_key", p)
}

// KeyringFileRemoveKey removes a keyring_file key (users keep it until they
// drop it).
func (c *Client) KeyringFileRemoveKey(ctx context.Context, name string) error {
	return c.callTrue(ctx, "keyring_file_remove_key", KeyringFileKeyParams{Name: name})
}

// KeyringGetKeys lists the keyring's keys.
func (c *Client) KeyringGetKeys(ctx context.Context) ([]Key, error) {
	var out []Key
	err := c.Call(ctx, "keyring_get_keys", nil, &out)
	return out, err
}

// NvmfSubsystemSetKeys changes the DH-HMAC-CHAP keys of a host already
// allowed on a subsystem (keys omitted are cleared).
func (c *Client) NvmfSubsystemSetKeys(ctx context.Context, p NvmfHostParams) error {
	return c.callTrue(ctx, "nvmf_subsystem_set_keys", p)
}

// callTrue calls a method whose success result is the boolean true.
func (c *Client) callTrue(ctx context.Context, method string, params any) error {
	var ok bool
	if err := c.Call(ctx, method, params, &ok); err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s: result is not true", ErrBadReply, method)
	}
	return nil
}

// omitZero turns a zero params struct into nil so that no params member is
// sent (as SPDK's own tools do for a call without arguments).
func omitZero[T comparable](p T) any {
	var zero T
	if p == zero {
		return nil
	}
	return p
}
