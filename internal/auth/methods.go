package auth

// Methods is the one table from each gRPC method of kvtier.v1.Master to the
// least role that may call it (a test in master checks every method of the
// service descriptor has an entry). Some calls ask for more by their
// content, checked by the master's interceptor: Remove and BatchRemove with
// force, and a Heartbeat announcing storage (segments, disk, NVMe, offload
// slots), need the appliance role at least for the latter and admin for
// the former; ListObjects with all_tenants is refused to a client confined
// to a tenant.
var Methods = map[string]Role{
	"/kvtier.v1.Master/PutStart":            RoleClient,
	"/kvtier.v1.Master/PutEnd":              RoleClient,
	"/kvtier.v1.Master/PutRevoke":           RoleClient,
	"/kvtier.v1.Master/GetReplicaList":      RoleClient,
	"/kvtier.v1.Master/Exist":               RoleClient,
	"/kvtier.v1.Master/Remove":              RoleClient, // force: admin
	"/kvtier.v1.Master/BatchPutStart":       RoleClient,
	"/kvtier.v1.Master/BatchPutEnd":         RoleClient,
	"/kvtier.v1.Master/BatchPutRevoke":      RoleClient,
	"/kvtier.v1.Master/BatchGetReplicaList": RoleClient,
	"/kvtier.v1.Master/BatchExist":          RoleClient,
	"/kvtier.v1.Master/BatchRemove":         RoleClient, // force: admin
	"/kvtier.v1.Master/Heartbeat":           RoleClient, // announcing storage: appliance
	"/kvtier.v1.Master/GetObject":           RoleClient,
	"/kvtier.v1.Master/ListObjects":         RoleClient,
	"/kvtier.v1.Master/Stats":               RoleClient,
	"/kvtier.v1.Master/GetTiers":            RoleClient,
	"/kvtier.v1.Master/ListSegments":        RoleClient,
	"/kvtier.v1.Master/ListClients":         RoleClient,
	"/kvtier.v1.Master/PutTicket":           RoleClient, // authorized as PutStart (tenant, client ID)

	"/kvtier.v1.Master/MountSegment":        RoleAppliance,
	"/kvtier.v1.Master/UnmountSegment":      RoleAppliance, // its own segments (session); others: admin
	"/kvtier.v1.Master/OffloadDone":         RoleAppliance,
	"/kvtier.v1.Master/BatchOffloadDone":    RoleAppliance,
	"/kvtier.v1.Master/TakeOffload":         RoleAppliance,
	"/kvtier.v1.Master/RegisterDiskObjects": RoleAppliance,
	"/kvtier.v1.Master/DropBucket":          RoleAppliance,
	"/kvtier.v1.Master/TakeRemovals":        RoleAppliance,
	"/kvtier.v1.Master/TakeDramRecords":     RoleAppliance, // DRAM directory (master rebuild)
	"/kvtier.v1.Master/RegisterDramObjects": RoleAppliance,

	"/kvtier.v1.Master/RemoveByRegex": RoleAdmin,
	"/kvtier.v1.Master/RemoveAll":     RoleAdmin,
	"/kvtier.v1.Master/UpdateTiers":   RoleAdmin,
	"/kvtier.v1.Master/WatchEvents":   RoleAdmin, // every tenant's keys
}
