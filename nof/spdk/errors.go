package spdk

import (
	"errors"
	"fmt"
)

// JSON-RPC error codes SPDK uses (include/spdk/jsonrpc.h). Handlers also return
// negative errno values (ErrnoENODEV, ...) and -1 for "wrong framework state";
// treat Code as a plain int.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	// CodeInvalidState is returned for a RUNTIME-only method called before
	// framework_start_init (and for framework_start_init called twice).
	CodeInvalidState = -1
	// ErrnoEEXIST, ErrnoENODEV and ErrnoEINVAL are the negative errno codes SPDK
	// handlers return with strerror text ("File exists", "No such device",
	// "Invalid argument").
	ErrnoEEXIST = -17
	ErrnoENODEV = -19
	ErrnoEINVAL = -22
)

// RPCError is an error object returned by SPDK, passed through unchanged.
// Method is the method of the call it answered (empty for a batch element
// whose method is unknown).
type RPCError struct {
	Code    int
	Message string
	// Data is the optional "data" member; SPDK v26.05 never sends one.
	Data   []byte
	Method string
}

func (e *RPCError) Error() string {
	if e.Method != "" {
		return fmt.Sprintf("spdk %s: rpc error %d: %s", e.Method, e.Code, e.Message)
	}
	return fmt.Sprintf("spdk: rpc error %d: %s", e.Code, e.Message)
}

// IsCode reports whether err is (or wraps) an *RPCError with the given code.
func IsCode(err error, code int) bool {
	var re *RPCError
	return errors.As(err, &re) && re.Code == code
}

// Sentinel errors of the client and the Manager. Test with errors.Is.
var (
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("spdk: client closed")
	// ErrConnLost: the socket broke (EOF, reset, unparsable reply stream) while
	// the call was outstanding. The call may or may not have taken effect in
	// SPDK; the next call reconnects.
	ErrConnLost = errors.New("spdk: rpc connection lost")
	// ErrFraming: the reply stream is not a sequence of JSON objects/arrays.
	ErrFraming = errors.New("spdk: malformed reply stream")
	// ErrBadReply: a reply object matched our id but is not a valid JSON-RPC
	// response (neither result nor error, or an undecodable result).
	ErrBadReply = errors.New("spdk: malformed reply")
	// ErrConflict: SPDK already holds an object of the planned name whose
	// attributes differ from the plan; the Manager will not change or delete it.
	ErrConflict = errors.New("spdk: existing object conflicts with plan")
)
