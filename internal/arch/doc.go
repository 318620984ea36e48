// Package arch holds the tests that keep the repository's shape: package
// dependencies point the way docs/design.md (rule 1) and
// docs/architecture.md say, and every relative link in the Markdown
// documentation resolves. It has no code of its own.
package arch
