// Package kverr owns kvtier's one set of error codes and their translation to
// gRPC and HTTP status.
//
// Every refusal in kvtier is a *Error carrying a Code, the key it concerns and a
// reason. Codes mirror the ErrorCode enum in api/kvtierpb number for number (a
// test checks this). The translation tables below are the only place a Code is
// mapped to a transport status; callers at the edges use ToGRPC/FromGRPC and
// HTTPStatus, which see through wrapping (%w).
//
// Any package may import kverr; it imports nothing of kvtier.
package kverr

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Code is a stable error code. The zero value OK means success.
type Code int32

// The codes, named as in the Mooncake Store design. Keep numbers stable: they
// are on the wire.
const (
	OK                         Code = 0
	InternalError              Code = 1
	InvalidParams              Code = 2
	InvalidKey                 Code = 3
	ObjectNotFound             Code = 4
	ObjectAlreadyExists        Code = 5
	ReplicaIsNotReady          Code = 6
	ObjectHasLease             Code = 7
	NoAvailableHandle          Code = 8
	SegmentNotFound            Code = 9
	SegmentAlreadyExists       Code = 10
	IllegalClient              Code = 11
	LeaseExpired               Code = 12
	QuotaExceeded              Code = 13
	ChecksumMismatch           Code = 14
	TransferFail               Code = 15
	RPCFail                    Code = 16
	UnavailableInCurrentStatus Code = 17
	NotLeader                  Code = 18
	ObjectCountExceeded        Code = 19
	Unauthorized               Code = 20
	PayloadTooLarge            Code = 21
	FileReadFail               Code = 22
	FileWriteFail              Code = 23
	ClientNotFound             Code = 24
	Unauthenticated            Code = 25 // no or unknown credential (internal/auth)
	PermissionDenied           Code = 26 // a known credential whose role or tenant does not allow the call
)

type codeInfo struct {
	name string
	grpc codes.Code
	http int
}

// table is the single translation table: name, gRPC status, HTTP status.
var table = map[Code]codeInfo{
	OK:                         {"OK", codes.OK, http.StatusOK},
	InternalError:              {"INTERNAL_ERROR", codes.Internal, http.StatusInternalServerError},
	InvalidParams:              {"INVALID_PARAMS", codes.InvalidArgument, http.StatusBadRequest},
	InvalidKey:                 {"INVALID_KEY", codes.InvalidArgument, http.StatusBadRequest},
	ObjectNotFound:             {"OBJECT_NOT_FOUND", codes.NotFound, http.StatusNotFound},
	ObjectAlreadyExists:        {"OBJECT_ALREADY_EXISTS", codes.AlreadyExists, http.StatusConflict},
	ReplicaIsNotReady:          {"REPLICA_IS_NOT_READY", codes.Unavailable, http.StatusConflict},
	ObjectHasLease:             {"OBJECT_HAS_LEASE", codes.FailedPrecondition, http.StatusLocked},
	NoAvailableHandle:          {"NO_AVAILABLE_HANDLE", codes.ResourceExhausted, http.StatusInsufficientStorage},
	SegmentNotFound:            {"SEGMENT_NOT_FOUND", codes.NotFound, http.StatusNotFound},
	SegmentAlreadyExists:       {"SEGMENT_ALREADY_EXISTS", codes.AlreadyExists, http.StatusConflict},
	IllegalClient:              {"ILLEGAL_CLIENT", codes.PermissionDenied, http.StatusForbidden},
	LeaseExpired:               {"LEASE_EXPIRED", codes.Aborted, http.StatusConflict},
	QuotaExceeded:              {"QUOTA_EXCEEDED", codes.ResourceExhausted, http.StatusInsufficientStorage},
	ChecksumMismatch:           {"CHECKSUM_MISMATCH", codes.DataLoss, http.StatusBadGateway},
	TransferFail:               {"TRANSFER_FAIL", codes.Unavailable, http.StatusBadGateway},
	RPCFail:                    {"RPC_FAIL", codes.Unavailable, http.StatusBadGateway},
	UnavailableInCurrentStatus: {"UNAVAILABLE_IN_CURRENT_STATUS", codes.FailedPrecondition, http.StatusConflict},
	NotLeader:                  {"NOT_LEADER", codes.Unavailable, http.StatusServiceUnavailable},
	ObjectCountExceeded:        {"OBJECT_COUNT_EXCEEDED", codes.ResourceExhausted, http.StatusInsufficientStorage},
	Unauthorized:               {"UNAUTHORIZED", codes.Unauthenticated, http.StatusUnauthorized},
	PayloadTooLarge:            {"PAYLOAD_TOO_LARGE", codes.InvalidArgument, http.StatusRequestEntityTooLarge},
	FileReadFail:               {"FILE_READ_FAIL", codes.Internal, http.StatusInternalServerError},
	FileWriteFail:              {"FILE_WRITE_FAIL", codes.Internal, http.StatusInternalServerError},
	ClientNotFound:             {"CLIENT_NOT_FOUND", codes.NotFound, http.StatusNotFound},
	Unauthenticated:            {"UNAUTHENTICATED", codes.Unauthenticated, http.StatusUnauthorized},
	PermissionDenied:           {"PERMISSION_DENIED", codes.PermissionDenied, http.StatusForbidden},
}

