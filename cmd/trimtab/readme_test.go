package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trimtab/trimtab/configs"
)

// TestReadmeProfileListensOnLoopback: the README's quick-start profile
// validates and binds every server to loopback (the operating guide says
// every port is internal; the defaults :8080 and :9002 are every
// interface).
func TestReadmeProfileListensOnLoopback(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "cat > profile.yaml <<'EOF'\n")
	if !ok {
		t.Fatal("README has no `cat > profile.yaml <<'EOF'` block")
	}
	profile, _, ok := strings.Cut(rest, "\nEOF\n")
	if !ok {
		t.Fatal("README's profile block has no EOF")
	}
	f, err := configs.Parse([]byte(profile))
	if err != nil {
		t.Fatalf("README profile: %v\n%s", err, profile)
	}
	for setting, addr := range map[string]string{
		"server.http.addr": f.Server.HTTP.Addr, "server.ext_proc.addr": f.Server.ExtProc.Addr, "server.admin.addr": f.Server.Admin.Addr,
	} {
		if !loopbackOnly(addr) {
			t.Errorf("README profile: %s %q listens beyond loopback", setting, addr)
		}
	}
}
