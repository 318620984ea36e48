package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/trimtab/trimtab/configs"
)

// TestWarnOpenAdmin: an admin server reachable beyond loopback without a
// token is warned about at start, naming server.admin.addr and the token
// settings; loopback, a token, or admin off stay quiet.
func TestWarnOpenAdmin(t *testing.T) {
	const token = "0123456789abcdef0123"
	for _, tt := range []struct {
		addr, token string
		off         bool
		warn        bool
	}{
		{":9090", "", false, true}, // every interface
		{"0.0.0.0:9090", "", false, true},
		{"[::]:9090", "", false, true},
		{"10.0.0.7:9090", "", false, true},
		{"admin.example:9090", "", false, true}, // a name may resolve anywhere
		{"127.0.0.1:9090", "", false, false},
		{"127.0.0.2:9090", "", false, false}, // all of 127/8 is loopback
		{"[::1]:9090", "", false, false},
		{"localhost:9090", "", false, false},
		{":9090", token, false, false},
		{":9090", "", true, false},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		f := configs.Default()
		f.Server.Admin.Addr, f.Server.Admin.Token, f.Server.Admin.Enabled = tt.addr, tt.token, !tt.off
		warnOpenAdmin(log, f)
		out := buf.String()
		if !tt.warn {
			if out != "" {
				t.Errorf("%s token=%q off=%v: logged %q, want nothing", tt.addr, tt.token, tt.off, out)
			}
			continue
		}
		for _, w := range []string{"level=WARN", "server.admin.addr", "server.admin.token_file", "addr=" + tt.addr} {
			if !strings.Contains(out, w) {
				t.Errorf("%s: logged %q, want it to contain %q", tt.addr, out, w)
			}
		}
	}
}
