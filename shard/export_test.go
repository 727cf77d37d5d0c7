package shard

// FailedSteps is how many steps in a row could not reach the API server.
func (m *Membership) FailedSteps() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failedSteps
}