var byName = func() map[string]Code {
	m := make(map[string]Code, len(table))
	for c, i := range table {
		m[i.name] = c
	}
	return m
}()

// String returns the code's stable name, e.g. "OBJECT_NOT_FOUND".
func (c Code) String() string {
	if i, ok := table[c]; ok {
		return i.name
	}
	return fmt.Sprintf("CODE_%d", int32(c))
}

// ParseCode returns the code with the given name.
func ParseCode(name string) (Code, bool) {
	c, ok := byName[name]
	return c, ok
}

// Codes lists every defined code.
func Codes() []Code {
	out := make([]Code, 0, len(table))
	for c := range table {
		out = append(out, c)
	}
	return out
}

// GRPC returns the gRPC status code for c.
func (c Code) GRPC() codes.Code {
	if i, ok := table[c]; ok {
		return i.grpc
	}
	return codes.Unknown
}

// HTTP returns the HTTP status for c.
func (c Code) HTTP() int {
	if i, ok := table[c]; ok {
		return i.http
	}
	return http.StatusInternalServerError
}

// Error is a refusal: a code, the key it concerns (may be empty) and a reason.
type Error struct {
	Code Code
	Key  string
	Msg  string
}

// New returns an *Error for key with a formatted reason.
func New(code Code, key string, format string, args ...any) *Error {
	return &Error{Code: code, Key: key, Msg: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Code.String())
	if e.Key != "" {
		fmt.Fprintf(&b, " key=%q", printableKey(e.Key))
	}
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	return b.String()
}

// Is makes errors.Is(err, &Error{Code: X}) and errors.Is(err, X.Err()) match by code.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Code == e.Code
	}
	return false
}

// Err returns a bare sentinel for c, for errors.Is comparisons.
func (c Code) Err() error { return &Error{Code: c} }

// CodeOf returns the code carried by err (through wrapping). nil is OK,
// context cancellation and deadlines map to RPC_FAIL, anything else to
// INTERNAL_ERROR.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return RPCFail
	}
	return InternalError
}

// Is reports whether err carries code c.
func Is(err error, c Code) bool { return err != nil && CodeOf(err) == c }

const grpcDomain = "kvtier"

// ToGRPC converts err to a gRPC status error carrying the code name (as an
// ErrorInfo detail) so FromGRPC can restore it exactly.
func ToGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		var e *Error
		if !errors.As(err, &e) {
			return err // already a status from elsewhere
		}
	}
	code := CodeOf(err)
	key := ""
	var e *Error
	if errors.As(err, &e) {
		key = e.Key
	}
	st := status.New(code.GRPC(), strings.ToValidUTF8(err.Error(), "\uFFFD"))
	md := map[string]string{}
	if key != "" {
		// Keys are bytes; protobuf strings must be UTF-8.
		md["key_b64"] = base64.StdEncoding.EncodeToString([]byte(key))
	}
	if e != nil {
		md["msg"] = strings.ToValidUTF8(e.Msg, "\uFFFD")
	}
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: code.String(), Domain: grpcDomain, Metadata: md}); derr == nil {
		st = d
	}
	return st.Err()
}

// FromGRPC converts a gRPC error back to an *Error. Errors that carry no kvtier
// detail (transport failures) become RPC_FAIL with the original message.
func FromGRPC(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == grpcDomain {
			if c, ok := ParseCode(info.Reason); ok {
				key, _ := base64.StdEncoding.DecodeString(info.Metadata["key_b64"])
				return &Error{Code: c, Key: string(key), Msg: info.Metadata["msg"]}
			}
		}
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable:
		return &Error{Code: RPCFail, Msg: st.Message()}
	}
	return &Error{Code: RPCFail, Msg: fmt.Sprintf("%s: %s", st.Code(), st.Message())}
}

// printableKey shortens very long keys in messages.
func printableKey(k string) string {
	const max = 128
	if len(k) > max {
		return k[:max] + fmt.Sprintf("...(%d bytes)", len(k))
	}
	return k
}
