package main

import "github.com/spf13/cobra"

func newBenchCmd() *cobra.Command {
	return &cobra.Command{Use: "bench", Short: "Measure kvtier beside raw TCP, memcpy and Redis"}
}
func newReplayCmd() *cobra.Command {
	return &cobra.Command{Use: "replay", Short: "Replay a Mooncake request trace"}
}
