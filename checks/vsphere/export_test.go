package vsphere

// SetPageSize sets how many objects one inventory call reads, for the test's lifetime.
func SetPageSize(n int32) (restore func()) {
	old := pageSize
	pageSize = n
	return func() { pageSize = old }
}
