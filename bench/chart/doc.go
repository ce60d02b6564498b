// Package chart draws line charts as hand-written SVG 1.1 (no dependency):
// one polyline with point markers per series, a legend, axes with ticks, and
// an optional logarithmic x axis. bench uses it for throughput by object size
// and replay for hit rate by capacity.
//
// Output format: a single <svg> element (xmlns http://www.w3.org/2000/svg,
// width 800, height 480) with <title>, <rect>, <line>, <polyline>, <circle>
// and <text> children; all text is XML-escaped, so the file parses with any
// XML parser. Points with non-finite or (on a log axis) non-positive
// coordinates are skipped.
//
// Importers: bench, replay.
package chart
