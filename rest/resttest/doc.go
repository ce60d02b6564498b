// Package resttest starts an in-process kvtier cluster for front-end tests
// (the rest and webui test suites): a real master (package master) behind its
// gRPC-shaped server, one storage node whose MEMORY segments are real Go
// memory mounted through the master API, a DataPlane that moves bytes into
// and out of those segments by local copy (what the transfer engine does for a
// segment in the same process), and a rest.Server on a loopback httptest
// server.
//
// Only tests import it. It imports master, rest and the generated API.
package resttest
