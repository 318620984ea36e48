package main

import (
	"log/slog"
	"net"
	"net/netip"

	"github.com/trimtab/trimtab/configs"
)

// warnOpenAdmin logs a warning when the admin server listens beyond
// loopback without a token: /debug/* and /ui are then open to anyone who
// can reach the port.
func warnOpenAdmin(log *slog.Logger, f *configs.File) {
	a := f.Server.Admin
	if !a.Enabled || a.Token != "" || a.TokenFile != "" || loopbackOnly(a.Addr) {
		return
	}
	log.Warn("admin server listens beyond loopback without a token: /debug/* and /ui are open to anyone who can reach it; "+
		"set server.admin.token_file (or server.admin.token), or bind server.admin.addr to 127.0.0.1",
		"addr", a.Addr)
}

// loopbackOnly reports whether addr (host:port) binds loopback only: a
// loopback IP or "localhost". An empty host (every interface) or any other
// name is not.
func loopbackOnly(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
