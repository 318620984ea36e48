// Package arch holds the tests that keep the repository's shape: package
// dependencies point the way docs/design.md (rule 1) and
// docs/architecture.md say, every relative link in the Markdown
// documentation resolves, and every slog call logs an error under the one
// key "err". It has no code of its own.
package arch
