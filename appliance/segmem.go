package appliance

// SegmentMemory returns the memory of the DRAM segment this appliance
// serves under name, nil for any other name. It is a client.SegmentMemory:
// front ends in this process (the Redis protocol's) read objects in place
// through it. The memory stays mapped until Close returns, so callers stop
// using it before Close.
func (a *Appliance) SegmentMemory(name string) []byte {
	if a.engine == nil {
		return nil
	}
	mem, _ := a.segment(name)
	return mem
}
