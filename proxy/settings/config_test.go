package settings

import (
	"strings"
	"testing"
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
