package proxy

import "github.com/trimtab/trimtab/proxy/settings"

// The servers' configuration lives in package settings, so the profile
// schema can embed it without importing the servers; these names are the
// same types.
type (
	// Config configures the three servers (settings.Config).
	Config = settings.Config
	// HTTPConfig configures the reverse proxy (settings.HTTPConfig).
	HTTPConfig = settings.HTTPConfig
	// ExtProcConfig configures the ext_proc server (settings.ExtProcConfig).
	ExtProcConfig = settings.ExtProcConfig
	// AdminConfig configures the admin server (settings.AdminConfig).
	AdminConfig = settings.AdminConfig
)

// Body send modes of the Envoy ext_proc filter (settings.BodyMode*).
const (
	BodyModeFullDuplex = settings.BodyModeFullDuplex
	BodyModeBuffered   = settings.BodyModeBuffered
	BodyModeNone       = settings.BodyModeNone
)

// DefaultMaxInFlight and MinAdminToken are settings' limits.
const (
	DefaultMaxInFlight = settings.DefaultMaxInFlight
	MinAdminToken      = settings.MinAdminToken
)

// DefaultConfig returns settings.DefaultConfig().
func DefaultConfig() Config { return settings.DefaultConfig() }
