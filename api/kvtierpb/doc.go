// Package kvtierpb is the master's gRPC wire contract: master.proto and the
// code protoc generates from it (regenerate with `make generate`; ordinary
// builds never run protoc). Object bytes never travel over this service.
// Every package may import it; only edges (master/grpc.go, client) should
// translate between these messages and their own Go types.
package kvtierpb
