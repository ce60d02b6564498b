package main

import (
	"context"

	"github.com/kvtier/kvtier/appliance"
	"github.com/kvtier/kvtier/master"
)

// inprocDramRecords opens a standalone's DRAM records stream
// (TakeDramRecords) to the master of the same process: the appliance's
// stream goroutine takes the records and acknowledges them by calling the
// master (master.DramRecordsConn), with no handler goroutine, channel or
// copy between them and no HTTP/2 stream over loopback.
func inprocDramRecords(m *master.Master) func(context.Context) (appliance.DramRecordsStream, error) {
	return func(ctx context.Context) (appliance.DramRecordsStream, error) {
		return m.OpenDramRecords(ctx), nil
	}
}
