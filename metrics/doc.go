// Package metrics owns kvtier's Prometheus instrumentation: one private
// registry per Metrics value (no package-level state, so two masters can run in
// one test process), request counters and latency histograms for the REST API
// (an echo middleware) and the master's gRPC service (interceptors), transfer
// byte counters fed by the data plane, and a collector that turns the master's
// Stats, ListSegments and ListClients answers into tier, eviction, offload and
// SSD-bucket figures at scrape time.
//
// # Naming contract
//
// Every metric name starts with "kvtier_" and ends with its unit ("_bytes",
// "_seconds") or "_total" for counters; gauges of counts carry no unit. Labels
// are drawn only from tier, segment, op and result; never a key or a client
// id, so cardinality stays bounded by the number of routes, RPC methods, tiers
// and segments. The Grafana dashboard in deploy/grafana/kvtier.json uses only
// names exported here (a test checks this).
//
// Importers: rest (serves /metrics), cmd/kvtier (installs the gRPC
// interceptors and feeds AddTransferBytes). metrics imports only the generated
// API types and kverr from kvtier.
package metrics
