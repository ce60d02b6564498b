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
// are drawn only from tier, segment, appliance, op, result and state (and
// kvtier_build_info's version, commit, go_version, tags); never a key or a
// pure caller's client id, so cardinality stays bounded by the number of
// routes, RPC methods, tiers, segments and appliances. kvtier_clients names
// its label state (it was result before 2026-12; dashboards must follow).
// With Config.ProcessCollectors the Go runtime's go_* and the process's
// process_* series are exported too.
//
// # Counters across appliance restarts
//
// SSD counters (kvtier_ssd_*_total) are per appliance and kept monotonic by
// the master's front end: it adds each report's increase and treats a value
// that went down as an appliance restart (see applianceCounters). A departed
// (GONE) appliance's series are no longer exported. The Grafana dashboard in deploy/grafana/kvtier.json uses only
// names exported here (a test checks this).
//
// Importers: rest (serves /metrics), cmd/kvtier (installs the gRPC
// interceptors and feeds AddTransferBytes). metrics imports only the generated
// API types and kverr from kvtier.
package metrics
