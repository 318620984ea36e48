package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runServeCmd runs `trimtab serve --config profile` until ctx ends and
// returns its result on the channel; its log goes to logs.
func runServeCmd(ctx context.Context, profile string, logs io.Writer, extra ...string) <-chan error {
	root := newRootCmd()
	root.SetOut(io.Discard)
	root.SetErr(logs)
	root.SetArgs(append([]string{"serve", "--config", profile}, extra...))
	errc := make(chan error, 1)
	go func() { errc <- root.ExecuteContext(ctx) }()
	return errc
}

func waitServeErr(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return within 30s")
		return nil
	}
}

// serveProfile is a profile on loopback ports (port 0 unless given), with
// a static endpoints file eps.
func serveProfile(t *testing.T, dir, eps, httpAddr, extAddr, adminAddr string) string {
	t.Helper()
	return writeTestFile(t, dir, "profile.yaml", fmt.Sprintf(`scorers:
  - {type: queue, weight: 1}
endpoints: {mode: static, file: %s}
server:
  http: {addr: %q}
  ext_proc: {addr: %q}
  admin: {addr: %q}
`, eps, httpAddr, extAddr, adminAddr))
}

// TestServeBusyPortNamesTheSetting: with a port already taken, serve
// fails before it logs "serving", and the error names the setting.
func TestServeBusyPortNamesTheSetting(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	eps := writeTestFile(t, dir, "eps.yaml", "endpoints:\n  - {address: 127.0.0.1:1}\n")
	for _, tt := range []struct{ setting, http, ext, admin string }{
		{"server.http.addr", busy.Addr().String(), "127.0.0.1:0", "127.0.0.1:0"},
		{"server.ext_proc.addr", "127.0.0.1:0", busy.Addr().String(), "127.0.0.1:0"},
		{"server.admin.addr", "127.0.0.1:0", "127.0.0.1:0", busy.Addr().String()},
	} {
		t.Run(tt.setting, func(t *testing.T) {
			var logs syncBuffer
			profile := serveProfile(t, t.TempDir(), eps, tt.http, tt.ext, tt.admin)
			err := waitServeErr(t, runServeCmd(context.Background(), profile, &logs))
			want := tt.setting + ": listen tcp " + busy.Addr().String() + ": bind: address already in use"
			if err == nil || err.Error() != want {
				t.Errorf("serve: %v\nwant   %s", err, want)
			}
			if strings.Contains(logs.String(), "trimtab serving") {
				t.Errorf("logged serving before failing:\n%s", logs.String())
			}
		})
	}
}

// TestServeMissingEndpointsFileFailsFirst: a missing endpoints file is
// reported before any listener opens or "serving" is logged.
func TestServeMissingEndpointsFileFailsFirst(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.yaml")
	// The admin port is busy too: the file must be the error reported,
	// because it is checked before anything binds.
	profile := serveProfile(t, dir, missing, "127.0.0.1:0", "127.0.0.1:0", busy.Addr().String())
	var logs syncBuffer
	err = waitServeErr(t, runServeCmd(context.Background(), profile, &logs))
	want := profile + ": endpoints.file: open " + missing + ": no such file or directory"
	if err == nil || err.Error() != want {
		t.Errorf("serve: %v\nwant   %s", err, want)
	}
	if strings.Contains(logs.String(), "trimtab serving") {
		t.Errorf("logged serving before failing:\n%s", logs.String())
	}
}

// TestServeLogsServingOnceUp: "trimtab serving" comes after every
// listener is bound (it names the bound addresses, not ":0") and the first
// endpoint list is in: at that moment the admin server answers and
// /debug/endpoints lists the file's endpoint.
func TestServeLogsServingOnceUp(t *testing.T) {
	dir := t.TempDir()
	eps := writeTestFile(t, dir, "eps.yaml", "endpoints:\n  - {address: 127.0.0.1:1}\n")
	profile := serveProfile(t, dir, eps, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0")
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	errc := runServeCmd(ctx, profile, &logs)
	defer func() {
		cancel()
		if err := waitServeErr(t, errc); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	var line string
	eventually(t, 20*time.Second, "serving logged", func() bool {
		for l := range strings.Lines(logs.String()) {
			if strings.Contains(l, "trimtab serving") {
				line = l
				return true
			}
		}
		select {
		case err := <-errc:
			t.Fatalf("serve returned: %v\n%s", err, logs.String())
		default:
		}
		return false
	})
	admin := logField(line, "admin")
	if admin == "" || strings.HasSuffix(admin, ":0") {
		t.Fatalf("serving line names admin %q, want the bound address:\n%s", admin, line)
	}
	for _, k := range []string{"http", "ext_proc"} {
		if a := logField(line, k); a == "" || strings.HasSuffix(a, ":0") {
			t.Errorf("serving line names %s %q, want the bound address", k, a)
		}
	}
	resp, err := http.Get("http://" + admin + "/debug/endpoints")
	if err != nil {
		t.Fatalf("admin not answering once serving was logged: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "127.0.0.1:1") {
		t.Errorf("/debug/endpoints once serving was logged:\n%s\nwant the endpoint from the file", body)
	}
}

// logField returns key's value in a slog text line.
func logField(line, key string) string {
	for _, kv := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}
