//go:build cgo

package main

import "github.com/kvtier/kvtier/kverr"

// Return codes of the C ABI: Mooncake Store's ErrorCode values
// (mooncake-store/include/types.h), so a C or Python caller written against
// Mooncake reads kvtier's refusals unchanged. kvtier_store.h defines them as
// MOONCAKE_ERROR_*; TestCodeTable checks the two agree.
const (
	codeOK                         = 0
	codeInternalError              = -1
	codeSegmentNotFound            = -101
	codeSegmentAlreadyExists       = -102
	codeClientNotFound             = -103
	codeNoAvailableHandle          = -200
	codeInvalidKey                 = -400
	codeInvalidParams              = -600
	codeIllegalClient              = -601
	codeReplicaIsNotReady          = -703
	codeObjectNotFound             = -704
	codeObjectAlreadyExists        = -705
	codeObjectHasLease             = -706
	codeLeaseExpired               = -707
	codeTransferFail               = -800
	codeChecksumMismatch           = -801
	codeRPCFail                    = -900
	codeUnavailableInCurrentStatus = -1010
	codeFileReadFail               = -1102
	codeFileWriteFail              = -1103
)

// mooncakeCodes is the one table from kvtier's codes to the C ABI's. Codes
// Mooncake has no name for map to the Mooncake code a caller should treat
// them as: a full quota or the object-count limit is "no room, back off"
// (NO_AVAILABLE_HANDLE), a refused token is ILLEGAL_CLIENT, a master that is
// not the leader is an RPC failure to retry, a value over the size limit is
// a bad parameter.
var mooncakeCodes = map[kverr.Code]int{
	kverr.OK:                         codeOK,
	kverr.InternalError:              codeInternalError,
	kverr.InvalidParams:              codeInvalidParams,
	kverr.InvalidKey:                 codeInvalidKey,
	kverr.ObjectNotFound:             codeObjectNotFound,
	kverr.ObjectAlreadyExists:        codeObjectAlreadyExists,
	kverr.ReplicaIsNotReady:          codeReplicaIsNotReady,
	kverr.ObjectHasLease:             codeObjectHasLease,
	kverr.NoAvailableHandle:          codeNoAvailableHandle,
	kverr.SegmentNotFound:            codeSegmentNotFound,
	kverr.SegmentAlreadyExists:       codeSegmentAlreadyExists,
	kverr.IllegalClient:              codeIllegalClient,
	kverr.LeaseExpired:               codeLeaseExpired,
	kverr.QuotaExceeded:              codeNoAvailableHandle,
	kverr.ChecksumMismatch:           codeChecksumMismatch,
	kverr.TransferFail:               codeTransferFail,
	kverr.RPCFail:                    codeRPCFail,
	kverr.UnavailableInCurrentStatus: codeUnavailableInCurrentStatus,
	kverr.NotLeader:                  codeRPCFail,
	kverr.ObjectCountExceeded:        codeNoAvailableHandle,
	kverr.Unauthorized:               codeIllegalClient,
	kverr.Unauthenticated:            codeIllegalClient, // Mooncake has no auth codes
	kverr.PermissionDenied:           codeIllegalClient, // a refused role, tenant or data-plane grant
	kverr.PayloadTooLarge:            codeInvalidParams,
	kverr.FileReadFail:               codeFileReadFail,
	kverr.FileWriteFail:              codeFileWriteFail,
	kverr.ClientNotFound:             codeClientNotFound,
}

// codeOf returns the C ABI code for err (0 for nil), through wrapping. A code
// missing from the table is INTERNAL_ERROR.
func codeOf(err error) int {
	if c, ok := mooncakeCodes[kverr.CodeOf(err)]; ok {
		return c
	}
	return codeInternalError
}
