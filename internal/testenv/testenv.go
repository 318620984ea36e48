// Package testenv lets end-to-end tests find the outside programs they
// drive (a browser, a Prometheus server). It is imported by tests only.
//
// A test that needs a program it cannot find skips with the command that
// installs it, so `go test ./...` passes on a bare machine. When the
// environment asks for end-to-end tests (TRIMTAB_E2E=1, which test.sh and
// CI set), a missing program fails the test instead: the gate cannot pass
// by skipping what it is meant to run. Under -short (the inner loop) an
// end-to-end test skips even when its program is there, unless E2E is set.
package testenv

import (
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/chromedp"
)

// E2E is the environment variable that asks for end-to-end tests.
const E2E = "TRIMTAB_E2E"

// Program returns the path of the named program on $PATH. When it is
// missing, the test skips with install as the hint, or fails when E2E is
// set to 1. Under -short without E2E the test skips.
func Program(t testing.TB, name, install string) string {
	t.Helper()
	e2e := os.Getenv(E2E) == "1"
	if testing.Short() && !e2e {
		t.Skip("end-to-end test (needs " + name + "): skipped under -short")
	}
	path, msg, fatal := find(name, install, e2e, exec.LookPath)
	switch {
	case msg == "":
		return path
	case fatal:
		t.Fatal(msg)
	default:
		t.Skip(msg)
	}
	return ""
}

// find is Program's decision: the path when look finds name; otherwise a
// message naming the program and its install command, fatal when e2e.
func find(name, install string, e2e bool, look func(string) (string, error)) (path, msg string, fatal bool) {
	path, err := look(name)
	if err == nil {
		return path, "", false
	}
	if e2e {
		return "", name + " is not installed and " + E2E + "=1 asks for end-to-end tests: " + install, true
	}
	return "", name + " is not installed; skipping (to run this test: " + install + "; set " + E2E + "=1 to make a missing program fail)", false
}

// BrowserOptions are the allocator options every test's headless Chromium
// runs with: the program at path, no sandbox, GPU, first-run or
// background work, its profile in dir (a test's TempDir), then extra.
func BrowserOptions(path, dir string, extra ...chromedp.ExecAllocatorOption) []chromedp.ExecAllocatorOption {
	return append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(dir),
	}, extra...)
}
