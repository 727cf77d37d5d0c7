package vsphere

// SetPageSize sets how many objects one inventory call reads, for the test's lifetime.
func SetPageSize(n int32) (restore func()) {
	old := pageSize
	pageSize = n
	return func() { pageSize = old }
}

// Busy reports whether a check holds the turn (is making calls).
func (c *Checker) Busy() bool { return len(c.turn) == 0 }
