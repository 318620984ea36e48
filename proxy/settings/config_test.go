package settings

import (
	"strings"
	"testing"
	"time"
)

func TestTrustedPrefixes(t *testing.T) {
	tests := []struct {
		in   string
		want string // "" when refused
	}{
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"10.1.2.3/8", "10.0.0.0/8"}, // host bits masked
		{" 192.168.1.5 ", "192.168.1.5/32"},
		{"::1", "::1/128"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"}, // IPv4-mapped: 104 - 96 = 8
		{"::ffff:10.0.0.7", "10.0.0.7/32"},
		{"fe80::1%eth0", ""},
		{"10.0.0.0/33", ""},
		{"10.0.0.300", ""},
		{"", ""},
		{"example.com", ""},
	}
	for _, tt := range tests {
		got, err := HTTPConfig{TrustedProxies: []string{tt.in}}.TrustedPrefixes()
		switch {
		case tt.want == "" && (err == nil || !strings.Contains(err.Error(), "server.http.trusted_proxies[0]")):
			t.Errorf("%q: %v, %v; want an error naming server.http.trusted_proxies[0]", tt.in, got, err)
		case tt.want != "" && (err != nil || len(got) != 1 || got[0].String() != tt.want):
			t.Errorf("%q: %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

func FuzzTrustedPrefixes(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "::ffff:1.2.3.4/120", "fe80::1%lo", "1.2.3.4", "/", "::/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := HTTPConfig{TrustedProxies: []string{s}}.TrustedPrefixes()
		if err != nil {
			return
		}
		if len(ps) != 1 || !ps[0].IsValid() || ps[0] != ps[0].Masked() || ps[0].Addr().Zone() != "" {
			t.Fatalf("%q parsed as %v", s, ps)
		}
	})
}

func TestRecordConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if DefaultConfig().Admin.Record.Enabled {
		t.Error("recording is on by default; it must be off")
	}
	tests := []struct {
		name string
		set  func(*RecordConfig)
		want string // "" when valid
	}{
		{"one second window", func(r *RecordConfig) { r.Window = time.Second }, ""},
		{"window under a second", func(r *RecordConfig) { r.Window = 999 * time.Millisecond }, "server.admin.record.window"},
		{"window over a day", func(r *RecordConfig) { r.Window = 25 * time.Hour }, "server.admin.record.window"},
		{"no requests", func(r *RecordConfig) { r.MaxRequests = 0 }, "server.admin.record.max_requests"},
		{"too many requests", func(r *RecordConfig) { r.MaxRequests = MaxRecordRequests + 1 }, "server.admin.record.max_requests"},
		{"no blocks", func(r *RecordConfig) { r.MaxBlocks = 0 }, "server.admin.record.max_blocks"},
		{"too many blocks", func(r *RecordConfig) { r.MaxBlocks = MaxRecordBlocks + 1 }, "server.admin.record.max_blocks"},
		{"largest", func(r *RecordConfig) { r.MaxRequests, r.MaxBlocks = MaxRecordRequests, MaxRecordBlocks }, ""},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		c.Admin.Record.Enabled = true
		tt.set(&c.Admin.Record)
		err := c.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v; want an error naming %s", tt.name, err, tt.want)
		}
	}
}
