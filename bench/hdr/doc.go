// Package hdr is a fixed-size latency histogram with logarithmic buckets in
// the style of HdrHistogram: every power-of-two range is split into 128 linear
// sub-buckets, so a recorded value is known to within 1/128 (< 0.8 %) of
// itself. Recording is one index computation and one increment: no
// allocation, no lock. A Histogram is not safe for concurrent use; give each
// worker its own and Merge them at the end.
//
// Values are int64 (kvtier records nanoseconds); negative values are recorded
// as 0. Quantiles return the midpoint of the bucket that holds the requested
// rank, clamped to the observed min and max.
//
// Importers: bench and replay (and cmd/kvtier through them).
package hdr
