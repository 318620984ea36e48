// Package arch holds the test that keeps trimtab's package dependencies
// pointing the way DESIGN.md says. It has no code of its own.
package arch
