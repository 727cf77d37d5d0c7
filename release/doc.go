// Package release holds the checks of what a release ships and of the repository's form, which
// no package of the binary owns: the changelog names the versions it ships (CHANGELOG.md,
// VERSION, the chart's), the Dockerfile and the image build what the Makefile says, the
// Makefile's recipes run as documented, and every import follows docs/architecture.md's layers.
// It has no code: its tests read and build the repository as a whole, from its root.
package release
