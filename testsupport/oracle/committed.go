package oracle

// ReadCommitted makes r read read_committed (demo.TopicReader.ReadCommitted):
// the alerts of exactly-once workers' committed transactions only. It
// returns r.
func (r *AlertReader) ReadCommitted() *AlertReader {
	r.r.ReadCommitted()
	return r
}
