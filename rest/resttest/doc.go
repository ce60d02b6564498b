// Package resttest starts an in-process kvtier cluster for front-end tests
// (the rest and webui test suites): a real master (package master) behind its
// gRPC-shaped server, one storage node whose MEMORY segments are real Go
// memory mounted through the master API, a DataPlane that moves bytes into
// and out of those segments by local copy (what the transfer engine does for a
// segment in the same process), and a rest.Server on a loopback httptest
// server. With Options.GRPC the master is also served over real gRPC on
// loopback, so real appliances and SDK clients can join; NVMeAppliance starts
// a real appliance exporting a file-backed namespace over NVMe/TCP.
//
// Only tests import it. It imports master, rest, appliance, dram, the
// generated API and grpc.
package resttest
