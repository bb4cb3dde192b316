package hub

// MemoryStats returns what b holds: topics, records and the bytes MaxBytes
// counts.
func (b *MemoryHistory) MemoryStats() (topics, records int, bytes int64) { return b.memoryStats() }
